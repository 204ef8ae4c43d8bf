package bus

import "encoding/json"

// Route explanations: the admin service (POST /admin/route/explain) asks
// any proxy, with a NATS request on ExplainSubject, to explain how it would
// route a request; one proxy of the queue group answers from its own
// memory (route table, health, latency averages, holds), sending nothing
// upstream. `nats request switchyard.route.explain '{"v":1,"model":"gpt-4o"}'`
// does the same from the command line.
const (
	ExplainSubject = "switchyard.route.explain"
	// ExplainQueue is the queue group proxies answer in.
	ExplainQueue = "switchyard-proxy"
	// ExplainVersion is the version of the request and reply JSON.
	ExplainVersion = 1
)

// ExplainRequest asks for the routing of a request.
type ExplainRequest struct {
	V     int    `json:"v"`
	Model string `json:"model"`
	// Endpoint is chat.completions (the default), messages or embeddings.
	Endpoint string `json:"endpoint,omitempty"`
	// Client is a gateway client key id (its plan's models, region and
	// hash); "" for none.
	Client string `json:"client,omitempty"`
	// Body is the request body, when the decision depends on it
	// (capabilities, sizes, the user field); never stored or forwarded.
	Body json.RawMessage `json:"body,omitempty"`
	// Headers are request headers that steer routing (the region headers,
	// a session header a policy hashes on).
	Headers map[string]string `json:"headers,omitempty"`
}

// ExplainReply is a proxy's answer: the explanation, or an error in the
// admin API's shape.
type ExplainReply struct {
	V              int             `json:"v"`
	Instance       string          `json:"instance,omitempty"`
	RoutingVersion int             `json:"routing_version"`
	Explanation    json.RawMessage `json:"explanation,omitempty"`
	Error          *ExplainError   `json:"error,omitempty"`
}

// ExplainError is why a request could not be explained.
type ExplainError struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

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

	Candidates []ExplainChoice `json:"candidates"`
	Rejected   []ExplainChoice `json:"rejected"`
}

// ExplainChoice is one step of an explanation.
type ExplainChoice struct {
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
	Reason   string       `json:"reason,omitempty"`
	Detail   string       `json:"detail,omitempty"`
	Fallback bool         `json:"fallback,omitempty"`
	Keys     []ExplainKey `json:"keys,omitempty"`
}

// Key states of an ExplainKey.
const (
	KeyAvailable = "available"
	KeyRamping   = "ramping"
	KeyHeld      = "held"
	KeyUnhealthy = "unhealthy"
	// KeyNoHeadroom: what its provider last stated is left of one of its
	// windows (less this proxy's requests in flight) cannot fit the
	// request before the window resets (headroom routing).
	KeyNoHeadroom = "headroom"
)

// ExplainKey is one key of a candidate's provider, in the order the
// proxy tries them.
type ExplainKey struct {
	ID string `json:"id"`
	// State is available, ramping (back from a hold, taking a growing
	// share), held, unhealthy (its own checks fail: tried after the
	// others) or headroom (a window cannot fit the request until Until).
	State  string `json:"state"`
	HoldID string `json:"hold_id,omitempty"`
	Class  string `json:"class,omitempty"`
	Until  string `json:"until,omitempty"`
	// Headroom is what its provider last stated is left of the key's
	// windows (for the step's model where the provider scopes them by
	// model); absent when headroom routing is off or nothing was stated.
	Headroom []ExplainWindow `json:"headroom,omitempty"`
}

// ExplainWindow is one rate-limit window of a key as the proxy knows it.
type ExplainWindow struct {
	Kind      string `json:"kind"` // requests, tokens, input_tokens, output_tokens
	Limit     int64  `json:"limit,omitempty"`
	Remaining int64  `json:"remaining"`
	// Own is this proxy's part of Remaining when other proxies spend the
	// key too (requests windows: the last requests are split among them so
	// that two never send the same one); absent: the whole count.
	Own      *int64 `json:"own,omitempty"`
	InFlight int64  `json:"in_flight,omitempty"` // this proxy's requests sent since the reading
	Reset    string `json:"reset"`               // RFC 3339
}
