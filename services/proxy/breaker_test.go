package proxy

import (
	"testing"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/tools/fakeprovider"
)

// Consecutive transient failures trip the provider's breaker: the trip is
// a provider hold like any other, and with fail_fast the next request
// costs no upstream call.
func TestBreakerTripsIntoProviderHold(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Resilience.AllHeldPolicy = config.AllHeldFailFast
		c.Resilience.Breaker.ConsecutiveFailures = 4
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
	before := len(f.openai.Calls())
	status, _, body := f.call(t, "/v1/chat/completions", directBody)
	if status != 503 || errorCode(t, body) != "no_available_target" {
		t.Fatalf("with the breaker open: %d %s", status, body)
	}
	if n := len(f.openai.Calls()) - before; n != 0 {
		t.Errorf("%d upstream calls through an open breaker", n)
	}
	// The chain still serves through its next step.
	if status, h, _ := f.call(t, "/v1/chat/completions", chatBody); status != 200 || h.Get("X-Switchyard-Provider") != "fake-anthropic" {
		t.Errorf("chain with the first step tripped: %d via %q", status, h.Get("X-Switchyard-Provider"))
	}
}
