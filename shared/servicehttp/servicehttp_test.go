package servicehttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/routingdoc"
)

// routing is a Routing whose state the test sets.
type routing struct {
	loaded  chan struct{}
	failure *routingdoc.Failure
}

func newRouting(loaded bool, f *routingdoc.Failure) *routing {
	r := &routing{loaded: make(chan struct{}), failure: f}
	if loaded {
		close(r.loaded)
	}
	return r
}

func (r *routing) Loaded() <-chan struct{}      { return r.loaded }
func (r *routing) Failure() *routingdoc.Failure { return r.failure }

func base(status int, body map[string]any) func() (int, map[string]any) {
	return func() (int, map[string]any) {
		out := map[string]any{}
		for k, v := range body {
			out[k] = v
		}
		return status, out
	}
}

// get serves path from an app with the package's handlers and decodes the
// JSON answer.
func get(t *testing.T, r Readiness, path string) (int, map[string]any) {
	t.Helper()
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Get("/healthz", Healthz)
	app.Get("/readyz", r.Handler())
	resp, err := app.Test(httptest.NewRequest(http.MethodGet, path, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return resp.StatusCode, body
}

func TestHealthz(t *testing.T) {
	status, body := get(t, Readiness{}, "/healthz")
	if status != http.StatusOK || !reflect.DeepEqual(body, map[string]any{"status": "ok"}) {
		t.Fatalf("/healthz: %d %v", status, body)
	}
}

// TestReadiness: the parts of /readyz in their order, for each way a
// service puts them together.
func TestReadiness(t *testing.T) {
	ok := map[string]any{"status": "ok", "nats": "connected", "jetstream": "ok"}
	down := map[string]any{"status": "not ready", "nats": "disconnected", "reason": "not connected to NATS"}
	failed := &routingdoc.Failure{Version: 4, Error: "config version 4: bad"}
	degrade := func(status int, body map[string]any) int {
		body["backlog"] = true
		if status == http.StatusOK {
			body["status"], body["reason"] = "degraded", "backlog"
		}
		return status
	}
	version := func() int { return 3 }
	tests := []struct {
		name       string
		r          Readiness
		wantStatus int
		want       map[string]any
	}{
		{name: "ready, no routing", r: Readiness{Base: base(200, ok)}, wantStatus: 200, want: ok},
		{name: "ready with the routing version", r: Readiness{Base: base(200, ok), Version: version, Routing: newRouting(true, nil), WaitRouting: true},
			wantStatus: 200, want: map[string]any{"status": "ok", "nats": "connected", "jetstream": "ok", "routing_version": 3.0}},
		{name: "a refused version is said, still ready", r: Readiness{Base: base(200, ok), Version: version, Routing: newRouting(true, failed)},
			wantStatus: 200, want: map[string]any{"status": "ok", "nats": "connected", "jetstream": "ok", "routing_version": 3.0,
				"routing_error": map[string]any{"version": 4.0, "error": "config version 4: bad"}}},
		{name: "waiting for the routing configuration", r: Readiness{Base: base(200, ok), Version: version, Routing: newRouting(false, nil), WaitRouting: true},
			wantStatus: 503, want: map[string]any{"status": "not ready", "nats": "connected", "jetstream": "ok", "routing_version": 3.0, "reason": notLoaded}},
		{name: "not waiting for it", r: Readiness{Base: base(200, ok), Version: version, Routing: newRouting(false, nil)},
			wantStatus: 200, want: map[string]any{"status": "ok", "nats": "connected", "jetstream": "ok", "routing_version": 3.0}},
		{name: "NATS down keeps its reason", r: Readiness{Base: base(503, down), Version: version, Routing: newRouting(false, nil), WaitRouting: true},
			wantStatus: 503, want: map[string]any{"status": "not ready", "nats": "disconnected", "reason": "not connected to NATS", "routing_version": 3.0}},
		{name: "amended", r: Readiness{Base: base(200, ok), Amend: degrade, Routing: newRouting(true, nil), WaitRouting: true},
			wantStatus: 200, want: map[string]any{"status": "degraded", "nats": "connected", "jetstream": "ok", "reason": "backlog", "backlog": true}},
		{name: "amended, then waiting", r: Readiness{Base: base(200, ok), Amend: degrade, Routing: newRouting(false, nil), WaitRouting: true},
			wantStatus: 503, want: map[string]any{"status": "not ready", "nats": "connected", "jetstream": "ok", "reason": notLoaded, "backlog": true}},
		{name: "a base without a body", r: Readiness{Base: func() (int, map[string]any) { return 200, nil }, Version: version},
			wantStatus: 200, want: map[string]any{"routing_version": 3.0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := get(t, tt.r, "/readyz")
			if status != tt.wantStatus || !reflect.DeepEqual(body, tt.want) {
				t.Fatalf("/readyz: %d %v, want %d %v", status, body, tt.wantStatus, tt.want)
			}
		})
	}
}

// TestNATSWithoutConnection: a service without NATS is not ready.
func TestNATSWithoutConnection(t *testing.T) {
	r := bus.NewReadiness(nil, func() *bus.Resources { return nil }, bus.ReadinessOptions{})
	status, body := get(t, Readiness{Base: NATS(r)}, "/readyz")
	want := map[string]any{"status": "not ready", "nats": "disconnected", "reason": "not connected to NATS"}
	if status != http.StatusServiceUnavailable || !reflect.DeepEqual(body, want) {
		t.Fatalf("/readyz: %d %v, want 503 %v", status, body, want)
	}
}

func TestErrorStatus(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{name: "fiber error", err: fiber.ErrNotFound, want: 404},
		{name: "wrapped fiber error", err: fmt.Errorf("read: %w", fiber.NewError(413, "too large")), want: 413},
		{name: "any other error", err: errors.New("boom"), want: 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ErrorStatus(tt.err); got != tt.want {
				t.Fatalf("ErrorStatus(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}
