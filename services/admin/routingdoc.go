package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"
	"go.yaml.in/yaml/v3"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/routingdoc"
)

// The routing configuration's API (/admin/config...): the fleet's
// versions in switchyard_config (package routingdoc), their history and
// diffs, a preview of a candidate document, and the writes that make a
// new version active: activate, rollback and the small edits. Every write
// goes through routingdoc (validation, compare-and-set from the active
// revision the operator saw, a config event); its answer comes once this
// instance applies the new version (at most maxApplyWait).
//
// This file holds the reads (the active version, the history, one version,
// a diff) and the answers to routingdoc's errors; preview, activate,
// rollback and the write they share are in activate.go, the small
// edits in edits.go.

// versionView is a stored version as the API shows it.
func versionView(v routingdoc.Version, active bool) adminapi.ConfigVersion {
	return adminapi.ConfigVersion{
		Version: v.Version, By: v.By, At: v.At, Comment: v.Comment, Source: string(v.Source),
		FromVersion: v.FromVersion, Replaces: v.Replaces, Edit: v.Edit, SHA256: v.SHA256,
		Active: active, ActiveRevision: v.ActiveRevision, Document: maskInlineSecrets(v.Document),
	}
}

// maskInlineSecrets returns doc with the value of every secret field
// that is not a reference (env:NAME, file:PATH) replaced by [redacted].
// The writes refuse such documents (the loader does); one put in the
// bucket by hand is still never shown.
func maskInlineSecrets(doc string) string {
	if !strings.Contains(doc, "secret") {
		return doc
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		return doc // not a mapping of anything: no secret field to find
	}
	masked := false
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if k.Value == "secret" && v.Kind == yaml.ScalarNode && v.Value != "" && !isSecretRef(v.Value) {
					v.Value, v.Tag, v.Style = "[redacted]", "!!str", 0
					masked = true
					continue
				}
				walk(v)
			}
			return
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&root)
	if !masked {
		return doc
	}
	out, err := yaml.Marshal(&root)
	if err != nil {
		return "[redacted: the document has an inline secret]"
	}
	return string(out)
}

// storeReady answers 503 unless the configuration store can be reached.
func (s *Service) storeReady(c *fiber.Ctx) error {
	if !s.natsUp() {
		return natsDown(c)
	}
	select {
	case <-s.routes.Bound():
		return nil
	default:
		return natsDown(c)
	}
}

// getConfig: GET /admin/config
func (s *Service) getConfig(c *fiber.Ctx) error {
	if err := s.storeReady(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	v, err := s.routes.Active(ctx)
	if err != nil {
		return s.configError(c, err)
	}
	return c.JSON(adminapi.ActiveConfig{ConfigVersion: versionView(v, true), AppliedVersion: s.RoutingVersion(), RoutingError: s.followed.Failure()})
}

// activeVersion is the active version, the zero Version (number 0) when
// there is none.
func (s *Service) activeVersion(ctx context.Context) (routingdoc.Version, error) {
	v, err := s.routes.Active(ctx)
	if errors.Is(err, routingdoc.ErrNoActive) {
		return routingdoc.Version{}, nil
	}
	return v, err
}

// listVersions: GET /admin/config/versions
func (s *Service) listVersions(c *fiber.Ctx) error {
	if err := s.storeReady(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	active, err := s.activeVersion(ctx)
	if err != nil {
		return s.configError(c, err)
	}
	vs, err := s.routes.List(ctx)
	if err != nil {
		return s.configError(c, err)
	}
	out := make([]adminapi.ConfigVersion, 0, len(vs))
	for _, v := range vs {
		if v.Version == active.Version {
			v.ActiveRevision = active.ActiveRevision
		}
		out = append(out, versionView(v, v.Version == active.Version))
	}
	return c.JSON(adminapi.VersionList{Versions: out, ActiveVersion: active.Version, AppliedVersion: s.RoutingVersion()})
}

// versionParam reads a version number.
func versionParam(name, s string) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: want a version number, got %q", name, s)
	}
	return n, nil
}

