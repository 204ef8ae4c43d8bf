package route

// Build: the routing table computed from the configuration when it is
// loaded (providers, their keys and groups, every model's route and its
// policy), with the smooth weighted wheels it lays out.

import (
	"fmt"
	"sort"
	"strings"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/headroom"
	"switchyard.dev/shared/provider"
)

// Build computes the table from a validated configuration.
func Build(cfg *config.Config, o Options) (*Table, error) {
	if o.Latency == nil {
		o.Latency = NewLatencyBook()
	}
	t := &Table{byName: map[string]*Route{}}
	byProvider := map[string]*Provider{}
	models := map[string]map[string]int{} // model index by provider and name
	for i, pc := range cfg.Providers {
		p, err := newProvider(i, pc, o.Latency, o.Headroom)
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
		if o.Headroom != nil {
			st.Rooms = make([]*headroom.Slot, len(p.Keys))
			for _, k := range p.Keys {
				st.Rooms[k.index] = o.Headroom.Model(p.Name, k.ID, m.Name)
			}
		}
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

func newProvider(index int, pc config.Provider, book *LatencyBook, room *headroom.Book) (*Provider, error) {
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
		Dialect:  headroom.DialectFor(pc.Type),
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
		k := &Key{ID: kc.ID, Priority: kc.Priority, Weight: w, Latency: book.Key(pc.Name, kc.ID), Room: room.Key(pc.Name, kc.ID)}
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
	case pc.Selection == config.SelectionHeadroom:
		p.selection = selectHeadroom
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
