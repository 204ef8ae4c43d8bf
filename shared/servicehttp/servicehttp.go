// Package servicehttp holds what the HTTP servers of the three services
// (proxy, prober, admin) answer alike: GET /healthz, GET /readyz put
// together from the same parts in the same order, and the status of an
// error a handler or fiber itself returns. Each service's README
// documents its own /readyz fields.
package servicehttp

import (
	"errors"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/routingdoc"
)

// Healthz answers 200 {"status":"ok"} while the process runs: it says
// nothing of NATS (that is /readyz).
func Healthz(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"status": "ok"})
}

// ErrorStatus is the HTTP status of err: a *fiber.Error's code (an unknown
// route, an oversize body), 500 for anything else.
func ErrorStatus(err error) int {
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return http.StatusInternalServerError
}

// Routing is what a service knows of the fleet's routing configuration
// (a *routingdoc.Tracker): whether its active version is known yet, and
// the last version the service could not apply.
type Routing interface {
	Loaded() <-chan struct{}
	Failure() *routingdoc.Failure
}

var _ Routing = (*routingdoc.Tracker)(nil)

// Readiness is one service's /readyz. Answer puts it together in this
// order: Base; routing_version (Version) and routing_error (Routing's
// failure, if any); Amend; then, with WaitRouting, 503 "not ready" while
// Routing has not loaded (only an answer that was 200 changes).
type Readiness struct {
	// Base is the service's own state: NATS(r) for a service that is
	// ready while JetStream answers (the admin, the prober), the proxy's
	// own (draining, NATS closed for good).
	Base func() (status int, body map[string]any)
	// Version is the routing version the service routes with (0: its
	// file's).
	Version func() int
	// Routing is the fleet's routing configuration as the service
	// follows it; nil: no routing_error and nothing to wait for.
	Routing Routing
	// WaitRouting makes the service not ready until Routing has loaded:
	// a service that does nothing before it knows the fleet's version
	// (the admin's writes, the prober's checks) says so.
	WaitRouting bool
	// Amend adds the service's own lines (the admin's usage backlog) and
	// returns the status; nil: none.
	Amend func(status int, body map[string]any) int
}

// NATS is a Base of r's state: 200 while NATS is connected and JetStream
// answers for switchyard_holds, 503 with the reason otherwise
// (bus.ReadyState.Answer).
func NATS(r *bus.Readiness) func() (int, map[string]any) {
	return func() (int, map[string]any) {
		status, body := r.State().Answer()
		out := make(map[string]any, len(body)+2)
		for k, v := range body {
			out[k] = v
		}
		return status, out
	}
}

// notLoaded is the reason of a service waiting for the routing
// configuration.
const notLoaded = "the fleet's routing configuration has not loaded yet"

// Answer is the /readyz answer now. It never waits on NATS.
func (r Readiness) Answer() (int, map[string]any) {
	status, body := r.Base()
	if body == nil {
		body = map[string]any{}
	}
	if r.Version != nil {
		body["routing_version"] = r.Version()
	}
	if r.Routing != nil {
		if f := r.Routing.Failure(); f != nil {
			body["routing_error"] = f // still ready: it routes with the version before
		}
	}
	if r.Amend != nil {
		status = r.Amend(status, body)
	}
	if r.WaitRouting && r.Routing != nil && status == http.StatusOK {
		select {
		case <-r.Routing.Loaded():
		default:
			status = http.StatusServiceUnavailable
			body["status"], body["reason"] = "not ready", notLoaded
		}
	}
	return status, body
}

// Handler answers GET /readyz with Answer.
func (r Readiness) Handler() fiber.Handler {
	return func(c *fiber.Ctx) error {
		status, body := r.Answer()
		return c.Status(status).JSON(body)
	}
}
