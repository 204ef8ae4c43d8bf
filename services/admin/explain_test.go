package admin

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/testkit"
)

// cannedExplanation is a proxy's explanation (route.Explanation's JSON):
// one candidate with a held key, one step rejected.
const cannedExplanation = `{"model":"gpt-4o","route":"chain:default","kind":"chain","strategy":"priority","fail_closed":false,` +
	`"needs":["tools"],"estimated_input_tokens":12,"region":"eu","region_required":true,` +
	`"candidates":[{"step":0,"target":"openai/gpt-4o","provider":"openai","model":"gpt-4o","region":"eu","health":"healthy",` +
	`"latency_ms":412.5,"estimated_cost_usd":0.00035,"capabilities":["tools","vision"],"keys":[{"id":"primary","state":"available"},` +
	`{"id":"secondary","state":"held","hold_id":"openai.secondary","class":"rate_limit","until":"2026-11-30T12:00:00Z"}]}],` +
	`"rejected":[{"step":1,"target":"local/llama","provider":"local","model":"llama","health":"unknown","reason":"lacks_capability","detail":"lacks tools"}]}`

// explainStandIn answers route explanations in the proxies' queue group,
// the way a proxy does, from canned answers chosen by the request's
// model, and keeps every request it received.
type explainStandIn struct {
	mu  sync.Mutex
	got []bus.ExplainRequest
	raw [][]byte
}

// answer is the stand-in's reply to q (nil: none at all).
func (x *explainStandIn) answer(q bus.ExplainRequest) []byte {
	reply := bus.ExplainReply{V: bus.ExplainVersion, Instance: "proxy-standin", RoutingVersion: 7}
	fail := func(status int, code, msg string) []byte {
		reply.Error = &bus.ExplainError{Status: status, Code: code, Message: msg}
		b, _ := json.Marshal(reply)
		return b
	}
	switch {
	case q.Model == "silent":
		return nil
	case q.Model == "garbage":
		return []byte("not json")
	case q.Model == "future":
		return []byte(`{"v":2,"instance":"proxy-next"}`)
	case q.Client == "ghost":
		return fail(404, "client_not_found", `no client key with id "ghost"`)
	case q.Model == "gpt-4o":
		reply.Explanation = json.RawMessage(cannedExplanation)
		b, _ := json.Marshal(reply)
		return b
	}
	return fail(404, "model_not_found", "the model `"+q.Model+"` does not exist on this gateway")
}

