package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"switchyard.dev/shared/config"
	"switchyard.dev/tools/fakeprovider"
)

const chatBody = `{"model":"demo-chat","messages":[{"role":"user","content":"hello"}]}`

func TestChatServedAndCredentialsStripped(t *testing.T) {
	f := newFixture(t)
	status, h, body := f.call(t, "/v1/chat/completions", chatBody,
		"X-Api-Key", "client-x-api-key", "Proxy-Authorization", "Basic cHJveHk=", "X-Request-Id", "req-given-1")
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	if h.Get("X-Request-Id") != "req-given-1" {
		t.Errorf("x-request-id = %q", h.Get("X-Request-Id"))
	}
	if h.Get("X-Switchyard-Provider") != "fake-openai" || h.Get("X-Switchyard-Model") != "demo-model" {
		t.Errorf("served-by headers: %v", h)
	}
	kid := h.Get("X-Switchyard-Key-Id")
	if kid != "a1" && kid != "a2" {
		t.Errorf("key id header %q", kid)
	}
	m := decode(t, body)
	if m["object"] != "chat.completion" {
		t.Errorf("not a chat completion: %s", body)
	}
	calls := f.openai.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d upstream calls, want 1", len(calls))
	}
	c := calls[0]
	if c.Key != "key-"+kid {
		t.Errorf("upstream saw key %q, want key-%s", c.Key, kid)
	}
	if c.Model != "demo-model" {
		t.Errorf("upstream model %q", c.Model)
	}
	for _, name := range []string{"X-Api-Key", "Proxy-Authorization"} {
		if v := c.Header.Get(name); v != "" {
			t.Errorf("client header %s reached upstream: %q", name, v)
		}
	}
	for name, vals := range c.Header {
		for _, v := range vals {
			if strings.Contains(v, clientSecret) {
				t.Errorf("client secret reached upstream in %s", name)
			}
		}
	}
}

func TestRoundRobinAcrossEqualKeys(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 10; i++ {
		if status, _, body := f.call(t, "/v1/chat/completions", chatBody); status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
	}
	a1, a2 := callsWith(f.openai, "key-a1"), callsWith(f.openai, "key-a2")
	if a1 != 5 || a2 != 5 {
		t.Errorf("calls a1=%d a2=%d, want 5 each", a1, a2)
	}
}

func TestFailoverAcrossKeys(t *testing.T) {
	tests := []struct {
		name  string
		error string
	}{
		{"invalid key", "openai.invalid_api_key"},
		{"insufficient quota", "openai.insufficient_quota"},
		{"rate limit", "openai.rate_limit"},
		{"error behind 200", "openrouter.error_in_200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: tt.error})
			for i := 0; i < 4; i++ {
				status, h, body := f.call(t, "/v1/chat/completions", chatBody)
				if status != 200 {
					t.Fatalf("status %d: %s", status, body)
				}
				if h.Get("X-Switchyard-Key-Id") != "a2" {
					t.Errorf("served by key %q, want a2", h.Get("X-Switchyard-Key-Id"))
				}
			}
			if n := callsWith(f.anthropic, "key-b1") + callsWith(f.anthropic, "key-b2"); n != 0 {
				t.Errorf("%d calls reached the next chain step", n)
			}
		})
	}
}

func TestFailoverAcrossChainSteps(t *testing.T) {
	f := newFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
	status, h, body := f.call(t, "/v1/chat/completions", chatBody)
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	if h.Get("X-Switchyard-Provider") != "fake-anthropic" {
		t.Errorf("served by %q", h.Get("X-Switchyard-Provider"))
	}
	// Two keys, each tried retry.same_target_attempts (2) times, then the
	// anthropic step: 5 attempts.
	if got := h.Get("X-Switchyard-Attempts"); got != "5" {
		t.Errorf("attempts %s, want 5", got)
	}
	m := decode(t, body)
	if m["object"] != "chat.completion" || m["model"] != "demo-chat" {
		t.Errorf("translated response: %s", body)
	}
	calls := f.anthropic.Calls()
	if len(calls) != 1 || calls[0].Model != "claude-upstream" || calls[0].Header.Get("X-Api-Key") == "" {
		t.Fatalf("anthropic calls: %+v", calls)
	}
}

func TestInactiveStepSkipped(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		ch := c.Chains["demo-chat"]
		ch.Steps[0].Active = bptr(false)
		c.Chains["demo-chat"] = ch
	})
	status, h, body := f.call(t, "/v1/chat/completions", chatBody)
	if status != 200 || h.Get("X-Switchyard-Provider") != "fake-anthropic" {
		t.Fatalf("status %d provider %q: %s", status, h.Get("X-Switchyard-Provider"), body)
	}
	if n := len(f.openai.Calls()); n != 0 {
		t.Errorf("inactive step got %d calls", n)
	}
}

