package route

import (
	"math/bits"

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
	// Room is the request's headroom routing (nil: off).
	Room *Room
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
