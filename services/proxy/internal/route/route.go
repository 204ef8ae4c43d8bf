// Package route turns a requested model name into a route (its steps, each a
// provider and a model, and the policy that orders them), walks a request's
// candidates in the policy's order (select.go), and chooses a key for each
// step: by priority, then round robin, weighted (smooth or by a sticky
// hash) or least latency among keys of equal priority, skipping what the
// hold engine says is held. Everything is computed when the configuration is
// loaded; a lookup is a map read and a few atomic loads and adds, with no
// allocation.
package route

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/usage"
)

// Admitter answers "may a request use this target now?" from memory: the
// hold engine (hold.Engine) implements it, and the proxy asks it for every
// key it considers.
type Admitter interface {
	Admit(provider, keyID, model string) hold.Admission
}

// MaxKeys is the largest number of keys a provider may have: one request
// tracks the keys it tried in a 64-bit set.
const MaxKeys = 64

// Key is one credential of a provider as the proxy uses it.
type Key struct {
	ID       string
	Priority int
	Weight   int
	// Latency is the key's observed latency (all models).
	Latency *Latency
	secret  atomic.Pointer[config.Secret]
	prev    atomic.Pointer[config.Secret] // the secret before the last change (nil: none)
	gen     atomic.Uint64                 // bumped by every secret change
	index   int
}

// Secret returns the credential for the upstream request header.
func (k *Key) Secret() string { return k.secret.Load().Reveal() }

// AppendSecrets appends to dst what an upstream's answer must never echo
// to a caller: the key's current secret and the one before it (a request
// sent before a rotation is answered after it).
func (k *Key) AppendSecrets(dst []string) []string {
	dst = append(dst, k.Secret())
	if p := k.prev.Load(); p != nil {
		dst = append(dst, p.Reveal())
	}
	return dst
}

// Fingerprint is the fingerprint of the key's current secret.
func (k *Key) Fingerprint() string { return k.secret.Load().Fingerprint() }

// SetSecret replaces the key's secret (a rotation or a configuration
// reload); requests already sent keep the old one. It reports whether the
// secret changed.
func (k *Key) SetSecret(s config.Secret) bool {
	old := k.secret.Load()
	if old.Reveal() == s.Reveal() {
		return false
	}
	k.prev.Store(old)
	k.secret.Store(&s)
	k.gen.Add(1)
	return true
}

// Generation changes whenever the key's secret does: an attempt notes it
// when it sends, so that a refusal of a secret rotated away meanwhile is
// not held against the key's new secret.
func (k *Key) Generation() uint64 { return k.gen.Load() }

// KeylessID is the id of the one stand-in key of a provider configured
// without keys (vLLM, Ollama): what responses and metrics name.
const KeylessID = "none"

// HoldKey is the key id holds and reports name: "" for a keyless
// provider's stand-in, so that its holds are provider scopes, the same ids
// the prober's checks produce (hold.ScopeFor).
func (k *Key) HoldKey() string {
	if k.ID == KeylessID && k.secret.Load().Reveal() == "" {
		return ""
	}
	return k.ID
}

// Index is the key's position in its provider's Keys.
func (k *Key) Index() int { return k.index }

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

type keySelection uint8

const (
	selectRoundRobin keySelection = iota
	selectWeighted                // smooth weighted round robin
	selectHash                    // weighted, by the request's hash
	selectLeastLatency
)

type group struct {
	wheel []uint8 // key indices, repeated by weight for weighted selection
	next  atomic.Uint32
}

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
	price   usage.Price
	priced  bool
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
}

// ModelName is one id listed by GET /v1/models.
type ModelName struct {
	ID      string
	OwnedBy string // provider name, or "switchyard" for chains and aliases
	Kind    string
}

