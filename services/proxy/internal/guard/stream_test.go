package guard

import (
	"strings"
	"testing"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
)

// compileSet compiles guardrails gs over a one-provider table.
func compileSet(t *testing.T, gs ...config.Guardrail) *Set {
	t.Helper()
	cfg := config.Defaults()
	cfg.Providers = []config.Provider{{Name: "p", Type: "openai", Models: []config.Model{{Name: "m"}},
		Keys: []config.Key{{ID: "k", Value: config.NewSecret("s")}}}}
	cfg.Guardrails = gs
	table, err := route.Build(cfg, route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(cfg, table)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func clientOf(gs ...config.Guardrail) *Request {
	q := &Request{Format: ChatAnswer, Texts: &Texts{}}
	for _, g := range gs {
		q.Client = append(q.Client, g.Name)
	}
	return q
}

// relayAll feeds text to st in pieces of n bytes and flushes at the end:
// what the caller would see, and whether the stream ran to its end.
func relayAll(st *Stream, text string, n int) (string, bool) {
	var out strings.Builder
	for i := 0; i < len(text); i += n {
		rel, ok := st.Text([]byte(text[i:min(i+n, len(text))]))
		if !ok {
			return out.String(), false
		}
		out.Write(rel)
	}
	rel, ok := st.Flush()
	out.Write(rel)
	return out.String(), ok
}

// TestStreamCatchesSplitMatches: however the text is cut into deltas
// (one byte each up to all at once), a redaction comes out the same as
// on the whole text, and a blocked word ends the stream before any of it
// is relayed.
func TestStreamCatchesSplitMatches(t *testing.T) {
	cards := config.Guardrail{Name: "cards", Stage: config.StageOutput, Action: config.ActionRedact, Patterns: []string{"card_number", "email"}}
	word := config.Guardrail{Name: "word", Stage: config.StageBoth, Deny: []string{"FORBIDDEN-WORD"}}
	set := compileSet(t, cards, word)
	const text = "pay 4111 1111 1111 1111 or mail a.b@example.com, thanks"
	const want = "pay [REDACTED:card_number] or mail [REDACTED:email], thanks"
	for _, n := range []int{1, 2, 3, 7, 16, len(text)} {
		st := set.OutputStream(clientOf(cards, word), nil)
		if st == nil {
			t.Fatal("no output stream for output guardrails")
		}
		if got, ok := relayAll(st, text, n); !ok || got != want {
			t.Errorf("pieces of %d: %q %v, want %q", n, got, ok, want)
		}
		if len(st.Decisions) != 1 || st.Decisions[0].Guardrail != "cards" || st.Decisions[0].Verdict != "redact" || st.Blocked != nil {
			t.Errorf("pieces of %d: decisions %+v", n, st.Decisions)
		}
	}
	for _, n := range []int{1, 5, 100} {
		st := set.OutputStream(clientOf(cards, word), nil)
		got, ok := relayAll(st, "so the forbidden-word is out, and more after it", n)
		if ok || strings.Contains(strings.ToLower(got), "forbidden") || st.Blocked == nil || st.Blocked.Guardrail != "word" {
			t.Errorf("pieces of %d: relayed %q, ran to the end %v, blocked by %+v", n, got, ok, st.Blocked)
		}
	}
}

// TestStreamStages: input-only guardrails do not check answers (no
// checker at all when none is left), and a warning records without
// changing the text.
func TestStreamStages(t *testing.T) {
	in := config.Guardrail{Name: "in", Action: config.ActionRedact, Patterns: []string{"email"}}
	warn := config.Guardrail{Name: "warn", Stage: config.StageOutput, Action: config.ActionWarn, Patterns: []string{"email"}}
	set := compileSet(t, in, warn)
	if st := set.OutputStream(clientOf(in), nil); st != nil {
		t.Fatal("an input-only guardrail checks answers")
	}
	st := set.OutputStream(clientOf(in, warn), nil)
	if got, ok := relayAll(st, "write to a@example.com", 4); !ok || got != "write to a@example.com" {
		t.Errorf("warn changed the text: %q %v", got, ok)
	}
	if len(st.Decisions) != 1 || st.Decisions[0].Guardrail != "warn" || st.Decisions[0].Verdict != "warn" {
		t.Errorf("decisions %+v", st.Decisions)
	}
}

// TestStreamEvent: a Responses API event that repeats the text whole has
// every text redacted and the rest unchanged; one without a match is
// left as it is.
func TestStreamEvent(t *testing.T) {
	cards := config.Guardrail{Name: "cards", Stage: config.StageOutput, Action: config.ActionRedact, Patterns: []string{"card_number"}}
	set := compileSet(t, cards)
	st := set.OutputStream(clientOf(cards), nil)
	ev := `{"type":"response.output_text.done","item_id":"msg_1","output_index":0,"content_index":0,"text":"card 4111 1111 1111 1111 ok","sequence_number":7}`
	out, ok := st.Event([]byte(ev))
	if !ok || string(out) != strings.Replace(ev, "4111 1111 1111 1111", "[REDACTED:card_number]", 1) {
		t.Errorf("%s %v", out, ok)
	}
	plain := `{"type":"response.output_text.done","text":"nothing here","sequence_number":7}`
	if out, ok := st.Event([]byte(plain)); !ok || out != nil {
		t.Errorf("an event without a match was rewritten: %s %v", out, ok)
	}
}

// TestStreamAllocatesNothingWithoutMatches: once warm, a delta without a
// match costs no allocation.
func TestStreamAllocatesNothingWithoutMatches(t *testing.T) {
	cards := config.Guardrail{Name: "cards", Stage: config.StageOutput, Action: config.ActionRedact, Patterns: []string{"card_number", "email", "jwt"}}
	set := compileSet(t, cards)
	st := set.OutputStream(clientOf(cards), nil)
	delta := []byte("a delta of an ordinary answer, with numbers 12 and 345 ")
	st.Text(delta)
	if n := testing.AllocsPerRun(100, func() { st.Text(delta) }); n != 0 {
		t.Errorf("%v allocations per delta", n)
	}
}
