package guardrail

import "testing"

// Nothing is allocated when nothing matches: Any, Scan into a
// preallocated dst and Redact, on a 4 KB body with 10 patterns.
func TestNoMatchAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race sync.Pool drops items, so regexp allocates")
	}
	m := mustCompile(t, benchDefs...)
	body := benchBody(false)
	dst := make([]Match, 0, 16)
	out := make([]byte, 0, 2*len(body))
	tests := []struct {
		name string
		f    func()
	}{
		{"Any", func() {
			if m.Any(body) {
				t.Fatal("match")
			}
		}},
		{"Scan", func() { dst = m.Scan(body, dst[:0]) }},
		{"Redact", func() { out = m.Redact(out[:0], body, nil) }},
	}
	for _, tt := range tests {
		if n := testing.AllocsPerRun(100, tt.f); n != 0 {
			t.Errorf("%s: %v allocations", tt.name, n)
		}
	}
	if len(dst) != 0 {
		t.Fatalf("matches in the no-match body: %+v", dst)
	}
}

// Built-in and deny matches are allocation-free given room in dst; so is
// a window once its buffer has grown. (No regexp here: this holds under
// -race too.)
func TestMatchAllocatesNothing(t *testing.T) {
	m := mustCompile(t,
		Def{Name: "pii", Builtins: []string{"email", "phone", "card_number", "iban", "jwt"}},
		Def{Name: "words", Deny: []string{"internal only", "codename"}})
	body := []byte("mail a@b.io, call +1 415 555 2671, pay 4111 1111 1111 1111 to DE89370400440532013000; " +
		testJWT + " internal only")
	dst := make([]Match, 0, 16)
	if n := testing.AllocsPerRun(100, func() { dst = m.Scan(body, dst[:0]) }); n != 0 || len(dst) != 6 {
		t.Errorf("Scan: %v allocations, %d matches", n, len(dst))
	}
	w := m.NewWindow()
	feed := func() {
		w.Reset()
		for i := 0; i < len(body); i += 8 {
			_, dst = w.Feed(body[i:min(i+8, len(body))], dst[:0])
		}
		_, dst = w.Flush(dst[:0])
	}
	feed()
	if n := testing.AllocsPerRun(100, feed); n != 0 {
		t.Errorf("Window: %v allocations", n)
	}
}
