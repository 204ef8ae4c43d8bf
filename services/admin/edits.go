package admin

// The small edits of the active document (a chain step on or off, a key's
// fields, a new key, a provider's trip_on rules), each written as a new
// version through Service.edit.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/shared/routingdoc"
)

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
		return routingdoc.SetStepActive(doc, chain, i, *req.Active)
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
			if doc, err = routingdoc.SetKeyField(doc, provider, id, f.name, f.v); err != nil {
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
		return routingdoc.AddKey(doc, provider, key)
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
		return routingdoc.SetTripRules(doc, provider, rules)
	})
}

// edit applies fn to the active document as a new version (Store.Edit).
func (s *Service) edit(c *fiber.Ctx, m writeMeta, fn func(doc []byte) ([]byte, error)) error {
	return s.write(c, func(ctx context.Context, meta routingdoc.Meta) (routingdoc.Version, error) {
		return s.routes.Edit(ctx, m.Base, meta, fn)
	}, m)
}
