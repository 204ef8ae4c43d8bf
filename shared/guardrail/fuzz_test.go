package guardrail

import (
	"bytes"
	"slices"
	"testing"
)

// fuzzDefs hold every built-in and regex and deny entries of each kind.
var fuzzDefs = []Def{
	{Name: "pii", Builtins: []string{"email", "phone", "card_number", "iban"}},
	{Name: "secrets", Builtins: []string{"provider_key", "jwt"}},
	{Name: "codes", Regex: []string{`\bACME-\d{6}\b`, `(?i)project\s+falcon`, `\d{3}-\d{2}-\d{4}`, `zz\w+`}},
	{Name: "words", Deny: []string{"internal only", "codename", "c++", "naïve", "he", "she"}},
}

func FuzzScan(f *testing.F) {
	m := mustCompile(f, fuzzDefs...)
	for _, s := range windowSamples {
		f.Add([]byte(s), uint16(7))
	}
	f.Add([]byte("ACME-123456 project  falcon 123-45-6789 zzabc internal\nonly she said c++ naïve"), uint16(3))
	f.Add(benchBody(true)[:1024], uint16(100))
	f.Fuzz(func(t *testing.T, text []byte, chunk uint16) {
		if len(text) > 1024 {
			text = text[:1024] // longer adds cost, not cases: every hold is shorter
		}
		ms := m.Scan(text, nil)
		checkMatches(t, text, ms)
		if m.Any(text) != (len(ms) > 0) {
			t.Fatalf("Any = %v with %d matches", !(len(ms) > 0), len(ms))
		}
		red := m.Redact(nil, text, nil)
		if left := m.Scan(red, nil); len(left) > 0 {
			t.Fatalf("Redact(%q) = %q still matches %q", text, red, spans(string(red), left))
		}
		if len(ms) == 0 && !bytes.Equal(red, text) {
			t.Fatalf("Redact changed a text without matches: %q -> %q", text, red)
		}
		// A window fed in chunks of the given size releases the text and
		// finds what Scan finds (these texts hold no match longer than the
		// window's bounds).
		size := 1 + int(chunk)%512
		var chunks [][]byte
		for i := 0; i < len(text); i += size {
			chunks = append(chunks, text[i:min(i+size, len(text))])
		}
		out, wm := stream(t, m, chunks)
		if !bytes.Equal(out, text) {
			t.Fatalf("window released %q of %q", out, text)
		}
		if !slices.Equal(wm, ms) {
			t.Fatalf("chunks of %d: window found %q, Scan %q", size, spans(string(text), wm), spans(string(text), ms))
		}
	})
}

// checkMatches checks the invariants of matches in text: inside it,
// sorted by start, not overlapping within a guardrail.
func checkMatches(t *testing.T, text []byte, ms []Match) {
	t.Helper()
	lastEnd := map[int]int{}
	for i, x := range ms {
		if x.Start < 0 || x.End > len(text) || x.Start >= x.End {
			t.Fatalf("match %+v out of bounds of %d bytes", x, len(text))
		}
		if i > 0 && (ms[i-1].Start > x.Start || ms[i-1].Start == x.Start && ms[i-1].End < x.End) {
			t.Fatalf("matches out of order: %+v before %+v", ms[i-1], x)
		}
		if end, ok := lastEnd[x.Guardrail]; ok && x.Start < end {
			t.Fatalf("matches of guardrail %d overlap: %+v", x.Guardrail, ms)
		}
		lastEnd[x.Guardrail] = x.End
	}
}
