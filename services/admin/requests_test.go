package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/testkit"
)

// publishBundles writes debug bundles to SWITCHYARD_DEBUG as a proxy
// does (one message per bundle on debug.Subject), waiting for each to be
// stored.
func (e *env) publishBundles(bs ...debug.Bundle) {
	e.t.Helper()
	js, err := jetstream.New(e.pnc)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, b := range bs {
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := js.Publish(ctx, debug.Subject(b.Outcome, b.Provider, b.RequestID), data); err != nil {
			e.t.Fatal(err)
		}
	}
}

// failedBundle is a request that tried two targets and failed: a rate
// limit on openai (rotate, after a backoff), then a server error on
// anthropic returned to the caller.
func failedBundle(id string, at time.Time) debug.Bundle {
	cost := 0.0
	return debug.Bundle{V: debug.SchemaVersion, RequestID: id, At: at, Instance: "proxy-a", Endpoint: "/v1/chat/completions", Stream: true,
		Client: "app", Plan: "pro", ClientType: "sdk", Access: "allowed", Limits: &debug.LimitDecision{Decision: "admitted"},
		Policy: &debug.Policy{Plan: "pro", Rules: []debug.PolicyRule{{Rule: "requests_per_minute", Limit: 60, Verdict: "passed"}},
			Guardrails: []debug.PolicyGuardrail{{Guardrail: "no-cards", Action: "redact", From: "route"}}},
		Guardrails: []debug.GuardrailDecision{{Guardrail: "no-cards", Stage: "input", Action: "redact", Verdict: "redact", Check: "card_number", TookUS: 12},
			{Guardrail: "no-word", Stage: "input", Action: "block", Verdict: "pass", TookUS: 3}},
		Model: "smart",
		Route: &debug.Route{Name: "chain:smart", Kind: "chain", Strategy: "priority", Needs: []string{"tools"},
			Steps: []debug.Step{
				{Step: 1, Target: "openai/gpt-4o", Tried: 1, Held: []debug.HeldKey{{KeyID: "secondary", HoldID: "h-42", Class: "quota_exhausted"}}},
				{Step: 2, Target: "anthropic/claude-x", Tried: 2},
				{Step: 3, Target: "local/llama", Reason: "unhealthy"},
			}},
		Attempts: []debug.Attempt{
			{N: 1, Provider: "openai", Model: "gpt-4o", KeyID: "primary", Fingerprint: "fp01", StartMS: 2, DurationMS: 120, TTFTMS: 118, Status: 429,
				Class: "rate_limit", Error: &debug.ProviderError{Code: "rate_limit_exceeded", Type: "requests", Message: "Rate limit reached for ****"},
				Action: "rotate", BackoffMS: 50},
			{N: 2, Provider: "anthropic", Model: "claude-x", KeyID: "b1", Fingerprint: "fp02", StartMS: 175, DurationMS: 300, Status: 529,
				Class: "transient", Error: &debug.ProviderError{Code: "overloaded_error", Type: "overloaded_error", Message: "Overloaded"},
				Action: "return", Soft: true},
		},
		Request: debug.DigestOf([]byte(`{"model":"smart"}`)), Response: new(debug.DigestOf([]byte(`{"error":{}}`))),
		Status: 502, Outcome: debug.OutcomeFailed, ErrorCode: "upstream_error", Class: "transient", LatencyMS: 480.5,
		Provider: "anthropic", ServedModel: "claude-x", KeyID: "b1", Tokens: &debug.Tokens{Input: 12}, CostUSD: &cost, Sampled: "failure"}
}

func okBundle(id, provider string, at time.Time) debug.Bundle {
	return debug.Bundle{V: debug.SchemaVersion, RequestID: id, At: at, Instance: "proxy-b", Endpoint: "/v1/messages", Access: "allowed",
		Model: "claude-x", Route: &debug.Route{Name: provider + "/claude-x", Kind: "model", Strategy: "priority",
			Steps: []debug.Step{{Step: 1, Target: provider + "/claude-x", Tried: 1}}},
		Attempts: []debug.Attempt{{N: 1, Provider: provider, Model: "claude-x", KeyID: "b1", StartMS: 1, DurationMS: 90, Status: 200, Action: "served"}},
		Request:  debug.DigestOf([]byte("{}")), Status: 200, Outcome: debug.OutcomeOK, LatencyMS: 92, Provider: provider,
		ServedModel: "claude-x", KeyID: "b1", Tokens: &debug.Tokens{Input: 10, Output: 3}, Sampled: "sampled"}
}

