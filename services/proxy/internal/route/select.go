package route

import (
	"math"
	"math/bits"
	"slices"
	"strings"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/provider"
)

// Selection: holds are the hard gate (the hold engine decides, key by key,
// in Pick); a route's policy orders what the filters leave. A Cursor walks
// one request's candidates: Start applies the filters once (inactive step,
// operation, capability, context window, region, health, budget, fail
// closed), then every Next yields the best remaining step under the
// strategy. Everything is read from memory (atomics on the table), with no
// allocation: a Cursor lives on the request.

// Strategy orders a route's steps.
type Strategy uint8

// The strategies (config.Strategies).
const (
	Priority Strategy = iota
	Weighted
	LeastLatency
	LeastCost
	HealthAware
	BudgetAware
	RegionAffinity
	CapabilityAware
)

var strategyNames = [...]string{
	Priority: config.StrategyPriority, Weighted: config.StrategyWeighted, LeastLatency: config.StrategyLeastLatency,
	LeastCost: config.StrategyLeastCost, HealthAware: config.StrategyHealthAware, BudgetAware: config.StrategyBudgetAware,
	RegionAffinity: config.StrategyRegionAffinity, CapabilityAware: config.StrategyCapabilityAware,
}

func (s Strategy) String() string { return strategyNames[s] }

// ParseStrategy reads a config strategy name ("" is priority).
func ParseStrategy(name string) (Strategy, bool) {
	if name == "" {
		return Priority, true
	}
	i := slices.Index(strategyNames[:], name)
	return Strategy(max(i, 0)), i >= 0
}

// Policy is how a route orders its steps.
type Policy struct {
	Strategy Strategy
	// HashOn is the attribute the weighted strategy hashes ("" for smooth
	// weighted round robin): client, user or header:<Name>.
	HashOn string
	// Region is the region region_affinity prefers when the request names
	// none.
	Region string
	// FailClosed rejects candidates of unknown health or missing metadata.
	FailClosed bool
}

// HashHeader is the header HashOn names ("" when it names none).
func (p *Policy) HashHeader() string {
	h, _ := strings.CutPrefix(p.HashOn, "header:")
	if h == p.HashOn {
		return ""
	}
	return h
}

// Health is a provider's health as routing reads it.
type Health uint8

// The health states.
const (
	HealthUnknown Health = iota // no record, or the record says unknown
	HealthHealthy
	HealthDegraded
	HealthOffline // unhealthy, or its circuit is open
)

var healthNames = [...]string{"unknown", "healthy", "degraded", "offline"}

func (h Health) String() string { return healthNames[h] }

// Caps is a set of model capabilities.
type Caps uint8

// The capabilities (config.Capabilities).
const (
	CapTools Caps = 1 << iota
	CapVision
	CapAudio
	CapJSONSchema
	CapReasoning
)

// ParseCaps reads config capability names (unknown names are ignored:
// validation refused them).
func ParseCaps(names []string) Caps {
	var c Caps
	for _, n := range names {
		if i := slices.Index(config.Capabilities, n); i >= 0 {
			c |= 1 << i
		}
	}
	return c
}

