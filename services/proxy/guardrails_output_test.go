package proxy

import (
	"encoding/json"
	"strings"
	"testing"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/shared/config"
	"switchyard.dev/tools/fakeprovider"
)

// outputFixture is the base fixture with two output-stage guardrails on
// the client key (so they apply to every model and endpoint): one
// redacts card numbers in answers, one blocks an answer carrying a test
// word.
func outputFixture(t *testing.T) *fixture {
	return newFixture(t, func(c *config.Config) {
		c.Guardrails = []config.Guardrail{
			{Name: "no-cards-out", Stage: config.StageOutput, Action: config.ActionRedact, Patterns: []string{"card_number"}},
			{Name: "no-word-out", Stage: config.StageOutput, Deny: []string{"SWITCHYARD-BLOCK-TEST"}},
		}
		c.Clients[0].Guardrails = []string{"no-cards-out", "no-word-out"}
	})
}

// A card number split over three deltas, and a test word over two.
var (
	cardChunks  = []string{"card 4111 11", "11 1111 11", "11 done"}
	cardAnswer  = "card [REDACTED:card_number] done"
	blockChunks = []string{"a switchyard-", "BLOCK-test b", " and more", " and more"}
)

// endpointCase is one endpoint a guarded answer comes back through.
type endpointCase struct {
	name, path, body string
	// text is an answer's text (non-stream), delta the text of one
	// stream event ("" when it carries none).
	text  func(t *testing.T, body []byte) string
	delta func(ev sseEvent) string
}

var outputEndpoints = []endpointCase{
	{"chat", "/v1/chat/completions", `{"model":"demo-chat","messages":[{"role":"user","content":"hi"}]%s}`,
		func(t *testing.T, b []byte) string {
			var v struct {
				Choices []struct{ Message struct{ Content string } }
			}
			mustJSON(t, b, &v)
			return v.Choices[0].Message.Content
		},
		func(ev sseEvent) string {
			var v struct {
				Choices []struct{ Delta struct{ Content string } }
			}
			if json.Unmarshal([]byte(ev.data), &v) != nil || len(v.Choices) == 0 {
				return ""
			}
			return v.Choices[0].Delta.Content
		}},
	{"completions", "/v1/completions", `{"model":"fake-openai/demo-model","prompt":"hi"%s}`,
		func(t *testing.T, b []byte) string {
			var v struct{ Choices []struct{ Text string } }
			mustJSON(t, b, &v)
			return v.Choices[0].Text
		},
		func(ev sseEvent) string {
			var v struct{ Choices []struct{ Text string } }
			if json.Unmarshal([]byte(ev.data), &v) != nil || len(v.Choices) == 0 {
				return ""
			}
			return v.Choices[0].Text
		}},
	{"messages, translated", "/v1/messages", `{"model":"demo-chat","max_tokens":50,"messages":[{"role":"user","content":"hi"}]%s}`,
		anthropicText, anthropicDelta},
	{"messages, native", "/v1/messages", `{"model":"fake-anthropic/demo-claude","max_tokens":50,"messages":[{"role":"user","content":"hi"}]%s}`,
		anthropicText, anthropicDelta},
	{"responses", "/v1/responses", `{"model":"demo-chat","input":"hi"%s}`,
		func(t *testing.T, b []byte) string {
			var v struct {
				Output []struct {
					Content []struct{ Text string }
				}
			}
			mustJSON(t, b, &v)
			var s strings.Builder
			for _, o := range v.Output {
				for _, c := range o.Content {
					s.WriteString(c.Text)
				}
			}
			return s.String()
		},
		func(ev sseEvent) string {
			var v struct{ Type, Delta string }
			if json.Unmarshal([]byte(ev.data), &v) != nil || v.Type != "response.output_text.delta" {
				return ""
			}
			return v.Delta
		}},
}

func anthropicText(t *testing.T, b []byte) string {
	var v struct {
		Content []struct{ Text string }
	}
	mustJSON(t, b, &v)
	var s strings.Builder
	for _, c := range v.Content {
		s.WriteString(c.Text)
	}
	return s.String()
}

