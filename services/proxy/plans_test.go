package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// TestPlanModels: a key of a plan that lists models may use what both its
// own list and the plan's allow.
func TestPlanModels(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Plans = map[string]config.Plan{"openai-only": {Models: []string{"fake-openai/*", "demo-claude"}}}
		c.Clients[0].Models = []string{"*"}
		c.Clients[0].Plan = "openai-only"
	})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tt := range []struct {
		model string
		want  int
	}{
		{"demo-model", http.StatusOK},             // on fake-openai only
		{"fake-openai/demo-model", http.StatusOK}, // provider/model
		{"demo-claude", http.StatusOK},            // named by the plan
		{"fake-anthropic/demo-claude", http.StatusForbidden},
		{"demo-chat", http.StatusForbidden}, // a chain with a step elsewhere
	} {
		status, _, body := f.call(t, "/v1/chat/completions", `{"model":"`+tt.model+`",`+msgs+`}`)
		if status != tt.want {
			t.Errorf("%s: %d, want %d: %s", tt.model, status, tt.want, body)
		}
	}
}

// errorOf decodes an error body of either format: code and message.
func errorOf(t *testing.T, body []byte) (code, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Code, Type, Message string
		}
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	if e.Error.Code == "" {
		return e.Error.Type, e.Error.Message
	}
	return e.Error.Code, e.Error.Message
}

