package main

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/debug"
)

// testBundle tried two targets: a rate limit on openai (rotate after a
// backoff), then an overloaded anthropic, returned to the caller.
func testBundle(id string, at time.Time) debug.Bundle {
	cost := 0.0
	return debug.Bundle{V: debug.SchemaVersion, RequestID: id, At: at, Instance: "proxy-a", Endpoint: "/v1/chat/completions", Stream: true,
		Client: "app", Plan: "pro", ClientType: "sdk", Access: "allowed", Limits: &debug.LimitDecision{Decision: "admitted"},
		Policy: &debug.Policy{Plan: "pro", Rules: []debug.PolicyRule{{Rule: "requests_per_minute", Limit: 60, Verdict: "passed"}},
			Guardrails: []debug.PolicyGuardrail{{Guardrail: "no-cards", Action: "redact", From: "route"}}},
		Guardrails: []debug.GuardrailDecision{{Guardrail: "no-cards", Stage: "input", Action: "redact", Verdict: "redact", Check: "card_number"},
			{Guardrail: "no-word", Stage: "output", Action: "block", Verdict: "pass"}},
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
			{N: 2, Provider: "anthropic", Model: "claude-x", KeyID: "b1", StartMS: 175, DurationMS: 1300, Status: 529,
				Class: "transient", Error: &debug.ProviderError{Type: "overloaded_error", Message: "Overloaded"},
				Action: "return", Soft: true, Probe: true},
		},
		Request: debug.DigestOf([]byte(`{"model":"smart"}`)),
		Status:  529, Outcome: debug.OutcomeFailed, ErrorCode: "upstream_error", Class: "transient", LatencyMS: 1480.5,
		Provider: "anthropic", ServedModel: "claude-x", KeyID: "b1", Tokens: &debug.Tokens{Input: 12}, CostUSD: &cost, Sampled: "failure"}
}

func TestPrintBundle(t *testing.T) {
	b := testBundle("req-1", time.Date(2026, 5, 1, 10, 0, 0, 123e6, time.UTC))
	var out strings.Builder
	if err := printBundle(&out, &b); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"request  req-1\n" +
		"at       2026-05-01 10:00:00.123Z  instance proxy-a  /v1/chat/completions  (stream)\n" +
		"model    smart → chain:smart (chain, priority)  needs tools\n" +
		"client   app plan pro type sdk  access allowed  limits admitted\n" +
		"policy   plan pro: requests_per_minute 60 passed  no-cards:redact from route\n" +
		"guards   no-cards redact (input, card_number)  no-word pass (output)\n" +
		"result   529 failed  error upstream_error  class transient  latency 1.48s  stream not completed\n" +
		"served   anthropic/claude-x  key b1\n" +
		"usage    tokens in 12 out 0  cost $0.000000\n" +
		"kept     failure\n" +
		"\nroute steps\n" +
		"  STEP  TARGET              TRIED  REASON     HELD KEYS\n" +
		"  1     openai/gpt-4o       #1     -          secondary (hold h-42, quota_exhausted)\n" +
		"  2     anthropic/claude-x  #2     -          -\n" +
		"  3     local/llama         -      unhealthy  -\n" +
		"\nattempts\n" +
		"  #  START   DURATION  TARGET              KEY                STATUS  CLASS       ERROR                ACTION               FLAGS\n" +
		"  1  +2.0ms  120ms     openai/gpt-4o       primary (fp fp01)  429     rate_limit  rate_limit_exceeded  rotate, waited 50ms  headers 118ms\n" +
		"  2  +175ms  1.30s     anthropic/claude-x  b1                 529     transient   overloaded_error     return               probe,soft\n" +
		"  #1 requests/rate_limit_exceeded: Rate limit reached for ****\n" +
		"  #2 overloaded_error: Overloaded\n"
	if out.String() != want {
		t.Errorf("timeline:\n%s\nwant:\n%s", out.String(), want)
	}
	// The request's trace, the caller's or the gateway's own.
	for _, c := range []struct{ parent, want string }{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "trace    4bf92f3577b34da6a3ce929d0e0e4736  (the caller's, under its span 00f067aa0ba902b7)\n"},
		{"", "trace    4bf92f3577b34da6a3ce929d0e0e4736  (started by the gateway)\n"},
	} {
		b.TraceID, b.TraceParent = "4bf92f3577b34da6a3ce929d0e0e4736", c.parent
		out.Reset()
		if err := printBundle(&out, &b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "(stream)\n"+c.want+"model") {
			t.Errorf("trace line: want %q after the at line, got:\n%s", c.want, out.String())
		}
	}

	// a request refused before any attempt
	r := debug.Bundle{RequestID: "r", Access: "model_not_allowed", Model: "m", Status: 403, Outcome: debug.OutcomeRejected,
		ErrorCode: "model_not_allowed", LatencyMS: 0.4, Sampled: "failure", Attempts: []debug.Attempt{}}
	out.Reset()
	if err := printBundle(&out, &r); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "result   403 rejected  error model_not_allowed  latency 0.4ms\n") ||
		!strings.HasSuffix(s, "attempts\n  none (no upstream was tried)\n") || strings.Contains(s, "route steps") {
		t.Errorf("refused request:\n%s", s)
	}
}

