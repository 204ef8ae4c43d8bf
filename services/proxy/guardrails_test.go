package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
)

// guardedFixture is the base fixture with guardrails: demo-chat redacts
// card numbers and blocks a test word; the client key's plan caps
// messages, and the key itself turns the card redaction into a warning
// when warnCards is set.
func guardedFixture(t *testing.T, warnCards bool) *fixture {
	return newFixture(t, func(c *config.Config) {
		c.Guardrails = []config.Guardrail{
			{Name: "no-cards", Action: config.ActionRedact, Patterns: []string{"card_number"}},
			{Name: "no-test-word", Deny: []string{"SWITCHYARD-BLOCK-TEST"}},
			{Name: "short", Limits: config.GuardrailLimits{Messages: 3}},
			{Name: "tools", Tools: config.GuardrailTools{Allow: []string{"get_weather"}, DenyParams: []string{"logit_bias"}}},
		}
		ch := c.Chains["demo-chat"]
		ch.Guardrails = []string{"no-cards", "no-test-word"}
		c.Chains["demo-chat"] = ch
		c.Plans = map[string]config.Plan{"p": {Guardrails: []string{"short", "tools"}}}
		c.Clients[0].Plan = "p"
		if warnCards {
			c.Clients[0].Guardrails = []string{"no-cards:warn"}
		}
	})
}

const cardBody = `{"model":"demo-chat","messages":[{"role":"user","content":"pay with 4111 1111 1111 1111 today\nthanks"}]}`

// TestGuardrailRedactsBeforeUpstream: a card number in a message never
// reaches the provider (the fake's recorded body has the redaction, the
// rest of the body as sent), and the request is served.
func TestGuardrailRedactsBeforeUpstream(t *testing.T) {
	f := guardedFixture(t, false)
	status, _, body := f.call(t, "/v1/chat/completions", cardBody)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	calls := f.openai.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d upstream calls", len(calls))
	}
	up := calls[0].Body
	if bytes.Contains(up, []byte("4111")) {
		t.Fatalf("the card number went upstream: %s", up)
	}
	var sent struct {
		Model    string
		Messages []struct{ Role, Content string }
	}
	if err := json.Unmarshal(up, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.Messages[0].Content != "pay with [REDACTED:card_number] today\nthanks" || sent.Model != "demo-model" {
		t.Errorf("upstream got %+v", sent)
	}
	if m := scrape(t, f.url); !strings.Contains(m, `switchyard_guardrail_decisions_total{action="redact",guardrail="no-cards",stage="input"} 1`) ||
		!strings.Contains(m, `switchyard_guardrail_decisions_total{action="pass",guardrail="no-test-word",stage="input"} 1`) {
		t.Errorf("guardrail metrics:\n%s", grepLines(m, "guardrail"))
	}
}

// TestGuardrailBlocks: each check that blocks answers 400
// guardrail_blocked in the endpoint's format, naming the guardrail and
// what it checked but never the text, and sends nothing upstream.
func TestGuardrailBlocks(t *testing.T) {
	f := guardedFixture(t, false)
	msgs := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"role":"user","content":"m%d"}`, i)
		}
		return b.String()
	}
	cases := []struct {
		name, path, body, want string
		anthropic              bool
	}{
		{"deny word", "/v1/chat/completions", `{"model":"demo-chat","messages":[{"role":"user","content":"say switchyard-block-test now"}]}`, "`no-test-word` (deny[0])", false},
		{"deny word, Anthropic format", "/v1/messages", `{"model":"demo-chat","max_tokens":5,"system":"SWITCHYARD-BLOCK-TEST","messages":[{"role":"user","content":"hi"}]}`, "`no-test-word` (deny[0])", true},
		{"too many messages", "/v1/chat/completions", `{"model":"demo-model","messages":[` + msgs(4) + `]}`, "`short` (limits.messages)", false},
		{"a tool not allowed", "/v1/chat/completions", `{"model":"demo-model","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"rm_rf"}}]}`, "`tools` (tools.allow)", false},
		{"a denied parameter", "/v1/chat/completions", `{"model":"demo-model","messages":[{"role":"user","content":"x"}],"logit_bias":{"1":5}}`, "`tools` (tools.deny_params.logit_bias)", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(f.openai.Calls()) + len(f.anthropic.Calls())
			status, _, body := f.call(t, c.path, c.body)
			if status != 400 || errorCode(t, body) != gwerror.GuardrailBlocked || !strings.Contains(string(body), c.want) {
				t.Fatalf("%d %s, want 400 guardrail_blocked naming %s", status, body, c.want)
			}
			if c.anthropic && !strings.Contains(string(body), `"type":"error"`) {
				t.Errorf("not in Anthropic's error format: %s", body)
			}
			if strings.Contains(strings.ToLower(string(body)), "switchyard-block-test") {
				t.Errorf("the block quotes the matched text: %s", body)
			}
			if n := len(f.openai.Calls()) + len(f.anthropic.Calls()) - before; n != 0 {
				t.Errorf("%d upstream calls for a blocked request", n)
			}
		})
	}
	// within the limits, with the allowed tool: served
	if status, _, body := f.call(t, "/v1/chat/completions", `{"model":"demo-model","messages":[`+msgs(3)+`],"tools":[{"type":"function","function":{"name":"get_weather"}}]}`); status != 200 {
		t.Errorf("an allowed request: %d %s", status, body)
	}
}

