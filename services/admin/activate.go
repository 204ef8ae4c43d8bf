package admin

// Making a document active: reading a candidate (documentBody), previewing
// it, activating it, rolling back to a stored version, and the write every
// change goes through (as the request's token, then waiting until this
// instance applies it).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/routingdoc"
)

// documentBody reads a candidate document: the body itself, YAML
// (application/yaml, text/yaml, text/plain) or JSON (application/json).
func documentBody(c *fiber.Ctx) ([]byte, error) {
	ct := c.Get(fiber.HeaderContentType)
	mt, _, _ := mime.ParseMediaType(ct)
	switch mt {
	case "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain", "application/json":
	default:
		return nil, fiber.NewError(fiber.StatusUnsupportedMediaType,
			fmt.Sprintf("Content-Type %q: send the document as application/yaml or application/json", ct))
	}
	doc := bytes.Clone(c.Request().Body())
	if len(bytes.TrimSpace(doc)) == 0 {
		return nil, fiber.NewError(fiber.StatusBadRequest, "empty body: want a routing document")
	}
	return doc, nil
}

// preview: POST /admin/config/preview: validates a candidate document and
// compares it with the active version; it writes nothing.
func (s *Service) preview(c *fiber.Ctx) error {
	doc, err := documentBody(c)
	if err != nil {
		return bodyError(c, err)
	}
	if err := s.storeReady(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	active, err := s.activeVersion(ctx)
	if err != nil {
		return s.configError(c, err)
	}
	// the gateway's own fields (the health checks' path and method) stay
	// when the candidate omits them, as activate keeps them
	// (a candidate that does not parse keeps nothing: its validation
	// below says why)
	var kept []string
	if d, k, err := routingdoc.KeepRuntimeFields([]byte(active.Document), doc); err == nil {
		doc, kept = d, k
	}
	ans := adminapi.Preview{Errors: []string{}, Warnings: []string{}, ActiveVersion: active.Version, Base: active.ActiveRevision,
		Unchanged: active.Version != 0 && active.SHA256 == routingdoc.Sum(doc)}

	cfg, err := s.validateDocument(doc, "candidate")
	if err != nil {
		ans.Errors = problems(err)
	} else {
		ans.Valid = true
		ans.Warnings = warnings(cfg)
	}
	for _, k := range kept {
		ans.Warnings = append(ans.Warnings, k+" kept from version "+strconv.FormatUint(active.Version, 10)+" (the candidate does not set it)")
	}
	if ch, err := routingdoc.Diff([]byte(active.Document), doc); err == nil {
		ans.Diff = &ch
	}
	return c.JSON(ans)
}

// warnings are what a valid candidate loads with that the operator
// should know.
func warnings(cfg *config.Config) []string {
	out := append([]string{}, cfg.Warnings...)
	for _, name := range cfg.Skipped {
		out = append(out, fmt.Sprintf("optional provider %s is skipped on this admin host: its secrets are not set here", name))
	}
	return out
}

// writeMeta is what every write body may carry.
type writeMeta struct {
	// Comment is kept with the version.
	Comment string `json:"comment"`
	// Base is the active revision the operator based the write on (the
	// preview's base, or active_revision of GET /admin/config); 0: the
	// version active when the write reads it.
	Base uint64 `json:"base"`
}

type activateRequest struct {
	// Document is the routing document: YAML or JSON text, or a JSON
	// object.
	Document json.RawMessage `json:"document"`
	writeMeta
}

// activate: POST /admin/config/activate
func (s *Service) activate(c *fiber.Ctx) error {
	var req activateRequest
	if err := decodeBody(c.Request().Body(), &req); err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	doc, err := documentOf(req.Document)
	if err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	if _, err := s.validateDocument(doc, "candidate"); err != nil {
		return invalidConfig(c, problems(err))
	}
	return s.write(c, func(ctx context.Context, meta routingdoc.Meta) (routingdoc.Version, error) {
		return s.routes.Activate(ctx, doc, meta, req.Base) // keeps the gateway's own fields (KeepRuntimeFields)
	}, req.writeMeta)
}

// documentOf reads the document field of an activation: a string (YAML
// or JSON text) or a JSON object.
func documentOf(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil, errors.New("document is required: the routing document, as YAML or JSON text or a JSON object")
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("document: %w", err)
		}
		if strings.TrimSpace(s) == "" {
			return nil, errors.New("document is empty")
		}
		return []byte(s), nil
	case raw[0] == '{':
		return raw, nil
	}
	return nil, errors.New("document: want YAML or JSON text, or a JSON object")
}

type rollbackRequest struct {
	Version uint64 `json:"version"`
	writeMeta
}

// rollback: POST /admin/config/rollback
func (s *Service) rollback(c *fiber.Ctx) error {
	var req rollbackRequest
	if err := decodeBody(c.Request().Body(), &req); err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	if req.Version == 0 {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "version is required: the version whose document becomes active again")
	}
	return s.write(c, func(ctx context.Context, meta routingdoc.Meta) (routingdoc.Version, error) {
		return s.routes.Rollback(ctx, req.Version, meta, req.Base)
	}, req.writeMeta)
}

// write runs a configuration write as the request's token, then waits
// (at most maxApplyWait) until this instance applies the version written.
func (s *Service) write(c *fiber.Ctx, do func(context.Context, routingdoc.Meta) (routingdoc.Version, error), m writeMeta) error {
	if err := s.storeReady(c); err != nil {
		return err
	}
	by := tokenID(c)
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	// listening before the write: an instance applies it within
	// milliseconds
	col := s.collect()
	if col != nil {
		defer col.Close()
	}
	v, err := do(ctx, routingdoc.Meta{By: by, Comment: m.Comment})
	if errors.Is(err, routingdoc.ErrUnchanged) {
		active, aerr := s.routes.Active(ctx)
		if aerr != nil {
			return s.configError(c, aerr)
		}
		active.Document = ""
		return c.JSON(adminapi.ConfigWrite{Changed: false, Version: versionView(active, true),
			Applied: uint64(s.RoutingVersion()) == active.Version})
	}
	if err != nil {
		s.log.Warn("admin: configuration write refused", "by", by, "err", err)
		return s.configError(c, err)
	}
	s.log.Info("admin: routing configuration version activated", "version", v.Version, "source", v.Source,
		"by", by, "edit", v.Edit)
	written := time.Now()
	applied := s.waitApplied(c.UserContext(), v.Version)
	v.Document = ""
	answer := adminapi.ConfigWrite{Changed: true, Version: versionView(v, true), Applied: applied}
	if col != nil {
		left := max(maxApplyWait-time.Since(written), routingdoc.Settle)
		answer.Instances, answer.Summary = outcomes(col.Wait(c.UserContext(), v.Version, left), v.Version)
		if answer.Summary.Refused > 0 {
			s.log.Warn("admin: routing configuration version refused by some instances", "version", v.Version,
				"refused", answer.Summary.Refused, "applied", answer.Summary.Applied, "pending", answer.Summary.Pending)
		}
	}
	return c.JSON(answer)
}
