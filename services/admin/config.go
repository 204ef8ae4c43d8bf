package admin

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
	"go.yaml.in/yaml/v3"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/configstore"
)

// The routing configuration's API (/admin/config...): the fleet's
// versions in switchyard_config (package configstore), their history and
// diffs, a preview of a candidate document, and the writes that make a
// new version active: activate, rollback and the small edits. Every write
// goes through configstore (validation, compare-and-set from the active
// revision the operator saw, a config event); its answer comes once this
// instance applies the new version (at most maxApplyWait).

// versionView is a stored version as the API shows it.
func versionView(v configstore.Version, active bool) adminapi.ConfigVersion {
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
func (s *Service) activeVersion(ctx context.Context) (configstore.Version, error) {
	v, err := s.routes.Active(ctx)
	if errors.Is(err, configstore.ErrNoActive) {
		return configstore.Version{}, nil
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
	var newer configstore.Version
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
	var older configstore.Version
	if from != 0 {
		if older, err = s.routes.Get(ctx, from); err != nil {
			return s.configError(c, err)
		}
	}
	ch, err := configstore.Diff([]byte(older.Document), []byte(newer.Document))
	if err != nil {
		return s.configError(c, err)
	}
	return c.JSON(adminapi.ConfigDiff{From: from, To: newer.Version, Changes: ch})
}

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
	if d, k, err := configstore.KeepRuntimeFields([]byte(active.Document), doc); err == nil {
		doc, kept = d, k
	}
	ans := adminapi.Preview{Errors: []string{}, Warnings: []string{}, ActiveVersion: active.Version, Base: active.ActiveRevision,
		Unchanged: active.Version != 0 && active.SHA256 == configstore.Sum(doc)}

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
	if ch, err := configstore.Diff([]byte(active.Document), doc); err == nil {
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
	return s.write(c, func(ctx context.Context, meta configstore.Meta) (configstore.Version, error) {
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
	return s.write(c, func(ctx context.Context, meta configstore.Meta) (configstore.Version, error) {
		return s.routes.Rollback(ctx, req.Version, meta, req.Base)
	}, req.writeMeta)
}

type stepRequest struct {
	Active *bool `json:"active"`
	writeMeta
}

// setStep: POST /admin/config/chains/{chain}/steps/{i} {"active":false}
func (s *Service) setStep(c *fiber.Ctx) error {
	chain := pathParam(c, "chain")
	i, err := strconv.Atoi(c.Params("i"))
	if err != nil || i < 0 {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, fmt.Sprintf("step: want a step index (0, 1, ...), got %q", c.Params("i")))
	}
	var req stepRequest
	if err := decodeBody(c.Request().Body(), &req); err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	if req.Active == nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, `active is required: {"active": false} switches the step off, true on`)
	}
	return s.edit(c, req.writeMeta, func(doc []byte) ([]byte, error) {
		return configstore.SetStepActive(doc, chain, i, *req.Active)
	})
}

type keyFieldsRequest struct {
	Priority *int `json:"priority"`
	Weight   *int `json:"weight"`
	// Enabled false takes the key out of rotation (and out of the
	// prober's checks) without removing it.
	Enabled *bool `json:"enabled"`
	writeMeta
}

// setKeyFields: PATCH /admin/config/providers/{name}/keys/{id}
// {"priority":1,"weight":3,"enabled":false}
func (s *Service) setKeyFields(c *fiber.Ctx) error {
	provider, id := strings.Clone(c.Params("name")), strings.Clone(c.Params("id"))
	var req keyFieldsRequest
	if err := decodeBody(c.Request().Body(), &req); err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	if req.Priority == nil && req.Weight == nil && req.Enabled == nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "give priority, weight, enabled or several (a key's secret changes through PUT /admin/providers/{name}/keys/{id})")
	}
	fields := []struct {
		name string
		v    any
		set  bool
	}{
		{"priority", deref(req.Priority), req.Priority != nil},
		{"weight", deref(req.Weight), req.Weight != nil},
		{"enabled", req.Enabled != nil && *req.Enabled, req.Enabled != nil},
	}
	return s.edit(c, req.writeMeta, func(doc []byte) ([]byte, error) {
		var err error
		for _, f := range fields {
			if !f.set {
				continue
			}
			if doc, err = configstore.SetKeyField(doc, provider, id, f.name, f.v); err != nil {
				return nil, err
			}
		}
		return doc, nil
	})
}

type addKeyRequest struct {
	ID string `json:"id"`
	// Secret is a reference (env:NAME, file:PATH), never a secret.
	Secret   string `json:"secret"`
	Priority *int   `json:"priority"`
	Weight   *int   `json:"weight"`
	Enabled  *bool  `json:"enabled"`
	writeMeta
}

func deref(n *int) int {
	if n == nil {
		return 0
	}
	return *n
}

