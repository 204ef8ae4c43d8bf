package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// A caller that gives up on a non-stream request ends it: the attempt in
// flight is interrupted at once (not left for the attempt timeout), no
// further attempt or retry is made, and nothing counts against the target
// (no hold, no breaker count).
func TestCallerGoneEndsTheRequest(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Timeouts.Attempt = time.Minute
		c.Resilience.Breaker.ConsecutiveFailures = 1 // one counted failure would trip it
	})
	f.openai.AddRule(fakeprovider.Rule{Hang: true})
	const callers = 4
	for range callers {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+clientSecret)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("a hung upstream answered: %d", resp.StatusCode)
		}
		cancel()
	}
	// Every request ends soon after its caller left (the attempt timeout
	// is a minute).
	testkit.WaitFor(t, 10*time.Second, func() bool { return f.svc.inFlight.Load() == 0 })
	if n := f.openai.CountCalls(nil); n != callers {
		t.Errorf("%d upstream calls for %d callers: no attempt after the caller left", n, callers)
	}
	if st := f.svc.engine.BreakerStates(); st["fake-openai"] != "" && st["fake-openai"] != "closed" {
		t.Errorf("breaker %v: a caller leaving counted against the provider", st)
	}
	if h := f.svc.engine.Holds(); len(h) != 0 {
		t.Errorf("holds %v after callers left", h)
	}
}