func TestAllFailed(t *testing.T) {
	f := newFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.invalid_api_key"})
	f.anthropic.AddRule(fakeprovider.Rule{Error: "anthropic.invalid_api_key"})
	status, _, body := f.call(t, "/v1/chat/completions", chatBody)
	if status != 502 || errorCode(t, body) != "all_providers_failed" {
		t.Fatalf("status %d: %s", status, body)
	}
	if strings.Contains(string(body), "key-a1") || strings.Contains(string(body), "key-b1") {
		t.Errorf("secret in error: %s", body)
	}
	if !strings.Contains(string(body), "b2") {
		t.Errorf("error does not name the last key id: %s", body)
	}
}

func TestSingleCandidateFailed(t *testing.T) {
	f := newFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
	status, h, body := f.call(t, "/v1/chat/completions",
		`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"x"}]}`)
	// Both keys are candidates: all_providers_failed.
	if status != 502 || errorCode(t, body) != "all_providers_failed" {
		t.Fatalf("status %d: %s", status, body)
	}
	if h.Get("X-Switchyard-Attempts") != "4" {
		t.Errorf("attempts %q, want 4", h.Get("X-Switchyard-Attempts"))
	}

	one := newFixture(t, func(c *config.Config) { c.Providers[0].Keys = c.Providers[0].Keys[:1] })
	one.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
	status, _, body = one.call(t, "/v1/chat/completions",
		`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"x"}]}`)
	if status != 502 || errorCode(t, body) != "provider_error" {
		t.Fatalf("status %d: %s", status, body)
	}
}

func TestRequestRejectedReturnedToCaller(t *testing.T) {
	f := newFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.context_length"})
	status, _, body := f.call(t, "/v1/chat/completions", chatBody)
	if status != 400 || errorCode(t, body) != "context_length_exceeded" {
		t.Fatalf("status %d: %s", status, body)
	}
	if n := len(f.openai.Calls()) + len(f.anthropic.Calls()); n != 1 {
		t.Errorf("%d upstream calls for a bad request, want 1", n)
	}
}

// TestIdempotencyKey: the caller's Idempotency-Key travels with every
// attempt of the request to the provider it first went to, its other
// keys included (a 5xx retried in place then rotated, a 429 rotated), and
// to no other provider (the chain's next step). An invalid one is
// ignored, with a warning header: not forwarded, the request served.
func TestIdempotencyKey(t *testing.T) {
	a1First := func(c *config.Config) { c.Providers[0].Keys[1].Priority = 0 }
	check := func(t *testing.T, calls []fakeprovider.Call, want string) {
		t.Helper()
		for i, c := range calls {
			if c.IdempotencyKey != want {
				t.Errorf("call %d to %s: Idempotency-Key %q, want %q", i, c.Key, c.IdempotencyKey, want)
			}
		}
	}
	for _, tt := range []struct {
		name, rule string
		calls      int // to fake-openai
	}{
		{"a 5xx retried then rotated", "openai.server_error", 3}, // a1 twice, then a2
		{"a 429 rotated", "openai.rate_limit", 2},                // a1, then a2
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, a1First)
			f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: tt.rule, Times: 2})
			status, h, body := f.call(t, "/v1/chat/completions", chatBody, "Idempotency-Key", "idem-123")
			if status != 200 || h.Get("X-Switchyard-Key-Id") != "a2" {
				t.Fatalf("status %d via %q: %s", status, h.Get("X-Switchyard-Key-Id"), body)
			}
			calls := f.openai.Calls()
			if len(calls) != tt.calls {
				t.Fatalf("%d calls, want %d", len(calls), tt.calls)
			}
			check(t, calls, "idem-123")
		})
	}
	t.Run("not to the next provider", func(t *testing.T) {
		f := newFixture(t, a1First)
		f.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
		if status, h, body := f.call(t, "/v1/chat/completions", chatBody, "Idempotency-Key", "idem-456"); status != 200 || h.Get("X-Switchyard-Provider") != "fake-anthropic" {
			t.Fatalf("status %d via %q: %s", status, h.Get("X-Switchyard-Provider"), body)
		}
		check(t, f.openai.Calls(), "idem-456")
		if n := len(f.anthropic.Calls()); n != 1 {
			t.Fatalf("%d calls to fake-anthropic", n)
		}
		check(t, f.anthropic.Calls(), "")
	})
	t.Run("an invalid key is ignored", func(t *testing.T) {
		f := newFixture(t, a1First)
		for _, k := range []string{"bad key with spaces", strings.Repeat("k", 256), "caf\xc3\xa9"} {
			f.openai.ResetCalls()
			status, h, body := f.call(t, "/v1/chat/completions", chatBody, "Idempotency-Key", k)
			if status != 200 {
				t.Fatalf("%.20q: status %d: %s", k, status, body)
			}
			if w := h.Get("X-Switchyard-Warning"); !strings.Contains(w, "Idempotency-Key ignored") {
				t.Errorf("%.20q: warning %q", k, w)
			}
			check(t, f.openai.Calls(), "")
		}
		if status, h, _ := f.call(t, "/v1/chat/completions", chatBody, "Idempotency-Key", "fine"); status != 200 || h.Get("X-Switchyard-Warning") != "" {
			t.Errorf("a valid key: %d, warning %q", status, h.Get("X-Switchyard-Warning"))
		}
	})
}