// getVersion: GET /admin/config/versions/{n}
func (s *Service) getVersion(c *fiber.Ctx) error {
	n, err := versionParam("version", c.Params("n"))
	if err != nil || n == 0 {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "version: want a version number (1, 2, ...)")
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
	v, err := s.routes.Get(ctx, n)
	if err != nil {
		return s.configError(c, err)
	}
	if v.Version == active.Version {
		v.ActiveRevision = active.ActiveRevision
	}
	return c.JSON(versionView(v, v.Version == active.Version))
}

// diffVersions: GET /admin/config/diff?from=N&to=M. to defaults to the
// active version, from to the version to replaced (the one active before
// it); from=0 compares with an empty document.
func (s *Service) diffVersions(c *fiber.Ctx) error {
	var from, to uint64
	var err error
	fromSet := c.Query("from") != ""
	if fromSet {
		if from, err = versionParam("from", c.Query("from")); err != nil {
			return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
		}
	}
	if c.Query("to") != "" {
		if to, err = versionParam("to", c.Query("to")); err != nil || to == 0 {
			return apiError(c, fiber.StatusBadRequest, codeBadRequest, "to: want a version number (1, 2, ...)")
		}
	}
	if err := s.storeReady(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	var newer routingdoc.Version
	if to == 0 {
		newer, err = s.routes.Active(ctx)
	} else {
		newer, err = s.routes.Get(ctx, to)
	}
	if err != nil {
		return s.configError(c, err)
	}
	if !fromSet {
		from = newer.Replaces
	}
	var older routingdoc.Version
	if from != 0 {
		if older, err = s.routes.Get(ctx, from); err != nil {
			return s.configError(c, err)
		}
	}
	ch, err := routingdoc.Diff([]byte(older.Document), []byte(newer.Document))
	if err != nil {
		return s.configError(c, err)
	}
	return c.JSON(adminapi.ConfigDiff{From: from, To: newer.Version, Changes: ch})
}

// configError answers a routingdoc error.
func (s *Service) configError(c *fiber.Ctx, err error) error {
	msg := cleanMessage(err.Error())
	switch {
	case errors.Is(err, routingdoc.ErrInvalid):
		return invalidConfig(c, problems(err))
	case errors.Is(err, routingdoc.ErrNoActive):
		return apiError(c, fiber.StatusNotFound, codeNotFound,
			"no routing configuration version is active yet: the first service to start imports its file's (or POST /admin/config/activate)")
	case errors.Is(err, routingdoc.ErrNotFound):
		return apiError(c, fiber.StatusNotFound, codeNotFound, msg)
	case errors.Is(err, routingdoc.ErrConflict):
		return apiError(c, fiber.StatusConflict, codeConflict,
			msg+": preview again against the active version (GET /admin/config) and retry with its active_revision as base")
	case errors.Is(err, routingdoc.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return apiError(c, fiber.StatusServiceUnavailable, codeNATSUnavailable,
			"NATS did not answer: "+msg+"; if this was an activation it may or may not have happened: GET /admin/config tells")
	}
	return apiError(c, fiber.StatusInternalServerError, codeInternal, msg)
}

// invalidConfig answers 400 invalid_config with the loader's messages.
func invalidConfig(c *fiber.Ctx, errs []string) error {
	msg := "the document is not a valid routing configuration: " + strings.Join(errs, "; ")
	return c.Status(fiber.StatusBadRequest).JSON(adminapi.ErrorAnswer{Error: adminapi.ErrorDetail{Code: codeInvalidConfig, Message: msg, Errors: errs}})
}

// bodyError answers an error of documentBody.
func bodyError(c *fiber.Ctx, err error) error {
	var fe *fiber.Error
	if errors.As(err, &fe) && fe.Code == fiber.StatusUnsupportedMediaType {
		return apiError(c, fe.Code, codeUnsupportedMedia, fe.Message)
	}
	return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
}

// problems lists the messages of a validation error, one per problem, as
// the file loader words them.
func problems(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				if x != routingdoc.ErrInvalid {
					walk(x)
				}
			}
			return
		}
		for _, line := range strings.Split(cleanMessage(e.Error()), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				out = append(out, line)
			}
		}
	}
	walk(err)
	return out
}

// cleanMessage drops routingdoc's package prefixes from a message.
func cleanMessage(s string) string {
	s = strings.ReplaceAll(s, routingdoc.ErrInvalid.Error()+": ", "")
	return strings.ReplaceAll(s, "routingdoc: ", "")
}