func rejectedBundle(id string, at time.Time) debug.Bundle {
	return debug.Bundle{V: debug.SchemaVersion, RequestID: id, At: at, Instance: "proxy-a", Endpoint: "/v1/chat/completions",
		Client: "app", Access: "model_not_allowed", Model: "secret-model", Attempts: []debug.Attempt{},
		Request: debug.DigestOf([]byte("{}")), Status: 403, Outcome: debug.OutcomeRejected, ErrorCode: "model_not_allowed", LatencyMS: 0.4,
		Sampled: "failure"}
}

// TestRequestBundles reads bundles written to the stream by request id
// (ids that are no subject token too, path-escaped), lists them newest
// first with the filters, and checks the answers' errors.
func TestRequestBundles(t *testing.T) {
	e := startEnv(t, false)
	now := time.Now().UTC().Truncate(time.Millisecond)
	odd := "req/2 with.dots*and>"
	e.publishBundles(failedBundle("req-1", now.Add(-3*time.Second)))
	mid := time.Now()
	e.publishBundles(rejectedBundle(odd, now.Add(-2*time.Second)), okBundle("req-3", "anthropic", now.Add(-time.Second)))

	// one bundle, as stored
	r := e.do("GET", "/admin/requests/req-1", readToken, nil)
	r.expect(t, 200, "")
	want, _ := json.Marshal(failedBundle("req-1", now.Add(-3*time.Second)))
	var wantMap map[string]any
	_ = json.Unmarshal(want, &wantMap)
	if !reflect.DeepEqual(r.body, wantMap) {
		t.Fatalf("bundle:\n%s\nwant:\n%s", r.raw, want)
	}
	r = e.do("GET", "/admin/requests/"+url.PathEscape(odd), readToken, nil)
	r.expect(t, 200, "")
	if r.body["request_id"] != odd || r.body["error_code"] != "model_not_allowed" {
		t.Fatalf("odd id: %s", r.raw)
	}
	r = e.do("GET", "/admin/requests/req-404", readToken, nil)
	r.expect(t, 404, codeNotFound)
	if msg := r.raw2(); !strings.Contains(msg, `\"req-404\"`) || !strings.Contains(msg, "unsampled") || !strings.Contains(msg, "debug.retention (24h0m0s)") {
		t.Errorf("not found message: %s", msg)
	}
	e.do("GET", "/admin/requests/req-1", "", nil).expect(t, 401, codeUnauthorized)
	e.do("GET", "/admin/requests", "", nil).expect(t, 401, codeUnauthorized)

	// lists
	ids := func(query string) []string {
		t.Helper()
		r := e.do("GET", "/admin/requests"+query, readToken, nil)
		r.expect(t, 200, "")
		var a adminapi.RequestList
		if err := json.Unmarshal(r.raw, &a); err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, s := range a.Requests {
			out = append(out, s.RequestID)
		}
		return out
	}
	for _, tt := range []struct {
		query string
		want  []string
	}{
		{"", []string{"req-3", odd, "req-1"}},
		{"?outcome=failed", []string{"req-1"}},
		{"?status=failed", []string{"req-1"}},
		{"?outcome=all&since=15m", []string{"req-3", odd, "req-1"}},
		{"?outcome=ok&provider=anthropic", []string{"req-3"}},
		{"?outcome=failed&provider=openai", nil},
		{"?provider=_", []string{odd}},
		{"?limit=2", []string{"req-3", odd}},
		{"?since=" + url.QueryEscape(mid.Format(time.RFC3339Nano)), []string{"req-3", odd}},
		{"?since=-1h&limit=500", []string{"req-3", odd, "req-1"}},
	} {
		if got := ids(tt.query); !slices.Equal(got, tt.want) && (len(got) != 0 || len(tt.want) != 0) {
			t.Errorf("GET /admin/requests%s = %q, want %q", tt.query, got, tt.want)
		}
	}
	// a summary has the list's fields
	r = e.do("GET", "/admin/requests?outcome=failed", readToken, nil)
	r.expect(t, 200, "")
	reqs, _ := r.body["requests"].([]any)
	if len(reqs) != 1 {
		t.Fatalf("failed list: %s", r.raw)
	}
	s := reqs[0].(map[string]any)
	if s["attempts"] != 2.0 || s["status"] != 502.0 || s["error_code"] != "upstream_error" || s["provider"] != "anthropic" || r.body["limit"] != 50.0 {
		t.Errorf("summary: %s", r.raw)
	}

	for _, tt := range []struct{ query, param string }{
		{"?outcome=broken", "outcome: unknown outcome"},
		{"?status=weird", "status: unknown outcome"},
		{"?outcome=ok&status=failed", "status: is an alias of outcome"},
		{"?provider=Open.AI", "provider: bad provider name"},
		{"?provider=a>", "provider: bad provider name"},
		{"?since=yesterday", "since: want a duration"},
		{"?since=0s", "since: want a duration greater than 0"},
		{"?since=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), "since:"},
		{"?limit=0", "limit: want a whole number from 1 to 500"},
		{"?limit=501", "limit: want a whole number from 1 to 500"},
		{"?limit=ten", "limit:"},
		{"?colour=red", "colour: unknown parameter"},
	} {
		r := e.do("GET", "/admin/requests"+tt.query, readToken, nil)
		r.expect(t, 400, codeBadRequest)
		if msg := r.body["error"].(map[string]any)["message"].(string); !strings.HasPrefix(msg, tt.param) {
			t.Errorf("%s: message %q, want it to start with %q", tt.query, msg, tt.param)
		}
	}

	// NATS gone: 503 (a bad parameter is still a 400)
	stopServer(e)
	for _, path := range []string{"/admin/requests/req-1", "/admin/requests?outcome=failed"} {
		testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
			r := e.do("GET", path, readToken, nil)
			if r.status != 503 || r.errCode() != codeNATSUnavailable {
				return fmt.Errorf("%s: %d %s", path, r.status, r.raw)
			}
			return nil
		})
	}
	e.do("GET", "/admin/requests?limit=0", readToken, nil).expect(t, 400, codeBadRequest)
}