// Names lists the capabilities of c.
func (c Caps) Names() []string {
	var out []string
	for i, n := range config.Capabilities {
		if c&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// BudgetFunc reports what is left of a provider's budget (the tightest of
// its periods, USD) and whether it has one.
type BudgetFunc func(provider string) (remainingUSD float64, limited bool)

// Request is what selection knows of a request.
type Request struct {
	Op provider.Op
	// Needs are the capabilities the body asks for; InputTokens and
	// MaxOutput the estimated prompt and the output it allows (0:
	// unknown).
	Needs       Caps
	InputTokens int64
	MaxOutput   int64
	// Hash is the stable hash of the policy's HashOn attribute; Hashed
	// says the request has one.
	Hash   uint64
	Hashed bool
	// KeyHash is the hash of the attribute the provider being picked from
	// hashes its keys on (Provider.HashOn), set before Pick.
	KeyHash   uint64
	KeyHashed bool
	// Region is the region the request prefers (RegionRequired: must be
	// served in).
	Region         string
	RegionRequired bool
	// Budget reads providers' budgets (nil: none is limited).
	Budget BudgetFunc
}

// Reason is why a step is not a candidate.
type Reason uint8

// The reasons.
const (
	Candidate Reason = iota
	ReasonInactive
	ReasonUnavailable // its provider is not configured (an optional provider skipped)
	ReasonUnsupported // the provider type does not serve the operation
	ReasonCapability  // the model lacks a capability the request needs
	ReasonContext     // the prompt or the output asked for exceeds the model's
	ReasonRegion      // not in the region the request requires
	ReasonUnhealthy   // its provider is offline
	ReasonHealthUnknown
	ReasonOverBudget
	ReasonNoMetadata // fail_closed: capabilities, region or price unknown
	ReasonFallback   // offline: tried only when no other step could be
)

var reasonNames = [...]string{
	Candidate: "", ReasonInactive: "inactive", ReasonUnavailable: "provider_unavailable",
	ReasonUnsupported: "unsupported_operation", ReasonCapability: "lacks_capability",
	ReasonContext: "context_window", ReasonRegion: "wrong_region", ReasonUnhealthy: "unhealthy",
	ReasonHealthUnknown: "health_unknown", ReasonOverBudget: "over_budget",
	ReasonNoMetadata: "missing_metadata", ReasonFallback: "unhealthy_fallback",
}

func (r Reason) String() string { return reasonNames[r] }

// Cursor walks one request's candidate steps in the policy's order. The
// zero value is unusable: Start it.
type Cursor struct {
	route *Route
	req   *Request
	// eligible steps may be yielded; preferred are in the request's
	// region; offline ones (of a route with a healthy alternative) only
	// when no other step made progress.
	eligible, preferred, offline, used uint64
	first                              int8 // a step to yield first (weighted, explore); -1: none
	progress                           bool
	declared                           bool // InDeclaredOrder: the declared order, health aside
	reasons                            [config.MaxSteps]Reason
	order                              [config.MaxSteps]int8 // the steps Next returned, in order
	n                                  uint8
}

// Start begins a walk of rt's steps for req.
func (rt *Route) Start(c *Cursor, req *Request) {
	*c = Cursor{route: rt, req: req, first: -1}
	pol := &rt.Policy
	region, required := req.Region, req.RegionRequired
	if region == "" && pol.Strategy == RegionAffinity {
		region = pol.Region
	}
	healthy := false // some eligible step is not offline
	for i := range rt.Steps {
		r := c.filter(&rt.Steps[i], region, required)
		c.reasons[i] = r
		if r != Candidate {
			continue
		}
		bit := uint64(1) << i
		c.eligible |= bit
		st := &rt.Steps[i]
		if region != "" && st.Provider.Region == region {
			c.preferred |= bit
		}
		if st.Provider.Health() == HealthOffline {
			c.offline |= bit
		} else {
			healthy = true
		}
	}
	switch {
	case c.offline == 0:
	case pol.Strategy == HealthAware && healthy:
		c.reject(c.offline, ReasonUnhealthy)
	case healthy && len(rt.Steps) > 1:
		// A virtual model skips offline providers while a healthy
		// alternative can serve.
		c.eligible &^= c.offline
		for m := c.offline; m != 0; m &= m - 1 {
			c.reasons[bits.TrailingZeros64(m)] = ReasonFallback
		}
	default:
		c.offline = 0 // nothing better: they are candidates like the rest
	}
	if c.eligible&(c.eligible-1) == 0 { // 0 or 1 candidate: no order to choose
		return
	}
	switch pol.Strategy {
	case Weighted:
		c.first = rt.weightedFirst(c.eligible, c.preferred, req)
	case LeastLatency, HealthAware:
		if rt.exploreEvery > 0 && rt.explore.Add(1)%rt.exploreEvery == 0 {
			c.first = c.stalest()
		}
	}
}

// InDeclaredOrder turns a walk just started into one of the declared
// order, health aside: steps left out as offline (unhealthy_fallback,
// unhealthy) are candidates again, and neither the strategy nor a region
// preference reorders them. The proxy's all-held pass uses it: when every
// target is held, they are tried in the order the operator declared.
func (c *Cursor) InDeclaredOrder() {
	for i := range c.route.Steps {
		if r := c.reasons[i]; r == ReasonFallback || r == ReasonUnhealthy {
			c.reasons[i] = Candidate
			c.eligible |= 1 << i
		}
	}
	c.offline, c.preferred, c.first, c.declared = 0, 0, -1, true
}

func (c *Cursor) reject(m uint64, r Reason) {
	c.eligible &^= m
	for ; m != 0; m &= m - 1 {
		c.reasons[bits.TrailingZeros64(m)] = r
	}
	c.offline = 0
}

// filter says why a step is not a candidate (Candidate: it is).
func (c *Cursor) filter(st *Step, region string, required bool) Reason {
	req, pol := c.req, &c.route.Policy
	switch {
	case st.Provider == nil:
		return ReasonUnavailable
	case !st.Active:
		return ReasonInactive
	case !st.Provider.Adapter.Supports(req.Op) && req.Op != provider.OpResponses: // Responses translates to chat
		return ReasonUnsupported
	}
	if req.Needs != 0 {
		switch {
		case st.capsKnown && req.Needs&^st.Caps != 0:
			return ReasonCapability
		case !st.capsKnown && pol.FailClosed:
			return ReasonNoMetadata
		}
	}
	if (st.ContextWindow > 0 && req.InputTokens > st.ContextWindow) ||
		(st.MaxOutput > 0 && req.MaxOutput > st.MaxOutput) {
		return ReasonContext
	}
	if region != "" && st.Provider.Region != region {
		switch {
		case required && st.Provider.Region == "" && pol.FailClosed:
			return ReasonNoMetadata
		case required:
			return ReasonRegion
		}
	}
	h := st.Provider.Health()
	if h == HealthUnknown && pol.FailClosed {
		return ReasonHealthUnknown
	}
	costly := pol.Strategy == LeastCost || pol.Strategy == BudgetAware
	if costly && !st.priced && pol.FailClosed {
		return ReasonNoMetadata
	}
	if req.Budget != nil {
		if left, limited := req.Budget(st.Provider.Name); limited {
			if left <= 0 || (pol.Strategy == BudgetAware && st.priced && left < c.cost(st)) {
				return ReasonOverBudget
			}
		}
	}
	return Candidate
}

// Next returns the next step to try and its index, or nil when none is
// left.
func (c *Cursor) Next() (*Step, int) {
	steps := c.route.Steps
	avail := c.eligible &^ c.used
	if avail == 0 {
		// Offline steps of a virtual model: only when nothing else could
		// be tried (every other step held, say), in declared order.
		fb := c.fallback()
		if fb == 0 {
			return nil, -1
		}
		i := bits.TrailingZeros64(fb)
		c.yield(i)
		return &steps[i], i
	}
	i := -1
	if f := c.first; f >= 0 && avail&(1<<f) != 0 {
		i = int(f)
		c.first = -1
	} else {
		if pref := avail & c.preferred; pref != 0 {
			avail = pref
		}
		i = c.best(avail)
	}
	c.yield(i)
	return &steps[i], i
}

func (c *Cursor) yield(i int) {
	c.used |= 1 << i
	c.order[c.n] = int8(i)
	c.n++
}

// Order is the steps Next returned, in order (valid until the next Start).
func (c *Cursor) Order() []int8 { return c.order[:c.n] }

func (c *Cursor) fallback() uint64 {
	if c.progress {
		return 0
	}
	var m uint64
	for i, r := range c.reasons[:len(c.route.Steps)] {
		if r == ReasonFallback && c.used&(1<<i) == 0 {
			m |= 1 << i
		}
	}
	return m
}

// Progress notes that the step Next returned last was tried (a key was
// admitted): offline steps stay skipped from then on.
func (c *Cursor) Progress() { c.progress = true }

// More reports whether Next has another eligible step to give.
func (c *Cursor) More() bool { return c.eligible&^c.used != 0 }

// Yielded reports whether Next returned step i.
func (c *Cursor) Yielded(i int) bool { return c.used&(1<<i) != 0 }

// Reason is why step i is not a candidate (Candidate when it is one).
func (c *Cursor) Reason(i int) Reason { return c.reasons[i] }

// best is the step of m the strategy prefers; ties go to the declared
// order.
func (c *Cursor) best(m uint64) int {
	if c.declared {
		return bits.TrailingZeros64(m)
	}
	steps := c.route.Steps
	switch c.route.Policy.Strategy {
	case LeastLatency:
		return argmin(m, func(i int) float64 { ms, _ := steps[i].Latency.MS(); return ms })
	case HealthAware:
		return argmin(m, func(i int) float64 {
			ms, _ := steps[i].Latency.MS()
			return healthRank(steps[i].Provider.Health())*1e9 + ms
		})
	case LeastCost, BudgetAware:
		return argmin(m, func(i int) float64 {
			if !steps[i].priced {
				return math.Inf(1)
			}
			return c.cost(&steps[i])
		})
	case CapabilityAware:
		return argmin(m, func(i int) float64 {
			if steps[i].capsKnown {
				return 0
			}
			return 1
		})
	}
	return bits.TrailingZeros64(m)
}

func healthRank(h Health) float64 {
	switch h {
	case HealthHealthy:
		return 0
	case HealthUnknown:
		return 1
	case HealthDegraded:
		return 2
	}
	return 3
}

func argmin(m uint64, score func(int) float64) int {
	best, bestScore := -1, math.Inf(1)
	for ; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		if s := score(i); best < 0 || s < bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// cost is the estimated cost (USD) of the request on st: its estimated
// input tokens and the output it allows (else the model's max output, else
// as many as the input).
func (c *Cursor) cost(st *Step) float64 {
	out := c.req.MaxOutput
	if out == 0 {
		out = st.MaxOutput
	}
	if out == 0 {
		out = c.req.InputTokens
	}
	return (float64(c.req.InputTokens)*st.price.Input + float64(out)*st.price.Output) / 1e6
}

// EstimatedCost is the request's estimated cost on step i (false: the
// step has no price).
func (c *Cursor) EstimatedCost(i int) (float64, bool) {
	st := &c.route.Steps[i]
	if !st.priced {
		return 0, false
	}
	return c.cost(st), true
}

// stalest is the eligible step whose latency was sampled least recently
// (never: first), for exploration.
func (c *Cursor) stalest() int8 {
	steps := c.route.Steps
	m := c.eligible
	if c.preferred&m != 0 {
		m &= c.preferred
	}
	return int8(argmin(m, func(i int) float64 { return float64(steps[i].Latency.LastSample()) }))
}

// weightedFirst is the weighted strategy's first step: by the request's
// hash on the weight wheel (sticky: a slot whose step is not eligible
// passes to the next slot, so only the conversations of a step that left
// move), else the wheel's next slot (smooth weighted round robin: slots of
// steps not eligible are used up, so the others share by their weights).
func (rt *Route) weightedFirst(eligible, preferred uint64, req *Request) int8 {
	if preferred&eligible != 0 {
		eligible &= preferred
	}
	n := uint64(len(rt.wheel))
	if n == 0 {
		return -1
	}
	if req.Hashed {
		pos := req.Hash % n
		for i := uint64(0); i < n; i++ {
			if s := rt.wheel[(pos+i)%n]; eligible&(1<<s) != 0 {
				return int8(s)
			}
		}
		return -1
	}
	for range n {
		if s := rt.wheel[uint64(rt.next.Add(1)-1)%n]; eligible&(1<<s) != 0 {
			return int8(s)
		}
	}
	return -1
}