// isSecretRef reports whether s is a secret reference (env:NAME,
// file:PATH).
func isSecretRef(s string) bool {
	name, env := strings.CutPrefix(s, "env:")
	path, file := strings.CutPrefix(s, "file:")
	return (env && name != "") || (file && path != "")
}

// addKey: POST /admin/config/providers/{name}/keys {"id","secret":"env:NAME",...}
func (s *Service) addKey(c *fiber.Ctx) error {
	provider := strings.Clone(c.Params("name"))
	var req addKeyRequest
	if err := decodeBody(c.Request().Body(), &req); err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	if !isSecretRef(req.Secret) {
		// never quoted: it may be a secret
		return apiError(c, fiber.StatusBadRequest, codeBadRequest,
			"secret: give a reference (env:NAME or file:PATH), never the secret itself; to change a key's secret at run time use PUT /admin/providers/{name}/keys/{id}")
	}
	key := map[string]any{"id": req.ID, "secret": req.Secret}
	if req.Priority != nil {
		key["priority"] = *req.Priority
	}
	if req.Weight != nil {
		key["weight"] = *req.Weight
	}
	if req.Enabled != nil {
		key["enabled"] = *req.Enabled
	}
	return s.edit(c, req.writeMeta, func(doc []byte) ([]byte, error) {
		return configstore.AddKey(doc, provider, key)
	})
}

type tripRulesRequest struct {
	// Rules: name -> {match, class, ttl}; {} no rules for the provider
	// (not even the global ones); null removes the provider's own rules
	// (the global ones apply).
	Rules json.RawMessage `json:"rules"`
	writeMeta
}

// setTripRules: PUT /admin/config/providers/{name}/trip_on {"rules":{...}}
func (s *Service) setTripRules(c *fiber.Ctx) error {
	provider := strings.Clone(c.Params("name"))
	var req tripRulesRequest
	if err := decodeBody(c.Request().Body(), &req); err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	if len(req.Rules) == 0 {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest,
			`rules is required: {"rules": {"<name>": {"match": "...", "class": "...", "ttl": "2h"}}}; {} for none, null for the global rules`)
	}
	var rules map[string]any
	if err := json.Unmarshal(req.Rules, &rules); err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, "rules: want an object of name -> {match, class, ttl}: "+err.Error())
	}
	return s.edit(c, req.writeMeta, func(doc []byte) ([]byte, error) {
		return configstore.SetTripRules(doc, provider, rules)
	})
}

// edit applies fn to the active document as a new version (Store.Edit).
func (s *Service) edit(c *fiber.Ctx, m writeMeta, fn func(doc []byte) ([]byte, error)) error {
	return s.write(c, func(ctx context.Context, meta configstore.Meta) (configstore.Version, error) {
		return s.routes.Edit(ctx, m.Base, meta, fn)
	}, m)
}

// write runs a configuration write as the request's token, then waits
// (at most maxApplyWait) until this instance applies the version written.
func (s *Service) write(c *fiber.Ctx, do func(context.Context, configstore.Meta) (configstore.Version, error), m writeMeta) error {
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
	v, err := do(ctx, configstore.Meta{By: by, Comment: m.Comment})
	if errors.Is(err, configstore.ErrUnchanged) {
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
		left := max(maxApplyWait-time.Since(written), configstore.Settle)
		answer.Instances, answer.Summary = outcomes(col.Wait(c.UserContext(), v.Version, left), v.Version)
		if answer.Summary.Refused > 0 {
			s.log.Warn("admin: routing configuration version refused by some instances", "version", v.Version,
				"refused", answer.Summary.Refused, "applied", answer.Summary.Applied, "pending", answer.Summary.Pending)
		}
	}
	return c.JSON(answer)
}

// configError answers a configstore error.
func (s *Service) configError(c *fiber.Ctx, err error) error {
	msg := cleanMessage(err.Error())
	switch {
	case errors.Is(err, configstore.ErrInvalid):
		return invalidConfig(c, problems(err))
	case errors.Is(err, configstore.ErrNoActive):
		return apiError(c, fiber.StatusNotFound, codeNotFound,
			"no routing configuration version is active yet: the first service to start imports its file's (or POST /admin/config/activate)")
	case errors.Is(err, configstore.ErrNotFound):
		return apiError(c, fiber.StatusNotFound, codeNotFound, msg)
	case errors.Is(err, configstore.ErrConflict):
		return apiError(c, fiber.StatusConflict, codeConflict,
			msg+": preview again against the active version (GET /admin/config) and retry with its active_revision as base")
	case errors.Is(err, configstore.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
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
				if x != configstore.ErrInvalid {
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

// cleanMessage drops configstore's package prefixes from a message.
func cleanMessage(s string) string {
	s = strings.ReplaceAll(s, configstore.ErrInvalid.Error()+": ", "")
	return strings.ReplaceAll(s, "configstore: ", "")
}