// TestParseSince reads the since forms against a fixed now.
func TestParseSince(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"15m": now.Add(-15 * time.Minute), "-2h": now.Add(-2 * time.Hour),
		"2026-05-01T11:00:00Z": now.Add(-time.Hour), "2026-05-01T11:30:00.5+00:00": now.Add(-29*time.Minute - 59500*time.Millisecond),
	} {
		got, err := parseSince(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// TestRequestSchemas: openapi.json's DebugBundle, DebugAttempt,
// DebugSummary and RequestList have the answers' fields.
func TestRequestSchemas(t *testing.T) {
	b := failedBundle("x", time.Now())
	b.Attempts[1].Probe, b.Attempts[1].StreamCompleted, b.Attempts[1].TTFTMS, b.Attempts[1].BackoffMS, b.Attempts[1].Fingerprint = true, true, 1, 1, "f"
	b.Route.Steps[0].Reason = "held"
	b.StreamCompleted, b.Cancelled, b.TTFTMS = true, true, 1
	b.Route.Region, b.Route.RegionRequired = "eu", true
	b.Limits.Code, b.Limits.Limit = "c", "l"
	b.Tokens = &debug.Tokens{Input: 1, Output: 1, CachedInput: 1, CacheWrite: 1, Reasoning: 1, Estimated: true}
	sum := debug.SummaryOf(&b)
	for schema, v := range map[string]any{
		"DebugBundle":  b,
		"DebugRoute":   b.Route,
		"DebugStep":    b.Route.Steps[0],
		"DebugAttempt": b.Attempts[1],
		"DebugSummary": sum,
		"RequestList":  adminapi.RequestList{Requests: []debug.Summary{sum}},
	} {
		checkSchema(t, schema, v)
	}
}