func TestBadInput(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Limits.MaxBodyBytes = 4096 })
	big := `{"model":"demo-chat","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	tests := []struct {
		name, path, body string
		headers          []string
		status           int
		code             string
		anthropic        bool
	}{
		{"malformed json", "/v1/chat/completions", `{"model":`, nil, 400, "invalid_json", false},
		{"missing model", "/v1/chat/completions", `{"messages":[]}`, nil, 400, "missing_model", false},
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[]}`, nil, 404, "model_not_found", false},
		{"bad gateway key", "/v1/chat/completions", chatBody, []string{"Authorization", "Bearer wrong"}, 401, "invalid_api_key", false},
		{"oversize", "/v1/chat/completions", big, nil, 413, "request_too_large", false},
		{"anthropic malformed", "/v1/messages", `{`, nil, 400, "invalid_json", true},
		{"anthropic oversize", "/v1/messages", big, nil, 413, "request_too_large", true},
		{"anthropic unknown model", "/v1/messages", `{"model":"nope","max_tokens":5,"messages":[]}`, nil, 404, "model_not_found", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, h, body := f.call(t, tt.path, tt.body, tt.headers...)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, body)
			}
			if errorCode(t, body) != tt.code {
				t.Errorf("code in %s, want %s", body, tt.code)
			}
			m := decode(t, body)
			if tt.anthropic != (m["type"] == "error") {
				t.Errorf("wrong error format: %s", body)
			}
			if h.Get("X-Request-Id") == "" {
				t.Error("no x-request-id")
			}
		})
	}
	if n := len(f.openai.Calls()) + len(f.anthropic.Calls()); n != 0 {
		t.Errorf("bad input reached upstream %d times", n)
	}
}

func TestInFlightLimit(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Limits.MaxInFlight = 1 })
	f.openai.AddRule(fakeprovider.Rule{Hang: true, Times: 1})
	var wg sync.WaitGroup
	wg.Add(1)
	hung := make(chan int, 1)
	go func() {
		defer wg.Done()
		req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(chatBody))
		req.Header.Set("Authorization", "Bearer "+clientSecret)
		req.Header.Set("X-Stainless-Timeout", "5")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			hung <- resp.StatusCode
			resp.Body.Close()
		} else {
			hung <- 0
		}
	}()
	// Wait until the first request is upstream.
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(f.openai.Calls()) == 1 })
	status, h, body := f.call(t, "/v1/chat/completions", chatBody)
	if status != 503 || errorCode(t, body) != "gateway_overloaded" {
		t.Fatalf("status %d: %s", status, body)
	}
	if h.Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q on gateway_overloaded", h.Get("Retry-After"))
	}
	f.openai.Close() // releases the hung request
	wg.Wait()
}

func TestModelsAndEmbeddings(t *testing.T) {
	f := newFixture(t)
	req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Object string `json:"object"`
		Data   []struct{ ID string }
	}
	if err := jsonDecode(resp, &list); err != nil || list.Object != "list" {
		t.Fatalf("models: %v %+v", err, list)
	}
	ids := map[string]bool{}
	for _, m := range list.Data {
		ids[m.ID] = true
	}
	for _, want := range []string{"chain:demo-chat", "demo-embed", "fake-openai/demo-model", "demo-claude"} {
		if !ids[want] {
			t.Errorf("model %s not listed: %v", want, ids)
		}
	}
	status, h, body := f.call(t, "/v1/embeddings", `{"model":"demo-embed","input":["a","b"]}`)
	if status != 200 || h.Get("X-Switchyard-Model") != "demo-embed-model" {
		t.Fatalf("embeddings %d: %s", status, body)
	}
	m := decode(t, body)
	if data, _ := m["data"].([]any); len(data) != 2 {
		t.Errorf("embeddings: %s", body)
	}
}

func TestPlainAndProviderModelNames(t *testing.T) {
	f := newFixture(t)
	for _, model := range []string{"demo-model", "fake-openai/demo-model", "chain:demo-chat", "demo-claude"} {
		status, _, body := f.call(t, "/v1/chat/completions",
			fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"x"}]}`, model))
		if status != 200 {
			t.Errorf("%s: status %d: %s", model, status, body)
		}
	}
}

func TestEveryResponseHasRequestID(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/models"},
		{http.MethodGet, "/nope"},
		{http.MethodGet, "/v1/chat/completions"},
		{http.MethodGet, "/healthz"},
	} {
		req, _ := http.NewRequest(tc.method, f.url+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+clientSecret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if !strings.HasPrefix(resp.Header.Get("X-Request-Id"), "req_") {
			t.Errorf("%s %s: x-request-id %q", tc.method, tc.path, resp.Header.Get("X-Request-Id"))
		}
	}
}
