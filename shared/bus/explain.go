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