// TestDebugVerb runs swctl debug against a real admin service reading
// bundles written to SWITCHYARD_DEBUG.
func TestDebugVerb(t *testing.T) {
	f := startFleet(t)
	t.Setenv(envAdminURL, f.adminURL)
	t.Setenv(envAdminToken, "ro-secret") // the read role suffices

	js, err := jetstream.New(f.pnc)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	odd := "req/2 odd.id"
	ok := debug.Bundle{V: 1, RequestID: odd, At: now, Instance: "proxy-b", Endpoint: "/v1/messages", Access: "allowed", Model: "gpt-4o",
		Attempts: []debug.Attempt{{N: 1, Provider: "openai", Model: "gpt-4o", KeyID: "primary", DurationMS: 80, Status: 200, Action: "served"}},
		Status:   200, Outcome: debug.OutcomeOK, LatencyMS: 81, Provider: "openai", Sampled: "forced"}
	for _, b := range []debug.Bundle{testBundle("req-1", now.Add(-time.Second)), ok} {
		data, _ := json.Marshal(b)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.Publish(ctx, debug.Subject(b.Outcome, b.Provider, b.RequestID), data)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	out, _, err := swctl("debug", "req-1")
	if err != nil || !strings.HasPrefix(out, "request  req-1\n") || !strings.Contains(out, "  1  +2.0ms  120ms") ||
		!strings.Contains(out, "rotate, waited 50ms") || !strings.Contains(out, "  2  +175ms  1.30s") {
		t.Fatalf("debug req-1: %v\n%s", err, out)
	}
	out, _, err = swctl("debug", odd, "--json")
	var got debug.Bundle
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || !reflect.DeepEqual(got, ok) {
		t.Fatalf("debug --json: %v\n%s", err, out)
	}
	if out, _, err = swctl("debug", "get", odd); err != nil || !strings.HasPrefix(out, "request  "+odd+"\n") {
		t.Fatalf("debug get: %v\n%s", err, out)
	}

	out, _, err = swctl("debug", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[0], "AT") ||
		!strings.Contains(lines[1], odd+"  ok ") || !strings.Contains(lines[2], "req-1") || !strings.Contains(lines[2], "upstream_error") {
		t.Fatalf("debug list: %v\n%s", err, out)
	}
	out, _, err = swctl("debug", "list", "--outcome", "failed", "--since", "15m", "--limit", "5")
	if lines = strings.Split(strings.TrimSpace(out), "\n"); err != nil || len(lines) != 2 || !strings.Contains(lines[1], "req-1") {
		t.Fatalf("debug list --outcome failed: %v\n%s", err, out)
	}
	out, _, err = swctl("debug", "list", "--provider", "openai", "--json")
	var l struct {
		Requests []debug.Summary `json:"requests"`
	}
	if err != nil || json.Unmarshal([]byte(out), &l) != nil || len(l.Requests) != 1 || l.Requests[0].RequestID != odd {
		t.Fatalf("debug list --json: %v\n%s", err, out)
	}
	if out, _, err = swctl("debug", "list", "--outcome", "rejected"); err != nil || !strings.HasPrefix(out, "no debug bundles since ") {
		t.Fatalf("empty list: %v %q", err, out)
	}

	// errors: the API's message, and a non-nil error (exit 1)
	if _, _, err := swctl("debug", "req-404"); err == nil || !strings.Contains(err.Error(), "404 not_found") || !strings.Contains(err.Error(), "debug.retention") {
		t.Fatalf("unknown id: %v", err)
	}
	if _, _, err := swctl("debug", "list", "--outcome", "broken"); err == nil || !strings.Contains(err.Error(), "400 bad_request: outcome: unknown outcome") {
		t.Fatalf("bad outcome: %v", err)
	}
	if _, _, err := swctl("debug", "list", "--since", "yesterday"); err == nil || !strings.Contains(err.Error(), "400 bad_request: since:") {
		t.Fatalf("bad since: %v", err)
	}
	if _, _, err := swctl("debug"); err == nil || !strings.Contains(err.Error(), "want a request id") {
		t.Fatalf("no id: %v", err)
	}
	if _, _, err := swctl("debug", "a", "b"); err == nil || !strings.Contains(err.Error(), `unexpected argument "b"`) {
		t.Fatalf("two ids: %v", err)
	}
	t.Setenv(envAdminToken, "")
	if _, _, err := swctl("debug", "req-1"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("no token: %v", err)
	}
}
