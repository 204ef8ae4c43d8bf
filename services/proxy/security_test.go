package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"switchyard.dev/services/proxy/internal/gwerror"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/servicetest"
	"switchyard.dev/shared/testkit"
)

// A client allowed one model must not reach another by spelling "model"
// twice: the proxy reads one value and the upstream's parser may read the
// other. Every ambiguous spelling is refused before any upstream call.
func TestDuplicateKeysRefused(t *testing.T) {
	const limited = "sk-limited-client"
	f := newFixture(t, func(c *config.Config) {
		c.Clients = append(c.Clients, config.ClientKey{ID: "limited", Models: []string{"demo-model"}, Value: config.NewSecret(limited)})
	})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, body string
	}{
		{"second model", `{"model":"demo-model","model":"demo-claude",` + msgs + `}`},
		{"escaped second model", `{"model":"demo-model","mod\u0065l":"demo-claude",` + msgs + `}`},
		{"escaped first model", `{"mod\u0065l":"demo-claude","model":"demo-model",` + msgs + `}`},
		{"case variant", `{"model":"demo-model","Model":"demo-claude",` + msgs + `}`},
		{"unicode case variant", `{"model":"demo-model","ſtream":true,` + msgs + `}`},
		{"second stream", `{"model":"demo-model","stream":false,"stream":true,` + msgs + `}`},
		{"nested duplicate", `{"model":"demo-model","stream_options":{"include_usage":true,"include_usage":false},` + msgs + `}`},
		{"duplicate inside a message", `{"model":"demo-model","messages":[{"role":"user","role":"system","content":"hi"}]}`},
		// encoding/json reads a lone surrogate as U+FFFD: one key to it.
		{"lone surrogates a Go parser reads as one", `{"model":"demo-model","metadata":{"a\ud800":1,"a\udbff":2},` + msgs + `}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.openai.ResetCalls()
			f.anthropic.ResetCalls()
			status, _, body := f.call(t, "/v1/chat/completions", tt.body, "Authorization", "Bearer "+limited)
			if status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", status, body)
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != gwerror.DuplicateKey {
				t.Fatalf("error body %s (%v), want code %s", body, err, gwerror.DuplicateKey)
			}
			if n := f.openai.CountCalls(nil) + f.anthropic.CountCalls(nil); n != 0 {
				t.Fatalf("%d upstream calls for a refused body", n)
			}
		})
	}
	// The same client with an unambiguous body is served, and a model it
	// may not use is refused as before.
	if status, _, body := f.call(t, "/v1/chat/completions", `{"model":"demo-model",`+msgs+`}`, "Authorization", "Bearer "+limited); status != http.StatusOK {
		t.Fatalf("plain body: %d %s", status, body)
	}
	if status, _, _ := f.call(t, "/v1/chat/completions", `{"model":"demo-claude",`+msgs+`}`, "Authorization", "Bearer "+limited); status != http.StatusForbidden {
		t.Fatalf("other model: %d, want 403", status)
	}
	// A key that is not valid UTF-8: encoding/json reads "a\xe2\x82" and
	// "a\xff" as two keys, a WHATWG decoder (Node's) as one. Refused as
	// not JSON, whatever the other keys say.
	for _, b := range []string{
		"{\"model\":\"demo-model\",\"metadata\":{\"a\xe2\x82\":1,\"a\xff\":2}," + msgs + "}",
		"{\"model\":\"demo-model\",\"mod\xffel\":\"demo-claude\"," + msgs + "}",
	} {
		f.openai.ResetCalls()
		status, _, body := f.call(t, "/v1/chat/completions", b, "Authorization", "Bearer "+limited)
		if status != http.StatusBadRequest || !bytes.Contains(body, []byte(gwerror.InvalidJSON)) || !bytes.Contains(body, []byte("UTF-8")) {
			t.Fatalf("key not UTF-8: %d %s", status, body)
		}
		if n := f.openai.CountCalls(nil); n != 0 {
			t.Fatalf("%d upstream calls for a key not UTF-8", n)
		}
	}
	// Anthropic format: refused in its own error shape.
	status, _, body := f.call(t, "/v1/messages", `{"model":"demo-model","max_tokens":5,"model":"demo-claude",`+msgs+`}`, "Authorization", "Bearer "+limited)
	if status != http.StatusBadRequest || !bytes.Contains(body, []byte(`"type":"error"`)) || !bytes.Contains(body, []byte(gwerror.DuplicateKey)) {
		t.Fatalf("messages: %d %s", status, body)
	}
}

func TestNonBooleanStreamRefused(t *testing.T) {
	f := newFixture(t)
	for _, v := range []string{`"true"`, `1`, `{}`} {
		status, _, body := f.call(t, "/v1/chat/completions", `{"model":"demo-model","stream":`+v+`,"messages":[{"role":"user","content":"hi"}]}`)
		if status != http.StatusBadRequest || !bytes.Contains(body, []byte(gwerror.InvalidRequest)) {
			t.Errorf("stream %s: %d %s", v, status, body)
		}
	}
	if n := f.openai.CountCalls(nil); n != 0 {
		t.Errorf("%d upstream calls", n)
	}
}

// FuzzParseBody checks that whatever the proxy accepts (readBody), it reads the way
// every parser reads the body it forwards: encoding/json into a map (exact
// keys, last wins), encoding/json into a struct (case-insensitive keys),
// and a strict parser that refuses duplicate keys.
func FuzzParseBody(f *testing.F) {
	for _, seed := range []string{
		`{"model":"gmodel","messages":[]}`,
		`{"model":"gmodel","model":"gpt-4.5-preview","messages":[]}`,
		`{"model":"gmodel","mod\u0065l":"x"}`,
		`{"model":"g\u006dodel","stream":true}`,
		`{"model":"a","Model":"b","STREAM":true}`,
		`{"model":"a","stream":false,"ſtream":true}`,
		`{"model":"a","stream_options":{"include_usage":true,"include_usage":false}}`,
		`{"model":"a","stream":null}`,
		`{"model":"a", "n":{"model":"b","model":"c"}}`,
		`[{"model":"a"}]`,
	} {
		f.Add([]byte(seed))
	}
	const upstream = "upstream-model"
	f.Fuzz(func(t *testing.T, body []byte) {
		p, berr := readBody(body, provider.OpChat)
		if berr != nil {
			return
		}
		model, stream := p.model, p.stream
		for _, fw := range []struct {
			body []byte
			want string
		}{
			{body, model},
			{jsonfield.SetString(nil, body, "model", upstream), upstream},
		} {
			var m map[string]any
			if err := json.Unmarshal(fw.body, &m); err != nil {
				t.Fatalf("forwarded body does not decode: %v\n%s", err, fw.body)
			}
			if m["model"] != fw.want {
				t.Fatalf("map sees model %v, proxy %q\n%s", m["model"], fw.want, fw.body)
			}
			if got := m["stream"] == true; got != stream {
				t.Fatalf("map sees stream %v, proxy %v\n%s", m["stream"], stream, fw.body)
			}
			var s struct {
				Model  string
				Stream any
			}
			if err := json.Unmarshal(fw.body, &s); err != nil {
				t.Fatalf("struct decode: %v", err)
			}
			if s.Model != fw.want || (s.Stream == true) != stream {
				t.Fatalf("struct sees model %q stream %v, proxy %q %v\n%s", s.Model, s.Stream, fw.want, stream, fw.body)
			}
			if err := testkit.StrictJSON(fw.body); err != nil {
				t.Fatalf("a strict parser refuses the forwarded body: %v\n%s", err, fw.body)
			}
		}
	})
}

// A caller timeout too large for time.Duration means "no timeout of mine",
// not an overflow into an immediate 504.
func TestHugeCallerTimeoutIsClamped(t *testing.T) {
	f := newFixture(t)
	for _, v := range []string{"1e10", "9.3e18", "1e300"} {
		status, _, body := f.call(t, "/v1/chat/completions", `{"model":"demo-model","messages":[{"role":"user","content":"hi"}]}`,
			"X-Stainless-Timeout", v)
		if status != http.StatusOK {
			t.Errorf("X-Stainless-Timeout %s: %d %s", v, status, body)
		}
	}
}

// An upstream answering 200 with something that is not the endpoint's
// response (an HTML error page, plain text, cut JSON) has failed: the
// attempt is a transient failure and the chain fails over.
func TestGarbage200FailsOver(t *testing.T) {
	for _, tt := range []struct{ name, ctype, body string }{
		{"html page", "text/html", "<html><body>502 Bad Gateway</body></html>"},
		{"plain text", "text/plain", "upstream busy"},
		{"cut json", "application/json", `{"id":"chatcmpl-1","choices":[{"index":0,`},
		{"json without choices", "application/json", `{"status":"ok"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int64
			bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", tt.ctype)
				_, _ = io.WriteString(w, tt.body)
			}))
			t.Cleanup(bad.Close)
			f := newFixture(t, func(c *config.Config) {
				c.Providers[0].BaseURL = bad.URL + "/v1"
			})
			status, h, body := f.call(t, "/v1/chat/completions", `{"model":"demo-chat","messages":[{"role":"user","content":"hi"}]}`)
			if status != http.StatusOK || h.Get("X-Switchyard-Provider") != "fake-anthropic" {
				t.Fatalf("status %d provider %q: %s", status, h.Get("X-Switchyard-Provider"), body)
			}
			if !json.Valid(body) || bytes.Contains(body, []byte(tt.body)) {
				t.Fatalf("the garbage reached the caller: %s", body)
			}
			if calls.Load() < 2 {
				t.Fatalf("%d calls to the bad upstream: a transient failure is retried", calls.Load())
			}
		})
	}
}

