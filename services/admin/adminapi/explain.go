package adminapi

import "encoding/json"

// RouteExplainRequest is the body of POST /admin/route/explain: the
// request to explain (Model, else Body's model), the endpoint it would
// arrive on, a client key id, the request body the routing depends on and
// the headers that steer it.
type RouteExplainRequest struct {
	Model    string            `json:"model,omitempty"`
	Endpoint string            `json:"endpoint,omitempty"`
	Client   string            `json:"client,omitempty"`
	Body     json.RawMessage   `json:"body,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
}

// RouteExplanation is POST /admin/route/explain: how proxy Instance,
// routing with RoutingVersion, would route the request. Explanation is the
// proxy's own answer, relayed as it sent it (a route.Explanation of
// package switchyard.dev/services/proxy/route).
type RouteExplanation struct {
	Instance       string          `json:"instance"`
	RoutingVersion int             `json:"routing_version"`
	Explanation    json.RawMessage `json:"explanation"`
}
