package proxy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/tools/fakeprovider"
)

// Consecutive transient failures trip the provider's breaker: the trip is
// a provider hold like any other, and with fail_fast the next request
// costs no upstream call: 503 circuit_open naming the provider, with
// Retry-After, in the endpoint's format.
func TestBreakerTripsIntoProviderHold(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Resilience.AllHeldPolicy = config.AllHeldFailFast
		c.Resilience.Breaker.ConsecutiveFailures = new(4)
	})
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
	// Each request tries a1 and a2, each twice (retry.same_target_attempts):
	// two exhausted retry sequences, counted once each.
	for i := 0; i < 2; i++ {
		if status, _, body := f.call(t, "/v1/chat/completions", directBody); status != 502 {
			t.Fatalf("request %d: %d %s", i, status, body)
		}
	}
	if got := f.svc.member.Engine.BreakerStates()["fake-openai"]; got != "open" {
		t.Fatalf("breaker state %q after 4 exhausted sequences, want open (states %v)", got, f.svc.member.Engine.BreakerStates())
	}
	var trip *hold.Record
	for _, r := range f.svc.member.Engine.Holds() {
		if r.ID == "fake-openai._" {
			trip = &r
		}
	}
	if trip == nil || trip.Source != hold.SourceBreaker || trip.Scope.Kind != hold.ScopeProvider {
		t.Fatalf("no breaker hold on the provider: %+v", f.svc.member.Engine.Holds())
	}
	// what tripped it, for the prober's check of it: chat with demo-model
	if trip.Tripped == nil || *trip.Tripped != (hold.Tripped{Operation: "chat", Model: "demo-model"}) {
		t.Errorf("the trip says it was tripped by %+v, want chat of demo-model", trip.Tripped)
	}
	before := len(f.openai.Calls())
	for _, tt := range []struct{ path, body string }{
		{"/v1/chat/completions", directBody},
		{"/v1/messages", `{"model":"fake-openai/demo-model","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`},
	} {
		status, h, body := f.call(t, tt.path, tt.body)
		if status != 503 || errorCode(t, body) != gwerror.CircuitOpen {
			t.Fatalf("%s with the breaker open: %d %s", tt.path, status, body)
		}
		m := decode(t, body)
		msg, _ := m["error"].(map[string]any)["message"].(string)
		if ra := h.Get("Retry-After"); ra == "" || !strings.Contains(msg, "`fake-openai`") || !strings.Contains(msg, "circuit breaker") ||
			!strings.Contains(msg, "retry after "+ra+" s") {
			t.Errorf("%s: the answer does not say which breaker is open and when to retry (Retry-After %q): %s", tt.path, ra, body)
		}
		if anthropic := m["type"] == "error"; anthropic != (tt.path == "/v1/messages") {
			t.Errorf("%s: not in the endpoint's format: %s", tt.path, body)
		}
	}
	if n := len(f.openai.Calls()) - before; n != 0 {
		t.Errorf("%d upstream calls through an open breaker", n)
	}
	// The chain still serves through its next step.
	if status, h, _ := f.call(t, "/v1/chat/completions", chatBody); status != 200 || h.Get("X-Switchyard-Provider") != "fake-anthropic" {
		t.Errorf("chain with the first step tripped: %d via %q", status, h.Get("X-Switchyard-Provider"))
	}
}

// TestRetryAndBreakerListsMeanWhatTheySay: retry.on_statuses and the
// breaker's failure_on_statuses mean what they list (an explicit list
// replaces the default, [] means none), and consecutive_failures 0 is a
// breaker switched off. Each request fails on both keys with a 500.
func TestRetryAndBreakerListsMeanWhatTheySay(t *testing.T) {
	for _, tt := range []struct {
		name     string
		tweak    func(*config.Config)
		requests int
		perKey   int // upstream calls per key and request
		open     bool
	}{
		{name: "defaults retry a 500 in place and count it", tweak: func(c *config.Config) { c.Resilience.Breaker.ConsecutiveFailures = new(4) }, requests: 2, perKey: 2, open: true},
		{name: "on_statuses [] retries no status", tweak: func(c *config.Config) { c.Retry.OnStatuses = []int{} }, requests: 1, perKey: 1},
		{name: "on_statuses [503] does not retry a 500", tweak: func(c *config.Config) { c.Retry.OnStatuses = []int{503} }, requests: 1, perKey: 1},
		{name: "failure_on_statuses [] counts no status", tweak: func(c *config.Config) {
			c.Resilience.Breaker.FailureOnStatuses = []string{}
			c.Resilience.Breaker.ConsecutiveFailures = new(1)
		}, requests: 3, perKey: 2},
		{name: "failure_on_statuses [503] does not count a 500", tweak: func(c *config.Config) {
			c.Resilience.Breaker.FailureOnStatuses = []string{"503"}
			c.Resilience.Breaker.ConsecutiveFailures = new(1)
		}, requests: 3, perKey: 2},
		{name: "consecutive_failures 0 is off", tweak: func(c *config.Config) { c.Resilience.Breaker.ConsecutiveFailures = new(0) }, requests: 3, perKey: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, func(c *config.Config) {
				c.Resilience.AllHeldPolicy = config.AllHeldFailFast
				tt.tweak(c)
			})
			f.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
			for i := range tt.requests {
				a1, a2 := callsWith(f.openai, "key-a1"), callsWith(f.openai, "key-a2")
				if status, _, body := f.call(t, "/v1/chat/completions", directBody); status != 502 {
					t.Fatalf("request %d: %d %s", i, status, body)
				}
				if d1, d2 := callsWith(f.openai, "key-a1")-a1, callsWith(f.openai, "key-a2")-a2; d1 != tt.perKey || d2 != tt.perKey {
					t.Fatalf("request %d: %d calls on a1 and %d on a2, want %d each", i, d1, d2, tt.perKey)
				}
			}
			if open := f.svc.member.Engine.BreakerStates()["fake-openai"] == "open"; open != tt.open {
				t.Errorf("breaker open %v, want %v (states %v)", open, tt.open, f.svc.member.Engine.BreakerStates())
			}
		})
	}
}

