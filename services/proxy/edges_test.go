package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// A 429 that is the request's own fault (more tokens than the key's
// per-minute limit) goes back to the caller after one attempt: not rotated
// across every key, not failed over to the next step.
func TestRequestTooLargeIsReturnedAfterOneAttempt(t *testing.T) {
	f := newFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.request_too_large"})
	status, h, body := f.call(t, "/v1/chat/completions", `{"model":"demo-chat","messages":[{"role":"user","content":"hi"}]}`)
	if status != http.StatusTooManyRequests || errorCode(t, body) != "rate_limit_exceeded" {
		t.Fatalf("status %d: %s", status, body)
	}
	if n := f.openai.CountCalls(nil); n != 1 {
		t.Errorf("%d calls to the OpenAI-format provider, want 1", n)
	}
	if n := f.anthropic.CountCalls(nil); n != 0 {
		t.Errorf("%d calls to the next chain step, want 0", n)
	}
	if h.Get("X-Switchyard-Attempts") != "1" {
		t.Errorf("attempts %q", h.Get("X-Switchyard-Attempts"))
	}
	if holds := f.svc.engine.Holds(); len(holds) != 0 {
		t.Errorf("the request's own fault held %v", holds)
	}
}

// A hung upstream rotates to the next key after one attempt timeout: it is
// not retried on the same key.
func TestAttemptTimeoutRotates(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Timeouts.Attempt = 300 * time.Millisecond
		c.Providers[0].Keys[0].Priority = 2 // a1 first
	})
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Hang: true})
	status, h, body := f.call(t, "/v1/chat/completions", directBody)
	if status != http.StatusOK || h.Get("X-Switchyard-Key-Id") != "a2" {
		t.Fatalf("status %d served by %q: %s", status, h.Get("X-Switchyard-Key-Id"), body)
	}
	if n := callsWith(f.openai, "key-a1"); n != 1 {
		t.Errorf("a1 called %d times: a timeout was retried on the same key", n)
	}
}

// A released target that is the only one of its model is ramping back,
// but the ramp shares traffic among alternatives: with none, every
// request is served (before: most requests of the first seconds got 503
// no_available_target).
func TestRampNeverRefusesTheOnlyTarget(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Providers[0].Keys = c.Providers[0].Keys[:1] })
	ctx := context.Background()
	sc := hold.Scope{Kind: hold.ScopeKey, Provider: "fake-openai", Key: "a1"}
	if err := f.svc.engine.Pin(ctx, sc, time.Now().Add(time.Hour), "test"); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := f.call(t, "/v1/chat/completions", directBody); status != http.StatusServiceUnavailable {
		t.Fatalf("pinned: status %d, want 503", status)
	}
	if err := f.svc.engine.Release(ctx, sc.ID(), hold.SourceAdmin); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if status, _, body := f.call(t, "/v1/chat/completions", directBody); status != http.StatusOK {
			t.Fatalf("request %d during the ramp: %d %s", i, status, body)
		}
	}
}

// A proxy starting into a fleet accepts traffic only once its hold table
// has the fleet's holds: its first request does not go to a key held
// fleet-wide. While it shuts down, /readyz answers 503.
func TestNewProxyKnowsTheFleetsHoldsBeforeServing(t *testing.T) {
	ff := newFleet(t, 1, func(c *config.Config) { c.Providers[0].Keys[0].Priority = 2 }) // a1 first
	// a1 is held fleet-wide (recorded by the running proxy).
	ff.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key", Times: 1})
	if status := ff.call(t, 0, directBody); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		r, err := ff.proxies[0].member.Resources().Holds.Get(context.Background(), "fake-openai.a1")
		return err == nil && r.Revision() > 0
	})
	ff.openai.ResetCalls()

	// A new proxy, its first request at once.
	cfg := baseConfig(ff.openai, ff.anthropic)
	cfg.Providers[0].Keys[0].Priority = 2
	nc, err := nats.Connect(ff.ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := New(cfg, Deps{Log: testLogger(t), NATS: nc})
	if err != nil {
		t.Fatal(err)
	}
	url, cancel, _ := serveUntil(t, svc)
	f := &fixture{openai: ff.openai, url: url, svc: svc}
	status, h, body := f.call(t, "/v1/chat/completions", directBody)
	if status != http.StatusOK || h.Get("X-Switchyard-Key-Id") != "a2" {
		t.Fatalf("first request of the new proxy: %d by %q: %s", status, h.Get("X-Switchyard-Key-Id"), body)
	}
	if n := callsWith(ff.openai, "key-a1"); n != 0 {
		t.Fatalf("the new proxy sent %d requests to the key the fleet holds", n)
	}

	// Draining: /readyz is 503 while a request is still in flight.
	ff.openai.AddRule(fakeprovider.Rule{Hang: true, Times: 1})
	go func() { _, _, _ = f.call(t, "/v1/chat/completions", directBody) }()
	testkit.WaitFor(t, 5*time.Second, func() bool { return svc.life.inFlight.Load() == 1 })
	cancel()
	testkit.WaitFor(t, 5*time.Second, func() bool { return svc.life.draining.Load() })
	if status, body := svc.readiness(); status != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while draining: %d %v", status, body)
	}
	ff.openai.ClearRules()
	ff.openai.Close() // ends the hung request
}

