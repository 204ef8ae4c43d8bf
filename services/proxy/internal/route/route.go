// Package route turns a requested model name into a route (its steps, each a
// provider and a model, and the policy that orders them), walks a request's
// candidates in the policy's order (select.go), and chooses a key for each
// step (keys.go): by priority, then round robin, weighted (smooth or by a
// sticky hash) or least latency among keys of equal priority, skipping what
// the hold engine says is held. Everything is computed when the
// configuration is loaded (Build, build.go); a lookup is a map read and a
// few atomic loads and adds, with no allocation.
package route

import (
	"strings"
	"sync/atomic"

	"switchyard.dev/shared/headroom"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/usage"
)

// Provider is one configured upstream with its keys.
type Provider struct {
	Name    string
	Adapter *provider.Adapter
	// Index is the provider's position in the configuration.
	Index int
	// Region is where the provider serves from ("" none).
	Region string
	// Budgeted says the provider has a budget (Request.Budget reads it).
	Budgeted bool
	// Unlisted says the provider takes models its configuration does not
	// list (providers[].allow_unlisted_models): "<provider>/<model>" of an
	// unlisted model resolves to it on demand.
	Unlisted bool
	// HashOn is the attribute its weighted key selection hashes ("": smooth
	// weighted round robin); Request.KeyHash carries the request's.
	HashOn string
	// Dialect is the family of rate-limit headers its answers carry.
	Dialect headroom.Dialect
	// Keys are ordered by priority (highest first, or lowest first with
	// priority_order lowest_first).
	Keys      []*Key
	groups    []*group
	selection keySelection
	// sick has the bit of each key whose own health checks fail (by
	// index): Pick tries them after the others.
	sick   atomic.Uint64
	health atomic.Uint32 // a Health
}

// Health is the provider's health as last applied (SetHealth).
func (p *Provider) Health() Health { return Health(p.health.Load()) }

// Step is one target of a resolved model: a provider and the model on it.
type Step struct {
	Provider *Provider // nil when the step's provider is not configured (skipped)
	// Model is the model's name in the configuration; Upstream the name
	// sent to the provider.
	Model    string
	Upstream string
	// ModelIndex is the model's position in its provider's models (-1:
	// an unlisted model resolved on demand).
	ModelIndex int
	Kind       string // chat or embedding
	Active     bool
	// Weight is the step's share under the weighted strategy.
	Weight int
	// Caps are the model's capabilities (capsKnown: declared);
	// ContextWindow and MaxOutput its limits in tokens (0: unknown).
	Caps          Caps
	capsKnown     bool
	ContextWindow int64
	MaxOutput     int64
	// Latency is the model's observed latency on the provider.
	Latency *Latency
	// Rooms are the headroom of the model on each key, by key index (nil
	// without a headroom book, and for an unlisted model's step).
	Rooms  []*headroom.Slot
	price  usage.Price
	priced bool
}

// Route is what a model name resolves to: its steps and the policy that
// orders them. Aliases share their target's route.
type Route struct {
	// Name is the id it was built for: chain:<name>, provider/model or a
	// plain model name.
	Name string
	// Kind is chain, model (one provider/model) or plain (a model name
	// several providers may serve).
	Kind   string
	Steps  []Step
	Policy Policy

	// Dynamic marks an on-demand route of an unlisted model (built for one
	// request).
	Dynamic bool
	// ReadsBody says selection depends on what the body asks (a step
	// declares capabilities or limits, the strategy estimates cost, or the
	// route fails closed): only then is the body scanned for Needs.
	ReadsBody bool

	wheel        []uint8 // step indices by weight (weighted strategy)
	next         atomic.Uint32
	explore      atomic.Uint32
	exploreEvery uint32 // 0: never explore
}

// Usable reports whether the step takes traffic.
func (s *Step) Usable() bool { return s.Active && s.Provider != nil }

// Table resolves model names. It is immutable once built.
type Table struct {
	byName    map[string]*Route
	Providers []*Provider
	// Names are the model ids the gateway serves, for GET /v1/models, in a
	// stable order.
	Names []ModelName

	visible atomic.Pointer[[]ModelName] // nil: all of Names

	// single is the policy of a one-step route: the routing defaults
	// (fail_closed) with nothing to order.
	single Policy
}

// Options are what Build takes besides the configuration.
type Options struct {
	// Latency keeps the latency averages across tables (nil: a new book).
	Latency *LatencyBook
	// Prices are the price table least_cost and budget_aware read (nil:
	// no step is priced).
	Prices *usage.Table
	// Headroom keeps what the providers' rate-limit headers say across
	// tables (nil: no headroom is known).
	Headroom *headroom.Book
}

// ModelName is one id listed by GET /v1/models.
type ModelName struct {
	ID      string
	OwnedBy string // provider name, or "switchyard" for chains and aliases
	Kind    string
}

// Provider returns a provider by name (nil when there is none).
func (t *Table) Provider(name string) *Provider {
	for _, p := range t.Providers {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Key returns a provider's key by id (nil when there is none).
func (t *Table) Key(provider, keyID string) *Key {
	for _, p := range t.Providers {
		if p.Name != provider {
			continue
		}
		for _, k := range p.Keys {
			if k.ID == keyID {
				return k
			}
		}
	}
	return nil
}

// Resolve returns the route of a requested model name: a configured one,
// or "<provider>/<model>" of a model a provider that allows unlisted models
// does not list (built for the request: Dynamic).
func (t *Table) Resolve(name string) (*Route, bool) {
	if rt, ok := t.byName[name]; ok {
		return rt, true
	}
	return t.unlisted(name)
}

// unlisted is the on-demand route of "<provider>/<model>" on a provider
// that allows unlisted models: one step, the model sent as named, of
// unknown kind and capabilities, no latency or price kept (callers name
// these models: nothing is stored per name).
func (t *Table) unlisted(name string) (*Route, bool) {
	pname, model, ok := strings.Cut(name, "/")
	if !ok || model == "" {
		return nil, false
	}
	p := t.Provider(pname)
	if p == nil || !p.Unlisted {
		return nil, false
	}
	st := Step{Provider: p, Model: model, Upstream: model, ModelIndex: -1, Active: true, Weight: 1}
	return &Route{Name: name, Kind: "model", Steps: []Step{st}, Dynamic: true, Policy: t.single,
		ReadsBody: t.single.FailClosed}, true // fail_closed: what the request needs is checked against unknown capabilities
}

// ResolveBytes is Resolve for a name still in the request body; it does not
// allocate.
func (t *Table) ResolveBytes(name []byte) (*Route, bool) {
	rt, ok := t.byName[string(name)]
	return rt, ok
}
