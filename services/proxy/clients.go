package proxy

import (
	"crypto/sha256"
	"strings"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/route"
	"switchyard.dev/shared/config"
)

// clientKey is a gateway key a caller may present, with what it may use.
type clientKey struct {
	id        string
	plan      string // "" for none
	all       bool
	models    map[string]bool // names, aliases, "chain:<name>"
	providers map[string]bool // "<provider>/*"
}

// clientKeys authenticates callers. Keys are looked up by their SHA-256,
// so the comparison never depends on how much of a secret matched.
type clientKeys struct {
	required bool
	byHash   map[[32]byte]*clientKey
}

func newClientKeys(cfg *config.Config) *clientKeys {
	ck := &clientKeys{byHash: map[[32]byte]*clientKey{}}
	ck.required = cfg.ClientKeyRequired()
	for _, c := range cfg.Clients {
		k := &clientKey{id: c.ID, plan: c.Plan, models: map[string]bool{}, providers: map[string]bool{}}
		for _, m := range c.Models {
			switch {
			case m == "*":
				k.all = true
			case strings.HasSuffix(m, "/*"):
				k.providers[strings.TrimSuffix(m, "/*")] = true
			default:
				k.models[m] = true
			}
		}
		ck.byHash[sha256.Sum256([]byte(c.Value.Reveal()))] = k
	}
	return ck
}

// authenticate returns the caller's key (nil when keys are not required)
// and whether the caller may proceed. It reads Authorization: Bearer and
// x-api-key (what the Anthropic SDK sends).
func (ck *clientKeys) authenticate(c *fiber.Ctx) (*clientKey, bool) {
	if !ck.required {
		return nil, true
	}
	presented := c.Get(fiber.HeaderAuthorization)
	if len(presented) > 7 && strings.EqualFold(presented[:7], "bearer ") {
		presented = presented[7:]
	} else {
		presented = c.Get("X-Api-Key")
	}
	if presented == "" {
		return nil, false
	}
	k, ok := ck.byHash[sha256.Sum256([]byte(presented))]
	return k, ok
}

// allows reports whether the key may use the requested model: by its name,
// or when every step of it is on a provider the key may use.
func (k *clientKey) allows(model string, steps []route.Step) bool {
	if k.all || k.models[model] {
		return true
	}
	if len(k.providers) == 0 {
		return false
	}
	for i := range steps {
		if steps[i].Provider == nil || !k.providers[steps[i].Provider.Name] {
			return false
		}
	}
	return true
}