// TestGuardrailMostSpecificWins: the client key's "no-cards:warn" turns the
// route's redaction into a warning: the body goes upstream unchanged.
func TestGuardrailMostSpecificWins(t *testing.T) {
	f := guardedFixture(t, true)
	if status, _, body := f.call(t, "/v1/chat/completions", cardBody); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if up := f.openai.Calls()[0].Body; !bytes.Contains(up, []byte("4111 1111 1111 1111")) {
		t.Errorf("warn redacted the body: %s", up)
	}
	if m := scrape(t, f.url); !strings.Contains(m, `switchyard_guardrail_decisions_total{action="warn",guardrail="no-cards",stage="input"} 1`) {
		t.Errorf("guardrail metrics:\n%s", grepLines(m, "guardrail"))
	}
}

// TestGuardrailBundle: the debug bundle keeps every decision, never the
// matched text.
func TestGuardrailBundle(t *testing.T) {
	ff := newFleet(t, 1, func(c *config.Config) {
		c.Guardrails = []config.Guardrail{{Name: "no-cards", Action: config.ActionRedact, Patterns: []string{"card_number"}},
			{Name: "no-test-word", Deny: []string{"SWITCHYARD-BLOCK-TEST"}}}
		ch := c.Chains["demo-chat"]
		ch.Guardrails = []string{"no-cards", "no-test-word"}
		c.Chains["demo-chat"] = ch
	})
	if st := post(t, ff.urls[0], "req-guarded", cardBody, "X-Switchyard-Debug", "true"); st != 200 {
		t.Fatalf("status %d", st)
	}
	b := bundleOf(t, debugStream(t, ff.ns.ClientURL()), "req-guarded")
	want := []debug.GuardrailDecision{{Guardrail: "no-cards", Stage: "input", Action: "redact", Verdict: "redact", Check: "card_number"},
		{Guardrail: "no-test-word", Stage: "input", Action: "block", Verdict: "pass"}}
	if len(b.Guardrails) != 2 {
		t.Fatalf("bundle guardrails %+v", b.Guardrails)
	}
	for i, d := range b.Guardrails {
		d.TookUS = 0
		if d != want[i] {
			t.Errorf("decision %d: %+v, want %+v", i, d, want[i])
		}
	}
	// the policy trace: what the route attached, from where
	if p := b.Policy; p == nil || len(p.Guardrails) != 2 || p.Guardrails[0] != (debug.PolicyGuardrail{Guardrail: "no-cards", Action: "redact", From: "route"}) ||
		p.Guardrails[1] != (debug.PolicyGuardrail{Guardrail: "no-test-word", Action: "block", From: "route"}) {
		t.Errorf("policy %+v", b.Policy)
	}
	raw, _ := json.Marshal(b)
	if bytes.Contains(raw, []byte("4111")) {
		t.Errorf("the bundle carries the card number: %s", raw)
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestPolicyTrace: a bundle's policy names the plan's rules in the order
// they were checked, with their verdicts (passed up to the refused one,
// not checked after it), and the guardrails attached with the level that
// set each one's action (the client key's warn over the route's redact).
func TestPolicyTrace(t *testing.T) {
	ff := newFleet(t, 1, func(c *config.Config) {
		c.Guardrails = []config.Guardrail{{Name: "no-cards", Action: config.ActionRedact, Patterns: []string{"card_number"}},
			{Name: "short", Limits: config.GuardrailLimits{Messages: 5}}}
		ch := c.Chains["demo-chat"]
		ch.Guardrails = []string{"no-cards"}
		c.Chains["demo-chat"] = ch
		c.Plans = map[string]config.Plan{"tiny": {RequestsPerMinute: 1, ConcurrentRequests: 5,
			Budget: config.Budget{Day: 100}, Guardrails: []string{"short"}}}
		c.Clients[0].Plan = "tiny"
		c.Clients[0].Guardrails = []string{"no-cards:warn"}
	})
	s := debugStream(t, ff.ns.ClientURL())
	for _, id := range []string{"req-admitted", "req-refused"} {
		post(t, ff.urls[0], id, cardBody, "X-Switchyard-Debug", "true")
	}
	wantGuards := []debug.PolicyGuardrail{{Guardrail: "no-cards", Action: "warn", From: "client"}, {Guardrail: "short", Action: "block", From: "plan"}}
	for id, verdicts := range map[string][]string{
		"req-admitted": {"passed", "passed", "passed"},
		"req-refused":  {"passed", "refused", "not_checked"},
	} {
		p := bundleOf(t, s, id).Policy
		if p == nil || p.Plan != "tiny" || len(p.Rules) != 3 || !reflect.DeepEqual(p.Guardrails, wantGuards) {
			t.Fatalf("%s: policy %+v", id, p)
		}
		for i, want := range []debug.PolicyRule{{Rule: "budget.day", Limit: 100}, {Rule: "requests_per_minute", Limit: 1}, {Rule: "concurrent_requests", Limit: 5}} {
			want.Verdict = verdicts[i]
			if p.Rules[i] != want {
				t.Errorf("%s: rule %d %+v, want %+v", id, i, p.Rules[i], want)
			}
		}
	}
}