func anthropicDelta(ev sseEvent) string {
	var v struct {
		Type  string
		Delta struct{ Text string }
	}
	if ev.name != "content_block_delta" || json.Unmarshal([]byte(ev.data), &v) != nil {
		return ""
	}
	return v.Delta.Text
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

// scriptAnswer makes both fakes answer the next call with chunks.
func scriptAnswer(f *fixture, chunks []string) {
	f.openai.AddRule(fakeprovider.Rule{Text: chunks, Times: 1})
	f.anthropic.AddRule(fakeprovider.Rule{Text: chunks, Times: 1})
}

// TestGuardrailOutputRedacts: a card number in an answer is replaced
// before the caller sees it, whole and streamed, in every endpoint's
// format; in a stream the number is split over three deltas, and no
// event (the Responses API's done events included) carries its digits.
func TestGuardrailOutputRedacts(t *testing.T) {
	f := outputFixture(t)
	for _, c := range outputEndpoints {
		t.Run(c.name, func(t *testing.T) {
			scriptAnswer(f, cardChunks)
			status, _, body := f.call(t, c.path, strings.Replace(c.body, "%s", "", 1))
			if status != 200 {
				t.Fatalf("%d %s", status, body)
			}
			if got := c.text(t, body); got != cardAnswer {
				t.Errorf("answer %q, want %q", got, cardAnswer)
			}
			if strings.Contains(string(body), "4111") {
				t.Errorf("the card number reached the caller: %s", body)
			}

			scriptAnswer(f, cardChunks)
			resp, events := f.stream(t, c.path, strings.Replace(c.body, "%s", `,"stream":true`, 1))
			if resp.StatusCode != 200 {
				t.Fatalf("stream: %d", resp.StatusCode)
			}
			var text strings.Builder
			for _, ev := range events {
				text.WriteString(c.delta(ev))
				if strings.Contains(ev.data, "4111") || strings.Contains(ev.data, "11 11") {
					t.Errorf("an event carries the card number: %s %s", ev.name, ev.data)
				}
				if strings.Contains(ev.data, gwerror.GuardrailBlocked) {
					t.Errorf("an error event in a redacted stream: %s", ev.data)
				}
			}
			if text.String() != cardAnswer {
				t.Errorf("streamed text %q, want %q", text.String(), cardAnswer)
			}
		})
	}
	m := scrape(t, f.url)
	if !strings.Contains(m, `switchyard_guardrail_decisions_total{action="redact",guardrail="no-cards-out",stage="output"} 10`) {
		t.Errorf("guardrail metrics:\n%s", grepLines(m, "guardrail"))
	}
	if strings.Contains(m, `stage="input"`) {
		t.Errorf("an output-only guardrail ran on input:\n%s", grepLines(m, "guardrail"))
	}
}

// TestGuardrailOutputBlocks: an answer with the blocked word is never
// relayed: a whole answer becomes 400 guardrail_blocked, a stream ends
// with one error event in the endpoint's format, neither quoting the
// word (split over two deltas in the stream, in a different case).
func TestGuardrailOutputBlocks(t *testing.T) {
	f := outputFixture(t)
	for _, c := range outputEndpoints {
		t.Run(c.name, func(t *testing.T) {
			scriptAnswer(f, blockChunks)
			status, _, body := f.call(t, c.path, strings.Replace(c.body, "%s", "", 1))
			if status != 400 || errorCode(t, body) != gwerror.GuardrailBlocked || !strings.Contains(string(body), "`no-word-out`") {
				t.Fatalf("%d %s, want 400 guardrail_blocked naming no-word-out", status, body)
			}
			if strings.Contains(strings.ToLower(string(body)), "switchyard-") {
				t.Errorf("the block quotes the answer: %s", body)
			}

			scriptAnswer(f, blockChunks)
			resp, events := f.stream(t, c.path, strings.Replace(c.body, "%s", `,"stream":true`, 1))
			if resp.StatusCode != 200 {
				t.Fatalf("stream: %d", resp.StatusCode)
			}
			if len(events) == 0 {
				t.Fatal("no events")
			}
			errs := 0
			for _, ev := range events {
				if strings.Contains(strings.ToLower(ev.data), "switchyard-") || strings.Contains(ev.data, "and more") {
					t.Errorf("an event carries the answer past the block: %s %s", ev.name, ev.data)
				}
				if strings.Contains(ev.data, gwerror.GuardrailBlocked) {
					errs++
				}
			}
			last := events[len(events)-1]
			if errs != 1 || !strings.Contains(last.data, gwerror.GuardrailBlocked) || !strings.Contains(last.data, "no-word-out") {
				t.Errorf("%d error events, the last event %s %s; want one, last, naming the guardrail", errs, last.name, last.data)
			}
			if (c.path == "/v1/messages" || c.path == "/v1/responses") && last.name != "error" {
				t.Errorf("the error event is named %q, want error", last.name)
			}
		})
	}
	if m := scrape(t, f.url); !strings.Contains(m, `switchyard_guardrail_decisions_total{action="block",guardrail="no-word-out",stage="output"} 10`) {
		t.Errorf("guardrail metrics:\n%s", grepLines(m, "guardrail"))
	}
}
