package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"

	"switchyard.dev/services/proxy/internal/upstream"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/servicetest"

	"switchyard.dev/tools/fakeprovider"
)

// ptCall sends a passthrough request with the gateway key (and a caller's
// own provider-style credentials, which must not travel).
func ptCall(t *testing.T, f *fixture, method, path, body string, headers ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, f.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	req.Header.Set("X-Api-Key", "sk-callers-own-key")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestPassthrough(t *testing.T) {
	f := newFixture(t)
	t.Run("served with the provider's key, the caller's stripped", func(t *testing.T) {
		st, h, body := ptCall(t, f, "GET", "/fake-openai/models?limit=5", "")
		if st != 200 || !strings.Contains(body, `"data"`) || h.Get(headerProvider) != "fake-openai" {
			t.Fatalf("%d %s", st, body)
		}
		c := f.openai.Calls()[len(f.openai.Calls())-1]
		if c.Path != "/v1/models" || c.Query != "limit=5" || (c.Key != "key-a1" && c.Key != "key-a2") {
			t.Fatalf("upstream call %+v", c)
		}
		for _, k := range []string{"Authorization", "X-Api-Key"} {
			if v := c.Header.Get(k); strings.Contains(v, clientSecret) || strings.Contains(v, "sk-callers-own-key") {
				t.Fatalf("the caller's %s went upstream: %q", k, v)
			}
		}
		// The path is the caller's: no metric series per path.
		m, err := servicetest.Scrape(f.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(m, `model="/models"`) || !strings.Contains(m, `switchyard_tokens_total{client="team",kind="output",model="*",provider="fake-openai"}`) {
			t.Errorf("passthrough metrics label the path:\n%s", m)
		}
		// An Anthropic provider's too.
		if st, _, body := ptCall(t, f, "POST", "/fake-anthropic/v1/messages", `{"model":"claude-upstream","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`); st != 200 {
			t.Fatalf("anthropic passthrough: %d %s", st, body)
		}
		if m, err = servicetest.Scrape(f.url + "/metrics"); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(m, `model="/v1/messages"`) || !strings.Contains(m, `switchyard_tokens_total{client="team",kind="output",model="*",provider="fake-anthropic"}`) {
			t.Errorf("anthropic passthrough metrics label the path:\n%s", m)
		}
	})
	t.Run("the gateway's headers are not replaced by the provider's", func(t *testing.T) {
		// The fake provider answers with its own x-request-id, as OpenAI does.
		st, h, body := ptCall(t, f, "GET", "/fake-openai/models", "", headerRequestID, "caller-id-7")
		if st != 200 {
			t.Fatalf("%d %s", st, body)
		}
		if got := h.Values(headerRequestID); len(got) != 1 || got[0] != "caller-id-7" {
			t.Fatalf("X-Request-Id %q, want the caller's only", got)
		}
		if got := h.Values(headerProvider); len(got) != 1 || got[0] != "fake-openai" {
			t.Fatalf("%s %q", headerProvider, got)
		}
		if c := f.openai.Calls()[len(f.openai.Calls())-1]; c.Header.Get(headerRequestID) != "caller-id-7" {
			t.Fatalf("upstream got X-Request-Id %q", c.Header.Get(headerRequestID))
		}
	})
	t.Run("a refused key rotates on a GET", func(t *testing.T) {
		id := f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key"})
		defer f.openai.RemoveRule(id)
		for range 4 {
			if st, h, body := ptCall(t, f, "GET", "/fake-openai/models", ""); st != 200 || h.Get(headerKeyID) != "a2" {
				t.Fatalf("%d key %s: %s", st, h.Get(headerKeyID), body)
			}
		}
	})
	t.Run("a POST without Idempotency-Key is sent once", func(t *testing.T) {
		id := f.openai.AddRule(fakeprovider.Rule{Path: "/v1/files", Error: "openai.server_error"})
		defer f.openai.RemoveRule(id)
		before := len(f.openai.Calls())
		st, _, body := ptCall(t, f, "POST", "/fake-openai/files", `{"purpose":"batch"}`)
		if st != 500 || !strings.Contains(body, "error") {
			t.Fatalf("%d %s", st, body)
		}
		if n := len(f.openai.Calls()) - before; n != 1 {
			t.Fatalf("%d upstream calls, want 1", n)
		}
		before = len(f.openai.Calls())
		st, _, _ = ptCall(t, f, "POST", "/fake-openai/files", `{"purpose":"batch"}`, "Idempotency-Key", "upload-1")
		if n := len(f.openai.Calls()) - before; st != 502 || n < 2 {
			t.Fatalf("with an Idempotency-Key: %d after %d calls, want retries then 502", st, n)
		}
		// An invalid key is ignored: the POST is not replay-safe, sent once
		// without it, and the answer says so.
		before = len(f.openai.Calls())
		st, h, _ := ptCall(t, f, "POST", "/fake-openai/files", `{"purpose":"batch"}`, "Idempotency-Key", "not a valid key")
		calls := f.openai.Calls()[before:]
		if st != 500 || len(calls) != 1 || calls[0].IdempotencyKey != "" || !strings.Contains(h.Get("X-Switchyard-Warning"), "Idempotency-Key ignored") {
			t.Fatalf("with an invalid Idempotency-Key: %d after %d calls (%+v), warning %q", st, len(calls), calls, h.Get("X-Switchyard-Warning"))
		}
	})
	t.Run("an upstream error is the caller's, masked", func(t *testing.T) {
		id := f.openai.AddRule(fakeprovider.Rule{Path: "/v1/batches", Error: "openai.bad_request_echo"})
		defer f.openai.RemoveRule(id)
		st, _, body := ptCall(t, f, "POST", "/fake-openai/batches", `{}`)
		if st != 400 || strings.Contains(body, "key-a") || !strings.Contains(body, "[redacted]") {
			t.Fatalf("%d %s", st, body)
		}
	})
	t.Run("unknown provider, unknown route, no key", func(t *testing.T) {
		if st, _, body := ptCall(t, f, "GET", "/nobody/models", ""); st != 404 || !strings.Contains(body, gwerror.ProviderNotFound) {
			t.Fatalf("%d %s", st, body)
		}
		if st, _, body := ptCall(t, f, "POST", "/v1/not-a-route", "{}"); st != 404 || !strings.Contains(body, gwerror.NotFound) {
			t.Fatalf("%d %s", st, body)
		}
		req, _ := http.NewRequest("GET", f.url+"/fake-openai/models", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("without a gateway key: %d", resp.StatusCode)
		}
	})
}

// TestPassthroughFailuresOfTheCallersOwn: a passthrough call names no
// model, and its path may name something of the caller's that does not
// exist: a 404 "model_not_found" or a 403 permission refusal is returned as
// the provider gave it and holds nothing (it held the whole key, and chat
// got 503). An answer larger than the gateway holds is the caller's too:
// returned at once, not retried, and no breaker counts it.
func TestPassthroughFailuresOfTheCallersOwn(t *testing.T) {
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/models/gpt-nope":
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"error":{"message":"The model 'gpt-nope' does not exist","type":"invalid_request_error","param":"model","code":"model_not_found"}}`)
		case "/v1/files":
			w.WriteHeader(403)
			_, _ = io.WriteString(w, `{"error":{"message":"You are not allowed to use the Files API with this key.","type":"permission_error","code":"permission_error"}}`)
		case "/v1/batches":
			w.WriteHeader(401)
			_, _ = io.WriteString(w, `{"error":{"message":"You have insufficient permissions for this operation. Missing scopes: api.batch.read.","type":"invalid_request_error","param":null,"code":null}}`)
		case "/v1/revoked":
			w.WriteHeader(401)
			_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided: sk-stub. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
		case "/v1/files/big/content":
			w.Header().Set("Content-Length", strconv.Itoa(upstream.MaxResponseBytes+1))
			w.WriteHeader(200)
		default:
			_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
		}
	}))
	defer up.Close()
	f := oneProviderFixture(t, "openai", up.URL+"/v1", "sk-stub")
	if st, _, body := ptCall(t, f, "GET", "/up/models/gpt-nope", ""); st != 404 || !strings.Contains(body, "model_not_found") {
		t.Errorf("404: %d %s, want the provider's answer", st, body)
	}
	if st, _, body := ptCall(t, f, "GET", "/up/files", ""); st != 403 || !strings.Contains(body, "Files API") {
		t.Errorf("403: %d %s, want the provider's answer", st, body)
	}
	if st, _, body := ptCall(t, f, "GET", "/up/batches", ""); st != 401 || !strings.Contains(body, "Missing scopes") {
		t.Errorf("401 missing scopes: %d %s, want the provider's answer", st, body)
	}
	for range 6 {
		before := calls.Load()
		st, _, body := ptCall(t, f, "GET", "/up/files/big/content", "")
		if st != 502 || !strings.Contains(body, codeResponseTooLarge) || calls.Load()-before != 1 {
			t.Fatalf("a too large answer: %d %s, %d calls", st, body, calls.Load()-before)
		}
	}
	if h := f.svc.engine.Holds(); len(h) != 0 {
		t.Fatalf("holds %+v", h)
	}
	if st, _, body := f.call(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`); st != 200 {
		t.Fatalf("chat after the passthrough failures: %d %s", st, body)
	}
	// A plain 401 (a revoked key) is about the key: it is held.
	ptCall(t, f, "GET", "/up/revoked", "")
	if h := f.svc.engine.Holds(); len(h) != 1 {
		t.Fatalf("holds after a revoked key's 401: %+v", h)
	}
}

