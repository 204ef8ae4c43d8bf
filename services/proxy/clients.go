package proxy

import (
	"crypto/sha256"
	"strings"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
)

// clientKey is a gateway key a caller may present, with what it may use:
// what its own models list allows and, when its plan lists models, what
// the plan allows too.
type clientKey struct {
	id   string
	plan string // "" for none
	// region the key's requests prefer (or require) when they name none
	region         string
	regionRequired bool
	own            modelSet
	// planModels is nil when the plan does not restrict models.
	planModels *modelSet
	// guardrails and planGuardrails are the key's and its plan's
	// guardrails lists (clients[].guardrails, plans.<name>.guardrails).
	guardrails, planGuardrails []string
	// cache and planCache are the key's and its plan's cache policies.
	cache, planCache config.CachePolicy
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

// clientKeys authenticates callers. Keys are looked up by their SHA-256,
// so the comparison never depends on how much of a secret matched.
type clientKeys struct {
	required bool
	byHash   map[[32]byte]*clientKey
	byID     map[string]*clientKey // for route explanations
}

func newClientKeys(cfg *config.Config, table *route.Table) *clientKeys {
	ck := &clientKeys{byHash: map[[32]byte]*clientKey{}, byID: map[string]*clientKey{}}
	ck.required = cfg.ClientKeyRequired()
	for _, c := range cfg.Clients {
		k := &clientKey{id: c.ID, plan: c.Plan, own: newModelSet(c.Models, table.ChainTwin), region: c.Region, regionRequired: c.RegionRequired,
			guardrails: c.Guardrails, cache: c.Cache}
		if p := cfg.Plan(c.Plan); p != nil {
			k.planGuardrails, k.planCache = p.Guardrails, p.Cache
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

// authenticate returns the caller's key (nil when keys are not required)
// and whether the caller may proceed. It reads Authorization: Bearer and
// x-api-key (what the Anthropic SDK sends).
//
// Where keys are not required, a caller presenting a configured key is
// still that key's (its plan's limits and budgets apply, its usage is
// attributed to it); one presenting none, or another, is anonymous.
func (ck *clientKeys) authenticate(c *fiber.Ctx) (*clientKey, bool) {
	if !ck.required && len(ck.byHash) == 0 {
		return nil, true
	}
	presented := c.Get(fiber.HeaderAuthorization)
	if len(presented) > 7 && strings.EqualFold(presented[:7], "bearer ") {
		presented = presented[7:]
	} else {
		presented = c.Get("X-Api-Key")
	}
	if presented == "" {
		return nil, !ck.required
	}
	k, ok := ck.byHash[sha256.Sum256([]byte(presented))]
	if !ok && !ck.required {
		return nil, true
	}
	return k, ok
}

// allows reports whether the key may use the requested model: its own
// list and its plan's (when the plan lists models) must both allow it.
func (k *clientKey) allows(model string, steps []route.Step) bool {
	return k.own.allows(model, steps) && (k.planModels == nil || k.planModels.allows(model, steps))
}

// allowsProvider reports whether the key may use any path of a provider
// (passthrough): "*" or "<provider>/*" in its list, and its plan's.
func (k *clientKey) allowsProvider(name string) bool {
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