// Build computes the table from a validated configuration.
func Build(cfg *config.Config, o Options) (*Table, error) {
	if o.Latency == nil {
		o.Latency = NewLatencyBook()
	}
	t := &Table{byName: map[string]*Route{}}
	byProvider := map[string]*Provider{}
	models := map[string]map[string]int{} // model index by provider and name
	for i, pc := range cfg.Providers {
		p, err := newProvider(i, pc, o.Latency)
		if err != nil {
			return nil, err
		}
		t.Providers = append(t.Providers, p)
		byProvider[p.Name] = p
		models[p.Name] = map[string]int{}
		for j, m := range pc.Models {
			models[p.Name][m.Name] = j
		}
	}
	newStep := func(p *Provider, j int, active bool) Step {
		m := cfg.Providers[p.Index].Models[j]
		st := Step{Provider: p, ModelIndex: j, Model: m.Name, Upstream: upstreamName(m), Kind: kindOf(m), Active: active, Weight: 1,
			Caps: ParseCaps(m.Capabilities), capsKnown: m.Capabilities != nil,
			ContextWindow: int64(m.ContextWindow), MaxOutput: int64(m.MaxOutput),
			Latency: o.Latency.Model(p.Name, m.Name)}
		if o.Prices != nil {
			st.price, st.priced = o.Prices.Lookup(p.Name, p.Adapter.Type(), st.Upstream)
		}
		return st
	}
	stepFor := func(target string, active bool) (Step, error) {
		pname, mname, ok := strings.Cut(target, "/")
		if !ok {
			return Step{}, fmt.Errorf("target %q: want provider/model", target)
		}
		p := byProvider[pname]
		if p == nil {
			// A provider skipped at load (optional, no key set): the step
			// keeps its place and takes no traffic.
			return Step{Model: mname, Upstream: mname, Weight: 1}, nil
		}
		j, ok := models[pname][mname]
		if !ok {
			return Step{}, fmt.Errorf("target %q: provider %s has no model %q", target, pname, mname)
		}
		return newStep(p, j, active), nil
	}
	explore := uint32(0)
	if share := cfg.Routing.ExploreShare(); share > 0 {
		explore = uint32(max(2, min(1<<20, int(1/share+0.5))))
	}
	defaultPolicy, _ := policyOf(cfg.Routing.Strategy, cfg.Routing.HashOn, "", cfg.Routing.FailClosed)
	t.single = defaultPolicy
	t.single.Strategy = Priority // one step: nothing to order
	newRoute := func(name, kind string, steps []Step, pol Policy) (*Route, error) {
		if len(steps) > config.MaxSteps {
			return nil, fmt.Errorf("%s: %d targets, at most %d", name, len(steps), config.MaxSteps)
		}
		rt := &Route{Name: name, Kind: kind, Steps: steps, Policy: pol, exploreEvery: explore,
			ReadsBody: pol.FailClosed || pol.Strategy == LeastCost || pol.Strategy == BudgetAware}
		for i := range steps {
			st := &steps[i]
			rt.ReadsBody = rt.ReadsBody || st.capsKnown || st.ContextWindow > 0 || st.MaxOutput > 0 ||
				(st.Provider != nil && st.Provider.Budgeted)
		}
		if pol.Strategy == Weighted {
			rt.wheel = stepWheel(steps)
		}
		return rt, nil
	}

	// provider/model, and plain model names in configuration order.
	var plain []string
	plainSteps := map[string][]Step{}
	for i, pc := range cfg.Providers {
		p := t.Providers[i]
		for j, m := range pc.Models {
			st := newStep(p, j, true)
			id := p.Name + "/" + m.Name
			single := t.single
			rt, _ := newRoute(id, "model", []Step{st}, single)
			t.byName[id] = rt
			t.Names = append(t.Names, ModelName{ID: id, OwnedBy: p.Name, Kind: st.Kind})
			if _, seen := plainSteps[m.Name]; !seen {
				plain = append(plain, m.Name)
			}
			plainSteps[m.Name] = append(plainSteps[m.Name], st)
		}
	}
	for _, name := range plain {
		if _, taken := t.byName[name]; taken {
			// A plain name spelled like a provider/model id
			// ("openai/gpt-4o-mini" listed by an OpenRouter provider):
			// the id names its provider, as resolution promises; the
			// model stays reachable as <its provider>/<name>.
			continue
		}
		steps := plainSteps[name]
		rt, err := newRoute(name, "plain", steps, defaultPolicy)
		if err != nil {
			return nil, fmt.Errorf("model %w", err)
		}
		t.byName[name] = rt
		t.Names = append(t.Names, ModelName{ID: name, OwnedBy: steps[0].Provider.Name, Kind: steps[0].Kind})
	}

	// Chains: "chain:<name>", and the bare name when nothing else has it.
	chainNames := sortedKeys(cfg.Chains)
	for _, name := range chainNames {
		cc := cfg.Chains[name]
		var steps []Step
		for i, sc := range cc.Steps {
			st, err := stepFor(sc.Target, sc.IsActive())
			if err != nil {
				return nil, fmt.Errorf("chains.%s.steps[%d]: %w", name, i, err)
			}
			if sc.Weight > 0 {
				st.Weight = sc.Weight
			}
			steps = append(steps, st)
		}
		strategy, hashOn := cc.Strategy, cc.HashOn
		if strategy == "" {
			strategy = cfg.Routing.Strategy
		}
		if hashOn == "" {
			hashOn = cfg.Routing.HashOn
		}
		pol, ok := policyOf(strategy, hashOn, cc.Region, cc.IsFailClosed(cfg.Routing.FailClosed))
		if !ok {
			return nil, fmt.Errorf("chains.%s.strategy: unknown strategy %q", name, strategy)
		}
		rt, err := newRoute("chain:"+name, "chain", steps, pol)
		if err != nil {
			return nil, fmt.Errorf("chains.%s: %w", name, err)
		}
		t.byName["chain:"+name] = rt
		t.Names = append(t.Names, ModelName{ID: "chain:" + name, OwnedBy: "switchyard", Kind: chainKind(steps)})
	}

	// Aliases point at a chain or a provider/model (or another name).
	for _, alias := range sortedKeys(cfg.Aliases) {
		target := cfg.Aliases[alias]
		rt, ok := t.byName[target]
		if !ok {
			if !strings.HasPrefix(target, "chain:") && strings.Contains(target, "/") {
				st, err := stepFor(target, true)
				if err != nil {
					return nil, fmt.Errorf("aliases.%s: %w", alias, err)
				}
				rt, _ = newRoute(target, "model", []Step{st}, Policy{FailClosed: cfg.Routing.FailClosed})
			} else {
				return nil, fmt.Errorf("aliases.%s: unknown target %q", alias, target)
			}
		}
		t.byName[alias] = rt
		t.Names = append(t.Names, ModelName{ID: alias, OwnedBy: "switchyard", Kind: chainKind(rt.Steps)})
	}
	// A chain's bare name is the chain too (one model, two spellings),
	// listed under both.
	for _, name := range chainNames {
		if _, taken := t.byName[name]; !taken {
			rt := t.byName["chain:"+name]
			t.byName[name] = rt
			t.Names = append(t.Names, ModelName{ID: name, OwnedBy: "switchyard", Kind: chainKind(rt.Steps)})
		}
	}
	return t, nil
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

// policyOf builds a policy from config values (ok false: unknown
// strategy).
func policyOf(strategy, hashOn, region string, failClosed bool) (Policy, bool) {
	s, ok := ParseStrategy(strategy)
	return Policy{Strategy: s, HashOn: hashOn, Region: region, FailClosed: failClosed}, ok
}

// stepWheel is the weighted strategy's wheel: step indices repeated by
// weight, interleaved (smooth weighted round robin).
func stepWheel(steps []Step) []uint8 {
	w := make([]int, len(steps))
	for i := range steps {
		w[i] = max(steps[i].Weight, 1)
	}
	return smoothWheel(w, 0)
}

// Pick chooses a key of p for model: the first priority group first,
// then within it by the provider's selection (round robin, weighted, by the
// request's hash, least latency), skipping keys in tried and keys the
// admitter denies. It returns nil when no key is left, and whether the key
// was admitted as the one probe of a due hold. req may be nil.
//
// Keys whose own health checks fail (see SetHealth) are tried only after
// every other key; the admitter still decides on each of them.
func (p *Provider) Pick(model string, gate Admitter, tried uint64, req *Request) (*Key, hold.Admission) {
	sick := p.sick.Load()
	if k, a := p.pick(model, gate, tried|sick, req); k != nil || sick&^tried == 0 {
		return k, a
	}
	return p.pick(model, gate, tried|^sick, req)
}

// pick is Pick over the keys whose bit is not in skip. A key the ramp
// deferred is chosen when no other key admits.
func (p *Provider) pick(model string, gate Admitter, skip uint64, req *Request) (*Key, hold.Admission) {
	if p.selection == selectLeastLatency {
		return p.pickFastest(model, gate, skip)
	}
	var deferred *Key
	for _, g := range p.groups {
		n := uint32(len(g.wheel))
		var start uint32
		switch {
		case p.selection == selectHash && req != nil && req.KeyHashed:
			start = uint32(req.KeyHash % uint64(n))
		default:
			start = g.next.Add(1) - 1
		}
		for i := uint32(0); i < n; i++ {
			k := p.Keys[g.wheel[(start+i)%n]]
			if skip&(1<<uint(k.index)) != 0 {
				continue
			}
			if a, ok := p.ask(gate, k, model, &deferred); ok {
				return k, a
			}
		}
	}
	return lastResort(deferred)
}

// pickFastest is pick for least_latency selection: group by group, the
// keys in order of their latency (a key never measured first), the first
// the admitter admits; a key the ramp deferred only when none admits.
func (p *Provider) pickFastest(model string, gate Admitter, skip uint64) (*Key, hold.Admission) {
	var deferred *Key
	for _, g := range p.groups {
		for {
			best, bestMS := -1, 0.0
			for _, ki := range g.wheel {
				if skip&(1<<ki) != 0 {
					continue
				}
				if ms, _ := p.Keys[ki].Latency.MS(); best < 0 || ms < bestMS {
					best, bestMS = int(ki), ms
				}
			}
			if best < 0 {
				break
			}
			skip |= 1 << best
			k := p.Keys[best]
			if a, ok := p.ask(gate, k, model, &deferred); ok {
				return k, a
			}
		}
	}
	return lastResort(deferred)
}

// ask asks the gate about k: ok when k may be used now; a key the ramp
// deferred is noted in deferred (the first one).
func (p *Provider) ask(gate Admitter, k *Key, model string, deferred **Key) (hold.Admission, bool) {
	switch a := gate.Admit(p.Name, k.HoldKey(), model); a {
	case hold.Deny:
	case hold.Deferred:
		if *deferred == nil {
			*deferred = k
		}
	default:
		return a, true
	}
	return hold.Deny, false
}

// lastResort is a pick's answer when no key admitted: the key the ramp
// deferred, else none.
func lastResort(deferred *Key) (*Key, hold.Admission) {
	if deferred != nil {
		return deferred, hold.Admit
	}
	return nil, hold.Deny
}

func newProvider(index int, pc config.Provider, book *LatencyBook) (*Provider, error) {
	if len(pc.Keys) > MaxKeys {
		return nil, fmt.Errorf("providers[%s].keys: %d keys, at most %d", pc.Name, len(pc.Keys), MaxKeys)
	}
	p := &Provider{
		Name:     pc.Name,
		Index:    index,
		Region:   pc.Region,
		Budgeted: pc.Budget != (config.Budget{}),
		Unlisted: pc.AllowUnlistedModels,
		Adapter:  provider.New(pc.Type, pc.BaseURL, pc.APIVersion, pc.Headers),
	}
	keys := pc.Keys
	if len(keys) == 0 { // keyless servers (vLLM, Ollama)
		keys = []config.Key{{ID: KeylessID, Weight: 1}}
	}
	for _, kc := range keys {
		if !kc.IsEnabled() {
			continue // switched off: never picked (a provider with none is never usable)
		}
		w := kc.Weight
		if w < 1 {
			w = 1
		}
		k := &Key{ID: kc.ID, Priority: kc.Priority, Weight: w, Latency: book.Key(pc.Name, kc.ID)}
		secret := kc.Value
		k.secret.Store(&secret)
		p.Keys = append(p.Keys, k)
	}
	if pc.PriorityOrder == config.PriorityLowestFirst {
		sort.SliceStable(p.Keys, func(i, j int) bool { return p.Keys[i].Priority < p.Keys[j].Priority })
	} else {
		sort.SliceStable(p.Keys, func(i, j int) bool { return p.Keys[i].Priority > p.Keys[j].Priority })
	}
	weighted := pc.Selection == config.SelectionWeighted
	switch {
	case weighted && pc.HashOn != "":
		p.selection, p.HashOn = selectHash, pc.HashOn
	case weighted:
		p.selection = selectWeighted
	case pc.Selection == config.SelectionLeastLatency:
		p.selection = selectLeastLatency
	}
	for i := 0; i < len(p.Keys); {
		j := i
		for j < len(p.Keys) && p.Keys[j].Priority == p.Keys[i].Priority {
			j++
		}
		p.groups = append(p.groups, newGroup(p.Keys[i:j], i, weighted))
		i = j
	}
	for i, k := range p.Keys {
		k.index = i
	}
	return p, nil
}

// newGroup builds the selection wheel of keys[first:first+len(keys)].
// Weighted wheels interleave keys (smooth weighted round-robin) so that a
// heavy key does not take a burst of consecutive requests.
func newGroup(keys []*Key, first int, weighted bool) *group {
	g := &group{}
	if !weighted {
		for i := range keys {
			g.wheel = append(g.wheel, uint8(first+i))
		}
		return g
	}
	weights := make([]int, len(keys))
	for i, k := range keys {
		weights[i] = k.Weight
	}
	g.wheel = smoothWheel(weights, first)
	return g
}

// smoothWheel lays out indices first+i repeated by weights[i], interleaved
// (smooth weighted round robin), reduced by the weights' gcd and to at most
// about maxWheel slots.
func smoothWheel(weights []int, first int) []uint8 {
	total, d := 0, 0
	for _, w := range weights {
		total += w
	}
	if sum := total; sum > maxWheel { // keep the wheel small; proportions stay close
		total = 0
		for i := range weights {
			weights[i] = max(1, weights[i]*maxWheel/sum)
			total += weights[i]
		}
	}
	for _, w := range weights {
		d = gcd(d, w)
	}
	total /= d
	var wheel []uint8
	current := make([]int, len(weights))
	for n := 0; n < total; n++ {
		best := 0
		for i := range weights {
			current[i] += weights[i]
			if current[i] > current[best] {
				best = i
			}
		}
		current[best] -= total * d
		wheel = append(wheel, uint8(first+best))
	}
	return wheel
}

const maxWheel = 1024

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func upstreamName(m config.Model) string {
	if m.Upstream != "" {
		return m.Upstream
	}
	return m.Name
}

func kindOf(m config.Model) string {
	if m.Kind == "" {
		return "chat"
	}
	return m.Kind
}

func chainKind(steps []Step) string {
	for _, s := range steps {
		if s.Kind != "" {
			return s.Kind
		}
	}
	return "chat"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ResolveBytes is Resolve for a name still in the request body; it does not
// allocate.
func (t *Table) ResolveBytes(name []byte) (*Route, bool) {
	rt, ok := t.byName[string(name)]
	return rt, ok
}