// TestPassthroughHeaders: the caller's cookies and its choice of the key's
// organization or project do not go upstream; a provider's refusal comes
// back with its Retry-After.
func TestPassthroughHeaders(t *testing.T) {
	f := newFixture(t)
	ptCall(t, f, "GET", "/fake-openai/models", "", "Cookie", "session=abc", "OpenAI-Organization", "org-other",
		"OpenAI-Project", "proj-other", "X-Custom", "kept")
	c := f.openai.Calls()[len(f.openai.Calls())-1]
	for _, h := range []string{"Cookie", "Openai-Organization", "Openai-Project"} {
		if v := c.Header.Get(h); v != "" {
			t.Errorf("%s went upstream: %q", h, v)
		}
	}
	if c.Header.Get("X-Custom") != "kept" {
		t.Errorf("the caller's own header was dropped: %v", c.Header)
	}
	f.openai.AddRule(fakeprovider.Rule{Path: "/files", Error: "openai.rate_limit", RetryAfter: 30 * time.Second, Times: 1})
	st, h, body := ptCall(t, f, "POST", "/fake-openai/files", `{}`)
	if st != 429 || h.Get("Retry-After") != "30" {
		t.Fatalf("%d Retry-After %q: %s", st, h.Get("Retry-After"), body)
	}
}