// startExplainStandIn subscribes a stand-in on its own connection and
// waits until the server has the subscription.
func (e *env) startExplainStandIn() *explainStandIn {
	e.t.Helper()
	x := &explainStandIn{}
	nc, _ := testkit.ConnectNATS(e.t, e.ns.ClientURL())
	_, err := nc.QueueSubscribe(bus.ExplainSubject, bus.ExplainQueue, func(m *nats.Msg) {
		var q bus.ExplainRequest
		_ = json.Unmarshal(m.Data, &q)
		x.mu.Lock()
		x.got = append(x.got, q)
		x.raw = append(x.raw, m.Data)
		x.mu.Unlock()
		if b := x.answer(q); b != nil {
			_ = m.Respond(b)
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return x
}

// received is how many requests the stand-in got, and the last one.
func (x *explainStandIn) received() (int, bus.ExplainRequest, []byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.got) == 0 {
		return 0, bus.ExplainRequest{}, nil
	}
	return len(x.got), x.got[len(x.got)-1], x.raw[len(x.raw)-1]
}

func TestRouteExplain(t *testing.T) {
	var logs testkit.SyncBuffer
	e := startEnvWith(t, envOptions{explainTimeout: 300 * time.Millisecond,
		log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	const secret = "SECRET-PROMPT-7f3a"
	req := map[string]any{
		"model": "gpt-4o", "endpoint": "messages", "client": "app",
		"body":    map[string]any{"model": "gpt-4o", "tools": []any{map[string]any{"name": "t"}}, "messages": []any{map[string]any{"role": "user", "content": secret}}},
		"headers": map[string]string{"X-Switchyard-Region": "eu", "X-Session": "s-1"},
	}

	// no proxy listens yet: the server says so at once
	r := e.do("POST", "/admin/route/explain", readToken, req)
	r.expect(t, 503, codeNoProxy)
	if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "no responders") {
		t.Errorf("no responders: message %q", msg)
	}

	x := e.startExplainStandIn()

	t.Run("explanation relayed", func(t *testing.T) {
		r := e.do("POST", "/admin/route/explain", readToken, req)
		r.expect(t, 200, "")
		var got struct {
			Instance       string          `json:"instance"`
			RoutingVersion int             `json:"routing_version"`
			Explanation    json.RawMessage `json:"explanation"`
		}
		if err := json.Unmarshal(r.raw, &got); err != nil {
			t.Fatal(err)
		}
		if got.Instance != "proxy-standin" || got.RoutingVersion != 7 || string(got.Explanation) != cannedExplanation {
			t.Fatalf("answer %s", r.raw)
		}
		if err := testkit.StrictJSON(r.raw); err != nil {
			t.Fatal(err)
		}
		checkSchema(t, "ExplainAnswer", r.body)
		checkSchema(t, "ExplainRequest", adminapi.RouteExplainRequest{Model: "m", Endpoint: "messages", Client: "c",
			Body: json.RawMessage(`{}`), Headers: map[string]string{"X-Session": "s"}})
		n, q, raw := x.received()
		if n != 1 || q.V != bus.ExplainVersion || q.Model != "gpt-4o" || q.Endpoint != "messages" || q.Client != "app" ||
			q.Headers["X-Switchyard-Region"] != "eu" || q.Headers["X-Session"] != "s-1" || len(q.Headers) != 2 {
			t.Fatalf("the proxy got %d requests, the last %s", n, raw)
		}
		var body map[string]any
		if err := json.Unmarshal(q.Body, &body); err != nil || body["model"] != "gpt-4o" || !strings.Contains(string(q.Body), secret) {
			t.Fatalf("the proxy got body %s (%v)", q.Body, err)
		}
	})

	t.Run("model from the body", func(t *testing.T) {
		r := e.do("POST", "/admin/route/explain", readToken, `{"body":{"model":"gpt-4o","messages":[]}}`)
		r.expect(t, 200, "")
		_, q, raw := x.received()
		if q.Model != "gpt-4o" || q.Endpoint != "" || q.Client != "" || q.Headers != nil {
			t.Fatalf("the proxy got %s", raw)
		}
	})

	t.Run("operator token", func(t *testing.T) {
		e.do("POST", "/admin/route/explain", opToken, `{"model":"gpt-4o"}`).expect(t, 200, "")
	})

	t.Run("proxy errors relayed", func(t *testing.T) {
		for _, tt := range []struct {
			body   string
			status int
			code   string
			msg    string
		}{
			{`{"model":"nope"}`, 404, "model_not_found", "the model `nope` does not exist on this gateway"},
			{`{"model":"gpt-4o","client":"ghost"}`, 404, "client_not_found", `no client key with id "ghost"`},
			{`{"model":"garbage"}`, 502, codeBadGateway, ""},
			{`{"model":"future"}`, 502, codeBadGateway, "proxy proxy-next answered version 2, want 1"},
		} {
			r := e.do("POST", "/admin/route/explain", readToken, tt.body)
			r.expect(t, tt.status, tt.code)
			if msg := r.body["error"].(map[string]any)["message"]; tt.msg != "" && msg != tt.msg {
				t.Errorf("%s: message %q, want %q", tt.body, msg, tt.msg)
			}
			if tt.status == 404 && r.body["instance"] != "proxy-standin" {
				t.Errorf("%s: instance %v", tt.body, r.body["instance"])
			}
		}
	})

	t.Run("no answer in time", func(t *testing.T) {
		start := time.Now()
		r := e.do("POST", "/admin/route/explain", readToken, `{"model":"silent"}`)
		r.expect(t, 503, codeNoProxy)
		if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "timeout") || !strings.Contains(msg, "300ms") {
			t.Errorf("timeout: message %q", msg)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Errorf("answered after %s, before the timeout", d)
		}
	})

	t.Run("bad input sends nothing", func(t *testing.T) {
		before, _, _ := x.received()
		for _, tt := range []struct{ name, body, msg string }{
			{"empty", "", "empty body"},
			{"malformed", `{"model":`, "body:"},
			{"not an object", `["gpt-4o"]`, "body:"},
			{"trailing data", `{"model":"gpt-4o"} {}`, "trailing data"},
			{"unknown field", `{"modle":"gpt-4o"}`, "unknown field"},
			{"duplicate key", `{"model":"gpt-4o","model":"local/llama"}`, "more than once"},
			{"a field in another case", `{"Model":"gpt-4o"}`, "more than once"},
			{"trailing bracket", `{"model":"gpt-4o"}]`, "trailing data"},
			{"no model", `{"client":"app"}`, "model must be set"},
			{"empty model", `{"model":"","body":{"messages":[]}}`, "model must be set"},
			{"body model not a string", `{"body":{"model":4}}`, "model must be set"},
			{"body an array", `{"model":"gpt-4o","body":[1]}`, "body must be a JSON object"},
			{"body a string", `{"model":"gpt-4o","body":"{}"}`, "body must be a JSON object"},
			{"header not a string", `{"model":"gpt-4o","headers":{"X-Session":1}}`, "body:"},
		} {
			r := e.do("POST", "/admin/route/explain", readToken, tt.body)
			r.expect(t, 400, codeBadRequest)
			if msg, _ := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, tt.msg) {
				t.Errorf("%s: message %q, want %q", tt.name, msg, tt.msg)
			}
		}
		// NATS keeps the admin connection's order: a request sent now
		// reaches the stand-in after any the bad ones had sent
		e.do("POST", "/admin/route/explain", readToken, `{"model":"gpt-4o","body":null}`).expect(t, 200, "")
		if after, q, _ := x.received(); after != before+1 || q.Body != nil {
			t.Fatalf("the proxy got %d requests for 1 valid one (last body %s)", after-before, q.Body)
		}
	})

	t.Run("auth", func(t *testing.T) {
		before, _, _ := x.received()
		e.do("POST", "/admin/route/explain", "", `{"model":"gpt-4o"}`).expect(t, 401, codeUnauthorized)
		e.do("POST", "/admin/route/explain", clientKey, `{"model":"gpt-4o"}`).expect(t, 401, codeUnauthorized)
		e.do("GET", "/admin/route/explain", readToken, nil).expect(t, 404, codeNotFound)
		e.do("POST", "/admin/route/explain", readToken, `{"model":"gpt-4o"}`).expect(t, 200, "")
		if after, _, _ := x.received(); after != before+1 {
			t.Fatalf("the proxy got %d requests for 1 authenticated one", after-before)
		}
	})

	if strings.Contains(logs.String(), secret) {
		t.Fatalf("the request body was logged:\n%s", logs.String())
	}
}

// TestRouteExplainWithoutNATS: an admin service without a NATS connection
// answers 503 nats_unavailable (after validating the input).
func TestRouteExplainWithoutNATS(t *testing.T) {
	cfg := loadConfig(t, "nats://127.0.0.1:1", true)
	svc, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	app := svc.newApp()
	for _, tt := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"model":"gpt-4o"}`, 503, codeNATSUnavailable},
		{`{}`, 400, codeBadRequest},
	} {
		req := httptest.NewRequest("POST", "/admin/route/explain", strings.NewReader(tt.body))
		req.Header.Set("Authorization", "Bearer "+readToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		var body map[string]any
		_ = json.Unmarshal(b.Bytes(), &body)
		reply{status: resp.StatusCode, body: body, raw: b.Bytes()}.expect(t, tt.status, tt.code)
	}
}