// A stream the upstream cuts after content reached the caller (cleanly, or
// with a reset) fails the target: each counts once against the breaker,
// which trips after consecutive_failures of them, while each caller gets
// the stream's error event. Before, the stream's first content reported a
// success (resetting the count) and the cut counted nowhere but the
// passive health counts: any number of cut streams held nothing.
func TestStreamsCutByTheUpstreamTripTheBreaker(t *testing.T) {
	const threshold = 3
	f := newFixture(t, func(c *config.Config) {
		c.Resilience.AllHeldPolicy = config.AllHeldFailFast
		c.Resilience.Breaker.ConsecutiveFailures = new(threshold)
	})
	body := `{"model":"fake-openai/demo-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for i := range threshold {
		f.openai.AddRule(fakeprovider.Rule{Chunks: 10, CutAfter: 3, Reset: i == 0, Times: 1})
		if st := f.svc.member.Engine.BreakerStates()["fake-openai"]; st == "open" {
			t.Fatalf("breaker open after %d cut streams, want %d", i, threshold)
		}
		resp, events := f.stream(t, "/v1/chat/completions", body)
		if resp.StatusCode != 200 || len(events) == 0 || !strings.Contains(events[len(events)-1].data, gwerror.StreamIncomplete) {
			t.Fatalf("stream %d: %d, events %+v", i, resp.StatusCode, events)
		}
	}
	if st := f.svc.member.Engine.BreakerStates()["fake-openai"]; st != "open" {
		t.Fatalf("breaker %q after %d streams cut by the upstream, want open", st, threshold)
	}
	var trip *hold.Record
	for _, r := range f.svc.member.Engine.Holds() {
		if r.ID == "fake-openai._" {
			trip = &r
		}
	}
	if trip == nil || trip.Source != hold.SourceBreaker {
		t.Fatalf("no breaker hold on the provider: %+v", f.svc.member.Engine.Holds())
	}
	if trip.Tripped == nil || *trip.Tripped != (hold.Tripped{Operation: "chat", Model: "demo-model"}) {
		t.Errorf("the trip says it was tripped by %+v, want chat of demo-model", trip.Tripped)
	}
}

// TestCallersToldWhenToRetry: what an SDK does with the answer is what the
// gateway means. Every attempt rate limited: 429 rate_limited with the
// soonest Retry-After (the SDK backs off; on a 502 it raised); a wait past
// proxy.retry_after_bound says X-Should-Retry: false (the SDKs slept the
// whole 1800 s), a short one lets the SDK retry; a 502 after the gateway's
// own retries says X-Should-Retry: false (an SDK retrying multiplied the
// upstream calls).
func TestCallersToldWhenToRetry(t *testing.T) {
	t.Run("rate limited everywhere, a short wait", func(t *testing.T) {
		f := newFixture(t, func(c *config.Config) { c.Resilience.AllHeldPolicy = config.AllHeldFailFast })
		f.openai.AddRule(fakeprovider.Rule{Error: "openai.rate_limit", RetryAfter: 20 * time.Second})
		status, h, body := f.call(t, "/v1/chat/completions", directBody)
		ra, _ := strconv.Atoi(h.Get("Retry-After"))
		if status != 429 || errorCode(t, body) != gwerror.RateLimited || ra < 15 || ra > 20 || h.Get("X-Should-Retry") != "" {
			t.Fatalf("both keys rate limited: %d Retry-After %q X-Should-Retry %q: %s", status, h.Get("Retry-After"), h.Get("X-Should-Retry"), body)
		}
		// then every key is held for its stated wait: 503, the SDK may retry after it
		status, h, body = f.call(t, "/v1/chat/completions", directBody)
		if status != 503 || h.Get("Retry-After") == "" || h.Get("X-Should-Retry") != "" {
			t.Fatalf("every key held 20 s: %d Retry-After %q X-Should-Retry %q: %s", status, h.Get("Retry-After"), h.Get("X-Should-Retry"), body)
		}
	})
	t.Run("rate limited everywhere, a long wait", func(t *testing.T) {
		f := newFixture(t, func(c *config.Config) { c.Resilience.AllHeldPolicy = config.AllHeldFailFast })
		f.openai.AddRule(fakeprovider.Rule{Error: "openai.rate_limit", RetryAfter: 1800 * time.Second})
		for i, want := range []int{429, 503} {
			status, h, body := f.call(t, "/v1/chat/completions", directBody)
			ra, _ := strconv.Atoi(h.Get("Retry-After"))
			if status != want || ra < 1700 || h.Get("X-Should-Retry") != "false" {
				t.Fatalf("request %d: %d Retry-After %q X-Should-Retry %q, want %d with the truthful wait and false: %s",
					i, status, h.Get("Retry-After"), h.Get("X-Should-Retry"), want, body)
			}
		}
	})
	t.Run("failed after the gateway's retries", func(t *testing.T) {
		f := newFixture(t, func(c *config.Config) { c.Resilience.AllHeldPolicy = config.AllHeldFailFast })
		f.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
		status, h, body := f.call(t, "/v1/chat/completions", directBody)
		if status != 502 || h.Get("X-Should-Retry") != "false" || h.Get("X-Switchyard-Attempts") == "1" {
			t.Fatalf("%d X-Should-Retry %q after %s attempts: %s", status, h.Get("X-Should-Retry"), h.Get("X-Switchyard-Attempts"), body)
		}
	})
}
