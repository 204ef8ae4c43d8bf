package route

// Explanation is a routing decision explained: the candidates in the
// order a request would try them (as if each attempt failed), and every
// step that is not a candidate with the reason. Keys tell, per candidate,
// which of the provider's keys the hold engine admits (filled by the
// caller, which has the engine).
type Explanation struct {
	Model      string `json:"model"`
	Route      string `json:"route"` // chain:<name>, provider/model or the plain name
	Kind       string `json:"kind"`  // chain, model or plain
	Strategy   string `json:"strategy"`
	HashOn     string `json:"hash_on,omitempty"`
	FailClosed bool   `json:"fail_closed"`
	// What the request asks of a target.
	Needs                []string `json:"needs"`
	EstimatedInputTokens int64    `json:"estimated_input_tokens"`
	MaxOutputTokens      int64    `json:"max_output_tokens,omitempty"`
	Region               string   `json:"region,omitempty"`
	RegionRequired       bool     `json:"region_required,omitempty"`
	Hashed               bool     `json:"hashed,omitempty"`

	Candidates []Choice `json:"candidates"`
	Rejected   []Choice `json:"rejected"`
}

// Choice is one step of an explanation.
type Choice struct {
	Step     int    `json:"step"` // its index in the route
	Target   string `json:"target"`
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Upstream string `json:"upstream_model,omitempty"`
	Region   string `json:"region,omitempty"`
	Health   string `json:"health"`
	// LatencyMS is the observed average (absent: none yet);
	// EstimatedCostUSD the request's cost there (absent: no price).
	LatencyMS        *float64 `json:"latency_ms,omitempty"`
	EstimatedCostUSD *float64 `json:"estimated_cost_usd,omitempty"`
	Capabilities     []string `json:"capabilities,omitempty"`
	// Reason is why a rejected step is not a candidate; Fallback marks
	// an offline step tried only when no other could be.
	Reason   string      `json:"reason,omitempty"`
	Detail   string      `json:"detail,omitempty"`
	Fallback bool        `json:"fallback,omitempty"`
	Keys     []KeyChoice `json:"keys,omitempty"`
}

// Key states of a KeyChoice.
const (
	KeyAvailable = "available"
	KeyRamping   = "ramping"
	KeyHeld      = "held"
	KeyUnhealthy = "unhealthy"
)

// KeyChoice is one key of a candidate's provider, in the order Pick tries
// them.
type KeyChoice struct {
	ID string `json:"id"`
	// State is available, ramping (back from a hold, taking a growing
	// share), held or unhealthy (its own checks fail: tried after the
	// others).
	State  string `json:"state"`
	HoldID string `json:"hold_id,omitempty"`
	Class  string `json:"class,omitempty"`
	Until  string `json:"until,omitempty"`
}

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
