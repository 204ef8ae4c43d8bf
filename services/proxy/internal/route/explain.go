package route

import "switchyard.dev/shared/bus"

// The explanation's wire types are the explain contract's (shared/bus):
// the admin service relays them, swctl prints them.
type (
	Explanation = bus.Explanation
	Choice      = bus.ExplainChoice
	KeyChoice   = bus.ExplainKey
)

// Key states of a KeyChoice.
const (
	KeyAvailable  = bus.KeyAvailable
	KeyRamping    = bus.KeyRamping
	KeyHeld       = bus.KeyHeld
	KeyUnhealthy  = bus.KeyUnhealthy
	KeyNoHeadroom = bus.KeyNoHeadroom
)

// Explain walks the route for req as a request whose every attempt fails
// would, without sending anything, and says why each other step is not a
// candidate. keys (may be nil) describes a candidate's keys.
func (rt *Route) Explain(model string, req *Request, keys func(*Step) []KeyChoice) Explanation {
	x := Explanation{
		Model: model, Route: rt.Name, Kind: rt.Kind, Strategy: rt.Policy.Strategy.String(),
		HashOn: rt.Policy.HashOn, FailClosed: rt.Policy.FailClosed, Needs: req.Needs.Names(),
		EstimatedInputTokens: req.InputTokens, MaxOutputTokens: req.MaxOutput,
		Region: req.Region, RegionRequired: req.RegionRequired, Hashed: req.Hashed,
		Candidates: []Choice{}, Rejected: []Choice{},
	}
	if x.Needs == nil {
		x.Needs = []string{}
	}
	var c Cursor
	rt.Start(&c, req)
	for st, i := c.Next(); st != nil; st, i = c.Next() {
		ch := c.choice(i)
		if c.reasons[i] == ReasonFallback {
			ch.Fallback, ch.Reason = true, ""
		}
		open := true
		if keys != nil {
			ch.Keys = keys(st)
			open = false
			for _, k := range ch.Keys {
				open = open || k.State != KeyHeld
			}
		}
		x.Candidates = append(x.Candidates, ch)
		if open { // a request would try it: offline steps stay skipped
			c.Progress()
		}
	}
	for i := range rt.Steps {
		if c.used&(1<<i) == 0 {
			x.Rejected = append(x.Rejected, c.choice(i))
		}
	}
	return x
}

func (c *Cursor) choice(i int) Choice {
	st := &c.route.Steps[i]
	ch := Choice{Step: i, Model: st.Model, Upstream: st.Upstream, Reason: c.reasons[i].String(), Health: HealthUnknown.String()}
	if st.Provider == nil {
		ch.Target = "-/" + st.Model
		return ch
	}
	ch.Provider, ch.Region, ch.Health = st.Provider.Name, st.Provider.Region, st.Provider.Health().String()
	ch.Target = st.Provider.Name + "/" + st.Model
	if ms, ok := st.Latency.MS(); ok {
		ch.LatencyMS = &ms
	}
	if usd, ok := c.EstimatedCost(i); ok {
		ch.EstimatedCostUSD = &usd
	}
	if st.capsKnown {
		ch.Capabilities = st.Caps.Names()
		if ch.Capabilities == nil {
			ch.Capabilities = []string{}
		}
	}
	switch c.reasons[i] {
	case ReasonCapability:
		ch.Detail = "lacks " + joinNames((c.req.Needs &^ st.Caps).Names())
	case ReasonNoMetadata:
		ch.Detail = "fail_closed: capabilities, region or price not configured"
	case ReasonRegion:
		ch.Detail = "in region " + quoteOr(st.Provider.Region, "none") + ", the request requires " + quoteOr(c.req.Region, "none")
	case ReasonContext:
		ch.Detail = "the prompt or the output asked for exceeds the model's context_window or max_output"
	case ReasonUnhealthy, ReasonFallback:
		ch.Detail = "its provider is offline (unhealthy or its circuit is open)"
	case ReasonHealthUnknown:
		ch.Detail = "fail_closed: no health record says it is healthy"
	case ReasonOverBudget:
		ch.Detail = "its provider's budget has less left than the request's estimated cost"
	}
	return ch
}

func joinNames(ns []string) string {
	out := ""
	for i, n := range ns {
		if i > 0 {
			out += ", "
		}
		out += n
	}
	return out
}

func quoteOr(s, none string) string {
	if s == "" {
		return none
	}
	return `"` + s + `"`
}
