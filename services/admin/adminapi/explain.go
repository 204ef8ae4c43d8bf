package adminapi

import "encoding/json"

// RouteExplanation is POST /admin/route/explain: how proxy Instance,
// routing with RoutingVersion, would route the request. Explanation is the
// proxy's own answer, relayed as it sent it (a route.Explanation of
// package switchyard.dev/services/proxy/route).
type RouteExplanation struct {
	Instance       string          `json:"instance"`
	RoutingVersion int             `json:"routing_version"`
	Explanation    json.RawMessage `json:"explanation"`
}