// TestPlanRateLimit: over its plan's requests per minute a key gets 429
// rate_limited with Retry-After, naming the limit, in the endpoint's
// format, and nothing goes upstream.
func TestPlanRateLimit(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Plans = map[string]config.Plan{"small": {RequestsPerMinute: 3}}
		c.Clients[0].Plan = "small"
	})
	for i := range 3 {
		if status, _, body := f.call(t, "/v1/chat/completions", directBody); status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i+1, status, body)
		}
	}
	before := f.openai.CountCalls(nil)
	status, h, body := f.call(t, "/v1/chat/completions", directBody)
	code, msg := errorOf(t, body)
	if status != http.StatusTooManyRequests || code != "rate_limited" || !strings.Contains(msg, "requests_per_minute") ||
		!strings.Contains(msg, `"small"`) {
		t.Fatalf("over the limit: %d %s", status, body)
	}
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q", h.Get("Retry-After"))
	}
	status, _, body = f.call(t, "/v1/messages", `{"model":"demo-claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	if status != http.StatusTooManyRequests || !strings.Contains(string(body), `"type":"error"`) || !strings.Contains(string(body), "rate_limited") {
		t.Fatalf("messages over the limit: %d %s", status, body)
	}
	if n := f.openai.CountCalls(nil) + f.anthropic.CountCalls(nil) - before; n != 0 {
		t.Errorf("%d upstream calls for refused requests", n)
	}
}

// TestPlanConcurrency: a key of a plan with one concurrent request gets
// 429 concurrency_limited while its first request is in flight.
func TestPlanConcurrency(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Plans = map[string]config.Plan{"one": {ConcurrentRequests: 1}}
		c.Clients[0].Plan = "one"
	})
	f.openai.AddRule(fakeprovider.Rule{FirstByteLatency: time.Second, Times: 1})
	done := make(chan int, 1)
	go func() {
		status, _, _ := f.call(t, "/v1/chat/completions", directBody)
		done <- status
	}()
	testkit.WaitFor(t, 5*time.Second, func() bool { return f.openai.PeakInFlight() == 1 })
	status, _, body := f.call(t, "/v1/chat/completions", directBody)
	if code, _ := errorOf(t, body); status != http.StatusTooManyRequests || code != "concurrency_limited" {
		t.Fatalf("second request: %d %s", status, body)
	}
	f.openai.ClearRules()
	if status := <-done; status != http.StatusOK {
		t.Fatalf("first request: %d", status)
	}
	if status, _, body := f.call(t, "/v1/chat/completions", directBody); status != http.StatusOK {
		t.Fatalf("after the first ended: %d %s", status, body)
	}
}

// TestPlanBudget: a request whose estimated cost exceeds what is left of
// the budget is refused before routing; spend that reaches the budget
// exhausts it (one budget event) and later requests are refused.
func TestPlanBudget(t *testing.T) {
	mf := newMeterFixture(t, func(c *config.Config) {
		// output only: $0.001 a token; the fake answers 10 output tokens
		c.Prices = []config.Price{{Provider: "fake-openai", Model: "demo-model", Input: fptr(0), Output: fptr(1000)}}
		c.Plans = map[string]config.Plan{"pro": {Budget: config.Budget{Day: 0.005}}}
	})
	nc, _ := testkit.ConnectNATS(t, mf.ns.ClientURL())
	events := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("switchyard.events.budget.>", events)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	big := `{"model":"fake-openai/demo-model","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	status, _, body := mf.call(t, "/v1/chat/completions", big)
	// not exhausted (the admin says so): this request would overspend it
	if code, msg := errorOf(t, body); status != http.StatusTooManyRequests || code != "budget_insufficient" || !strings.Contains(msg, "estimated cost") {
		t.Fatalf("estimate over the budget: %d %s", status, body)
	}
	small := `{"model":"fake-openai/demo-model","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	if status, _, body := mf.call(t, "/v1/chat/completions", small); status != http.StatusOK {
		t.Fatalf("within the budget: %d %s", status, body)
	}
	select {
	case m := <-events:
		var ev hold.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil || m.Subject != "switchyard.events.budget.team" ||
			ev.Kind != hold.EventBudget || ev.Outcome != "exhausted" || ev.Client != "team" || ev.Period != "day" ||
			ev.BudgetUSD != 0.005 || ev.SpendUSD < 0.005 {
			t.Errorf("budget event on %s: %s (%v)", m.Subject, m.Data, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no budget event")
	}
	status, h, body := mf.call(t, "/v1/chat/completions", small)
	if code, msg := errorOf(t, body); status != http.StatusTooManyRequests || code != "budget_exhausted" || !strings.Contains(msg, "exhausted") {
		t.Fatalf("after the budget was spent: %d %s", status, body)
	}
	// The SDKs retry a 429 within seconds unless told not to.
	if h.Get("X-Should-Retry") != "false" || h.Get("Retry-After") == "" {
		t.Errorf("budget refusal headers: should-retry %q, retry-after %q", h.Get("X-Should-Retry"), h.Get("Retry-After"))
	}
}

// TestFleetPlanRateLimit: three proxies with a plan of 30 requests per
// minute admit about 30 in total (each counting alone admitted 90).
func TestFleetPlanRateLimit(t *testing.T) {
	const limit = 30
	ff := newFleet(t, 3, func(c *config.Config) {
		c.Plans = map[string]config.Plan{"pro": {RequestsPerMinute: limit}}
		c.Clients[0].Plan = "pro"
		c.Metering.LimitsInterval = 20 * time.Millisecond
	})
	admitted := 0
	for i := range 3 * limit {
		if status := ff.call(t, i%3, directBody); status == http.StatusOK {
			admitted++
		} else if status != http.StatusTooManyRequests {
			t.Fatalf("request %d: status %d", i, status)
		}
		time.Sleep(5 * time.Millisecond) // pacing the load (a few requests per report interval), not synchronisation
	}
	t.Logf("admitted %d of %d with a fleet-wide limit of %d", admitted, 3*limit, limit)
	if admitted < limit || admitted > limit+6 {
		t.Errorf("admitted %d, want %d plus at most the interval's overshoot", admitted, limit)
	}
}

// TestPlanBudgetWithAnImage: an inline image counts as an image's tokens
// in the estimate a budget admits by, not a token per four bytes (a 2 MB
// photo was estimated at $1.31 and refused by a $1 budget).
func TestPlanBudgetWithAnImage(t *testing.T) {
	mf := newMeterFixture(t, func(c *config.Config) {
		c.Prices = []config.Price{{Provider: "fake-openai", Model: "demo-model", Input: fptr(2.5), Output: fptr(10)}}
		c.Plans = map[string]config.Plan{"pro": {Budget: config.Budget{Day: 1}}}
	})
	img := strings.Repeat("A", 2<<20)
	body := `{"model":"fake-openai/demo-model","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"what is it?"},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + img + `"}}]}]}`
	if status, _, b := mf.call(t, "/v1/chat/completions", body); status != http.StatusOK {
		t.Fatalf("%d %.300s", status, b)
	}
}
