// Package clientkey authenticates the gateway's callers: the client keys
// of the configuration, looked up by the SHA-256 of what a caller
// presents, with what each key (and its plan) may use.
package clientkey

import (
	"bytes"
	"crypto/sha256"
	"strings"

	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
)

// Key is a gateway key a caller may present, with what it may use:
// what its own models list allows and, when its plan lists models, what
// the plan allows too.
type Key struct {
	ID   string
	Plan string // "" for none
	// region the key's requests prefer (or require) when they name none
	Region         string
	RegionRequired bool
	own            modelSet
	// planModels is nil when the plan does not restrict models.
	planModels *modelSet
	// Guardrails and PlanGuardrails are the key's and its plan's
	// guardrails lists (clients[].guardrails, plans.<name>.guardrails).
	Guardrails, PlanGuardrails []string
	// Cache and PlanCache are the key's and its plan's cache policies.
	Cache, PlanCache config.CachePolicy
}

// modelSet is a models list: names, aliases, "chain:<name>",
// "<provider>/*", or "*".
type modelSet struct {
	all       bool
	models    map[string]bool // names, aliases, "chain:<name>"
	providers map[string]bool // "<provider>/*"
}

// newModelSet reads a models list; a chain named either way is allowed by
// both of its names when both resolve to it (twin: route.Table.ChainTwin).
func newModelSet(list []string, twin func(string) string) modelSet {
	ms := modelSet{models: map[string]bool{}, providers: map[string]bool{}}
	for _, m := range list {
		switch {
		case m == "*":
			ms.all = true
		case strings.HasSuffix(m, "/*"):
			ms.providers[strings.TrimSuffix(m, "/*")] = true
		default:
			ms.models[m] = true
			if t := twin(m); t != "" {
				ms.models[t] = true
			}
		}
	}
	return ms
}

// Keys authenticates callers. Keys are looked up by their SHA-256,
// so the comparison never depends on how much of a secret matched.
type Keys struct {
	required bool // callers must present a key (Required)
	byHash   map[[32]byte]*Key
	byID     map[string]*Key // for route explanations (ByID)
}

// New builds the keys of cfg's clients, their model lists resolved
// against table; required: callers must present one (the configuration's
// ClientKeyRequired).
func New(cfg *config.Config, table *route.Table, required bool) *Keys {
	ck := &Keys{byHash: map[[32]byte]*Key{}, byID: map[string]*Key{}}
	ck.required = required
	for _, c := range cfg.Clients {
		k := &Key{ID: c.ID, Plan: c.Plan, own: newModelSet(c.Models, table.ChainTwin), Region: c.Region, RegionRequired: c.RegionRequired,
			Guardrails: c.Guardrails, Cache: c.Cache}
		if p := cfg.Plan(c.Plan); p != nil {
			k.PlanGuardrails, k.PlanCache = p.Guardrails, p.Cache
			if len(p.Models) > 0 {
				ms := newModelSet(p.Models, table.ChainTwin)
				k.planModels = &ms
			}
		}
		ck.byHash[sha256.Sum256([]byte(c.Value.Reveal()))] = k
		ck.byID[c.ID] = k
	}
	return ck
}

// Authenticate returns the caller's key (nil when keys are not required)
// and whether the caller may proceed. It reads Authorization: Bearer and
// x-api-key (what the Anthropic SDK sends).
//
// Where keys are not required, a caller presenting a configured key is
// still that key's (its plan's limits and budgets apply, its usage is
// attributed to it); one presenting none, or another, is anonymous.
func (ck *Keys) Authenticate(h *fasthttp.RequestHeader) (*Key, bool) {
	if !ck.required && len(ck.byHash) == 0 {
		return nil, true
	}
	presented := h.Peek(fasthttp.HeaderAuthorization)
	if len(presented) > 7 && bytes.EqualFold(presented[:7], bearer) {
		presented = presented[7:]
	} else {
		presented = h.Peek("X-Api-Key")
	}
	if len(presented) == 0 {
		return nil, !ck.required
	}
	k, ok := ck.byHash[sha256.Sum256(presented)]
	if !ok && !ck.required {
		return nil, true
	}
	return k, ok
}

// Allows reports whether the key may use the requested model: its own
// list and its plan's (when the plan lists models) must both allow it.
func (k *Key) Allows(model string, steps []route.Step) bool {
	return k.own.allows(model, steps) && (k.planModels == nil || k.planModels.allows(model, steps))
}

// AllowsProvider reports whether the key may use any path of a provider
// (passthrough): "*" or "<provider>/*" in its list, and its plan's.
func (k *Key) AllowsProvider(name string) bool {
	return k.own.allowsProvider(name) && (k.planModels == nil || k.planModels.allowsProvider(name))
}

func (ms *modelSet) allowsProvider(name string) bool { return ms.all || ms.providers[name] }

// allows reports whether the set allows model: by its name, or when every
// step of it is on a provider the set allows.
func (ms *modelSet) allows(model string, steps []route.Step) bool {
	if ms.all || ms.models[model] {
		return true
	}
	if len(ms.providers) == 0 {
		return false
	}
	for i := range steps {
		if steps[i].Provider == nil || !ms.providers[steps[i].Provider.Name] {
			return false
		}
	}
	return true
}

var bearer = []byte("bearer ")

// Required reports whether callers must present a key.
func (ck *Keys) Required() bool { return ck.required }

// ByID is the key of a client id (nil: none), for route explanations.
func (ck *Keys) ByID(id string) *Key { return ck.byID[id] }

// AllowsAll reports whether the key, and its plan, allow every model.
func (k *Key) AllowsAll() bool { return k.own.all && (k.planModels == nil || k.planModels.all) }
