package route

// How the cursor ranks the remaining steps under the route's strategy:
// best, with the cost estimate, the stalest step (exploration) and the
// weighted strategy's first step on its wheel.

import (
	"math"
	"math/bits"
)

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