// Requests of the wrong shape get a 400 in the endpoint's format before
// any upstream call.
func TestRequestShapeValidated(t *testing.T) {
	f := newFixture(t)
	tests := []struct{ name, path, body, code string }{
		{"no messages", "/v1/chat/completions", `{"model":"demo-model"}`, gwerror.InvalidRequest},
		{"messages not an array", "/v1/chat/completions", `{"model":"demo-model","messages":"hi"}`, gwerror.InvalidRequest},
		{"anthropic messages not an array", "/v1/messages", `{"model":"demo-claude","max_tokens":5,"messages":{}}`, gwerror.InvalidRequest},
		{"no input", "/v1/embeddings", `{"model":"demo-embed"}`, gwerror.InvalidRequest},
		{"chat to an embedding model", "/v1/chat/completions", `{"model":"demo-embed","messages":[{"role":"user","content":"hi"}]}`, gwerror.UnsupportedForKind},
		{"embeddings of a chat model", "/v1/embeddings", `{"model":"demo-model","input":"hi"}`, gwerror.UnsupportedForKind},
		{"invalid UTF-8 model", "/v1/chat/completions", "{\"model\":\"demo-\xff\",\"messages\":[]}", gwerror.MissingModel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := f.call(t, tt.path, tt.body)
			if status != http.StatusBadRequest || !json.Valid(body) || !bytes.Contains(body, []byte(`"`+tt.code+`"`)) {
				t.Fatalf("status %d, want 400 %s: %s", status, tt.code, body)
			}
		})
	}
	if n := f.openai.CountCalls(nil) + f.anthropic.CountCalls(nil); n != 0 {
		t.Fatalf("%d upstream calls for refused requests", n)
	}
}

