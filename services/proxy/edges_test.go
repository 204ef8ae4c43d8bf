package proxy

import (
	"context"
	"net/http"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
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
