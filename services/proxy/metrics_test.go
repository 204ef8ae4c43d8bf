package proxy

import (
	"net/http"
	"strings"
	"testing"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/servicetest"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// scrape returns the proxy's /metrics text.
func (f *fixture) scrape(t *testing.T) string {
	t.Helper()
	text, err := servicetest.Scrape(f.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func TestMetrics(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Resilience.Breaker.ConsecutiveFailures = new(50) // a breaker to report, closed
	})
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key", Times: 1})
	if status, _, body := f.call(t, "/v1/chat/completions", directBody); status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	if status, _, _ := f.call(t, "/v1/chat/completions", `{"model":"nope","messages":[]}`); status != 404 {
		t.Fatalf("unknown model: %d", status)
	}
	if resp, events := f.stream(t, "/v1/chat/completions", streamBody); resp.StatusCode != 200 || len(events) == 0 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
	f.anthropic.AddRule(fakeprovider.Rule{Error: "anthropic.overloaded"})
	if status, _, _ := f.call(t, "/v1/chat/completions", chatBody); status != 502 {
		t.Fatalf("all failed: %d", status)
	}

	text := f.scrape(t)
	for _, want := range []string{
		`switchyard_requests_total{class="ok",endpoint="chat.completions",model="fake-openai/demo-model",provider="fake-openai",requested_model="fake-openai/demo-model",status="200"} 1`,
		`switchyard_requests_total{class="rejected",endpoint="chat.completions",model="unknown",provider="none",requested_model="unknown",status="404"} 1`,
		`switchyard_requests_total{class="ok",endpoint="chat.completions",model="chain:demo-chat",provider="fake-openai",requested_model="chain:demo-chat",status="200"} 1`,
		`switchyard_requests_total{class="transient",endpoint="chat.completions",model="chain:demo-chat",provider="none",requested_model="chain:demo-chat",status="502"} 1`,
		`switchyard_request_attempts_count 3`,
		// The failure the failover hid from the caller, and what served.
		`switchyard_upstream_attempts_total{class="credential_rejected",key="a1",model="demo-model",outcome="failed",provider="fake-openai"} 1`,
		`switchyard_upstream_attempts_total{class="ok",key="a2",model="demo-model",outcome="ok",provider="fake-openai"} 2`,
		`switchyard_upstream_attempts_total{class="transient",key="b1",model="claude-upstream",outcome="failed",provider="fake-anthropic"}`,
		`switchyard_upstream_attempt_duration_seconds_count{outcome="failed",provider="fake-openai"}`,
		`switchyard_upstream_attempt_duration_seconds_count{outcome="ok",provider="fake-openai"}`,
		`switchyard_request_duration_seconds_count{endpoint="chat.completions"} 4`,
		`switchyard_upstream_latency_seconds_count{provider="fake-openai"}`,
		`switchyard_upstream_latency_seconds_count{provider="fake-anthropic"}`,
		`switchyard_time_to_first_token_seconds_count{provider="fake-openai"} 1`,
		`switchyard_requests_in_flight 0`,
		`switchyard_holds{class="credential_rejected",scope="key",state="held"} 1`,
		`switchyard_circuit_breaker_state{model="",provider="fake-openai"} 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %s in\n%s", want, grep(text, "switchyard_"))
		}
	}
}

// Several proxies in one process each have their own registry.
func TestMetricsRegistryPerService(t *testing.T) {
	a := newFixture(t)
	b := newFixture(t)
	a.call(t, "/v1/chat/completions", directBody)
	if strings.Contains(b.scrape(t), `switchyard_requests_total{`) {
		t.Error("a request to one proxy shows in another's metrics")
	}
	if !strings.Contains(a.scrape(t), `switchyard_requests_total{`) {
		t.Error("no request counted")
	}
}

func grep(text, prefix string) string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestHoldMetrics: the proxy exports its hold engine's table with the
// series and labels of the prober and the admin service, read from the
// fleet's bucket.
func TestHoldMetrics(t *testing.T) {
	ff := newFleet(t, 1)
	nc, _ := testkit.ConnectNATS(t, ff.ns.ClientURL())
	servicetest.BreakerMetrics(t, nc, ff.urls[0]+"/metrics", "fake-openai", "org/model-1.5")
}

// TestMetricsAfterConcurrentRequests: label values never come from the
// server's reused request buffers.
func TestMetricsAfterConcurrentRequests(t *testing.T) {
	f := newFixture(t)
	servicetest.MetricsAfterConcurrentRequests(t, f.url, http.Header{"Authorization": {"Bearer " + clientSecret}, "Content-Type": {"application/json"}},
		[]string{"/v1/chat/completions", "/v1/messages", "/v1/embeddings", "/v1/models", "/v1/nope", "/healthz", "/readyz"})
}
