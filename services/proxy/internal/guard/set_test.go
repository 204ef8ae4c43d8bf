package guard

import (
	"strings"
	"testing"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/guardrail"
)

// TestBuiltinsAgree: every built-in the configuration accepts is one the
// engine compiles.
func TestBuiltinsAgree(t *testing.T) {
	for _, b := range config.GuardrailBuiltins {
		if _, err := guardrail.Compile([]guardrail.Def{{Name: "g", Builtins: []string{b}}}); err != nil {
			t.Errorf("built-in %q: %v", b, err)
		}
	}
	if _, err := guardrail.Compile([]guardrail.Def{{Name: "g", Builtins: []string{"nope"}}}); err == nil {
		t.Error("an unknown built-in compiles")
	}
}

// TestCheckScansOnceAndBlocksUnreadText: two pattern guardrails share one
// scan (a redaction rescans for the next), and a body with more text
// values than are read is blocked even by a redacting guardrail.
func TestCheckScansOnceAndBlocksUnreadText(t *testing.T) {
	set := compileSet(t,
		config.Guardrail{Name: "cards", Action: config.ActionRedact, Patterns: []string{"card_number"}},
		config.Guardrail{Name: "mail", Action: config.ActionWarn, Patterns: []string{"email"}})
	q := &Request{Client: []string{"cards", "mail"}, Format: Embeddings, Texts: &Texts{},
		Body: []byte(`{"input":["4111 1111 1111 1111","a@example.com"]}`)}
	res := set.Check(q)
	if len(res.Decisions) != 2 || res.Decisions[0].Verdict != "redact" || res.Decisions[1].Verdict != "warn" ||
		string(res.Body) != `{"input":["[REDACTED:card_number]","a@example.com"]}` {
		t.Fatalf("decisions %+v, body %s", res.Decisions, res.Body)
	}
	var b strings.Builder
	b.WriteString(`{"input":[`)
	for i := range maxSpans + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"x"`)
	}
	b.WriteString(`]}`)
	q.Body = []byte(b.String())
	if res := set.Check(q); res.Blocked == nil || res.Blocked.Check != textsTooMany {
		t.Errorf("a body past the values read: %+v", res.Decisions)
	}
}