// A passthrough path with a "." or ".." segment, escaped or not, is
// refused before any call: /v1/%2e%2e/%2e%2e/secret is /secret to
// whatever normalises the URL on its way, outside base_url's path.
func TestPassthroughDotSegments(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, path string
		anthropic  bool
	}{
		{"escaped dot-dot", "/fake-openai/%2e%2e/%2e%2e/secret?x=1", false},
		{"mixed case escapes", "/fake-openai/files/%2E./x", false},
		{"escaped dot", "/fake-openai/%2e/files", false},
		{"escaped slash inside", "/fake-openai/files/..%2fsecret", false},
		{"backslash", "/fake-openai/files/..%5c..%5csecret", false},
		{"malformed escape", "/fake-openai/files/%zz", false},
		{"anthropic format", "/fake-anthropic/v1/%2e%2e/secret", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.openai.Calls()) + len(f.anthropic.Calls())
			status, b := rawGet(t, f.url, tt.path)
			if status != http.StatusBadRequest || errorCode(t, b) != gwerror.InvalidRequest {
				t.Fatalf("%d %s", status, b)
			}
			if m := decode(t, b); tt.anthropic != (m["type"] == "error") {
				t.Errorf("not in the provider's format: %s", b)
			}
			if n := len(f.openai.Calls()) + len(f.anthropic.Calls()) - before; n != 0 {
				t.Errorf("%d upstream calls", n)
			}
		})
	}
	// Dots inside a segment are a name like any other.
	if st, _, body := ptCall(t, f, "GET", "/fake-openai/files/file..1.jsonl", ""); st == http.StatusBadRequest {
		t.Errorf("a name with dots refused: %s", body)
	}
}

// Gemini's refusal of a file the request names ("permission to access the
// File ... or it may not exist") may come from the key's project, another
// key's holding the upload: the call moves to the next key, nothing is
// held, and when every key refused, the provider's 403 is the caller's.
// Before, the first refusal went back to the caller (request_rejected
// returns), though another key would have served it.
func TestKeyDependentRefusalRotates(t *testing.T) {
	const refusal = `[{"error":{"code":403,"message":"You do not have permission to access the File abc or it may not exist.","status":"PERMISSION_DENIED"}}]`
	var refuseAll atomic.Bool
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		auth := r.Header.Get("Authorization") + r.Header.Get("X-Goog-Api-Key") + r.URL.Query().Get("key")
		if refuseAll.Load() || strings.Contains(auth, "key-a") {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, refusal)
			return
		}
		_, _ = io.WriteString(w, `{"name":"files/abc"}`)
	}))
	t.Cleanup(up.Close)
	f := oneProviderFixture(t, "gemini", up.URL, "key-a", func(p *config.Provider) {
		p.Keys = append(p.Keys, config.Key{ID: "k2", Weight: 1, Value: config.NewSecret("key-b")})
	})
	for i := range 4 { // round robin: each key first in turn
		if st, _, body := ptCall(t, f, http.MethodGet, "/up/files/abc", ""); st != http.StatusOK {
			t.Fatalf("call %d: %d %s", i, st, body)
		}
	}
	if h := f.svc.engine.Holds(); len(h) != 0 {
		t.Fatalf("holds %+v", h)
	}
	refuseAll.Store(true)
	before := calls.Load()
	st, _, body := ptCall(t, f, http.MethodGet, "/up/files/abc", "")
	if st != http.StatusForbidden || !strings.Contains(body, "or it may not exist") || calls.Load()-before != 2 {
		t.Fatalf("every key refused: %d after %d calls: %s", st, calls.Load()-before, body)
	}
}