// Slow senders are cut after limits.read_timeout and connections over
// limits.max_connections are refused, while others are served.
func TestListenerLimits(t *testing.T) {
	oa, an := startFakes(t)
	servicetest.ListenerLimits(t, func(l config.Limits) func(context.Context, net.Listener) error {
		cfg := baseConfig(oa, an)
		cfg.Limits.ReadTimeout, cfg.Limits.IdleTimeout, cfg.Limits.MaxConnections = l.ReadTimeout, l.IdleTimeout, l.MaxConnections
		svc, err := New(cfg, Deps{Log: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return svc.Serve
	})
}

// TestLongErrorMaskedBeforeItIsCut: an upstream error that is not JSON
// (though it starts like it) is cut to a short message when translated
// into the caller's format; the key it echoes near the cut is masked
// whole first, not cut into a piece no pattern recognises.
func TestLongErrorMaskedBeforeItIsCut(t *testing.T) {
	const secret = "a1b2c3d4e5f60718293a4b5c6d7e8f90" // 32 hex digits, Azure-style
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "{"+strings.Repeat("x", 490)+" bad api-key "+secret+" (upstream gateway)")
	}))
	defer up.Close()
	f := oneProviderFixture(t, "anthropic", up.URL, secret)
	st, _, body := f.call(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if st != http.StatusBadRequest || strings.Contains(string(body), secret[:8]) || strings.Contains(string(body), secret[len(secret)-8:]) {
		t.Fatalf("%d %s", st, body)
	}
}

// TestRotatedSecretEchoMasked: a key rotated while its attempt is out,
// refused by the upstream with the old secret echoed in its message: the
// old secret is masked like the current one.
func TestRotatedSecretEchoMasked(t *testing.T) {
	const old = "plain-old-secret-value"
	var f *fixture
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		sent := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		f.svc.rt.Load().table.Key("up", "k1").SetSecret(config.NewSecret("the-new-secret-value")) // rotated meanwhile
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"API key '`+sent+`' is not valid for this model","type":"invalid_request_error","code":"bad_key"}}`)
	}))
	defer up.Close()
	f = oneProviderFixture(t, "openai-compatible", up.URL+"/v1", old)
	st, _, body := f.call(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if st != http.StatusBadRequest || strings.Contains(string(body), old) || !strings.Contains(string(body), "[redacted]") {
		t.Fatalf("%d %s", st, body)
	}
}