// /readyz stays 200 while NATS reconnects (holds apply locally
// meanwhile) and answers 503 once the connection is closed for good: a
// NATS server closes a connection that sends a protocol line past its
// max_control_line, and nats.go does not reconnect it, which left a proxy
// cut off from the fleet while it reported itself ready.
func TestNotReadyOnceNATSClosed(t *testing.T) {
	ff := newFleet(t, 1)
	ready := func() (int, string) {
		t.Helper()
		resp, err := http.Get(ff.urls[0] + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Status string }
		if err := jsonDecode(resp, &body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body.Status
	}
	if status, body := ready(); status != http.StatusOK {
		t.Fatalf("/readyz: %d %s", status, body)
	}
	nc := ff.proxies[0].member.Conn()
	_ = nc.Publish("switchyard.test."+strings.Repeat("x", 5000), nil) // refused: the server closes the connection
	testkit.WaitFor(t, 5*time.Second, nc.IsClosed)
	if status, body := ready(); status != http.StatusServiceUnavailable || body != "nats_closed" {
		t.Fatalf("/readyz with NATS closed: %d %s", status, body)
	}
	if status := ff.call(t, 0, directBody); status != http.StatusOK {
		t.Errorf("a request with NATS closed: %d (it still serves from memory)", status)
	}
}

// A model a provider no longer serves costs two calls, not one per key:
// once two keys are held for the same model-level refusal of one model,
// the provider+model is held and the chain moves on without trying the
// other eight keys.
func TestModelRefusalCorrelatesAcrossKeys(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		keys := make([]config.Key, 10)
		for i := range keys {
			keys[i] = config.Key{ID: fmt.Sprintf("k%d", i), Priority: 1, Weight: 1, Value: config.NewSecret(fmt.Sprintf("key-k%d", i))}
		}
		c.Providers[0].Keys = keys
	})
	f.openai.AddRule(fakeprovider.Rule{Model: "demo-model", Error: "openai.model_not_found"})
	for i := range 5 {
		status, h, body := f.call(t, "/v1/chat/completions", `{"model":"demo-chat","messages":[{"role":"user","content":"hi"}]}`)
		if status != http.StatusOK || h.Get("X-Switchyard-Provider") != "fake-anthropic" {
			t.Fatalf("request %d: %d by %q: %s", i, status, h.Get("X-Switchyard-Provider"), body)
		}
	}
	if n := f.openai.CountCalls(nil); n != 2 {
		t.Errorf("%d calls for a model the provider refuses on every key, want 2", n)
	}
	wide := hold.Scope{Kind: hold.ScopeProviderModel, Provider: "fake-openai", Model: "demo-model"}.ID()
	found := false
	for _, r := range f.svc.engine.Holds() {
		found = found || (r.ID == wide && r.State == hold.StateHeld)
	}
	if !found {
		t.Errorf("no provider+model hold %s", wide)
	}
}

// A generated request id is req_ and 24 hex digits, distinct every time; a
// caller's own id (visible ASCII, at most 128 bytes) is kept.
func TestRequestIDFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		var b [requestIDLen]byte
		id := string(newRequestID(&b))
		if len(id) != 28 || !strings.HasPrefix(id, "req_") || strings.Trim(id[4:], "0123456789abcdef") != "" {
			t.Fatalf("id %q", id)
		}
		if seen[id] {
			t.Fatalf("id %q twice", id)
		}
		seen[id] = true
	}
	app := fiber.New()
	app.Get("/", func(c *fiber.Ctx) error {
		setRequestID(c, provider.FormatOpenAI)
		return nil
	})
	for given, keep := range map[string]bool{"caller-7": true, "bad id": false, strings.Repeat("x", 129): false, "": false} {
		req := httptest.NewRequest("GET", "/", nil)
		if given != "" {
			req.Header.Set(headerRequestID, given)
		}
		resp, err := app.Test(req)
		if err != nil {
			t.Fatal(err)
		}
		got := resp.Header.Get(headerRequestID)
		if keep && got != given || !keep && (got == given || !strings.HasPrefix(got, "req_")) {
			t.Errorf("caller's id %q: response's %q", given, got)
		}
	}
}
