package guardrail

import (
	"bytes"
	"testing"
)

// benchDefs are 10 patterns across built-ins, regexes and deny entries.
var benchDefs = []Def{
	{Name: "pii", Builtins: []string{"email", "phone", "card_number", "iban"}},
	{Name: "secrets", Builtins: []string{"provider_key", "jwt"}},
	{Name: "codes", Regex: []string{`\bACME-\d{6}\b`, `(?i)project\s+falcon`}},
	{Name: "words", Deny: []string{"internal only", "codename bluebird"}},
}

// benchBody is 4 KB of a chat request: JSON with prose, numbers, ids and
// model names; with one card number when match.
func benchBody(match bool) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-4o-mini-2024-07-18","max_tokens":1024,"temperature":0.7,"messages":[`)
	para := `{"role":"user","content":"Summarise the quarterly report for order 1700000000 (ref ORD-2024-123456, ` +
		`build 10.0.19041.1, host 192.168.10.20). Revenue rose 12.5% to 1 234 567 EUR on 2024-01-15 10:30:00; ` +
		`the team at acme_corp used sk-learn style notebooks and @mentions in the wiki."},`
	for b.Len() < 4096-200 {
		b.WriteString(para)
	}
	if match {
		b.WriteString(`{"role":"user","content":"charge 4111 1111 1111 1111"},`)
	}
	for b.Len() < 4096-2 {
		b.WriteByte(' ')
	}
	b.WriteString("]}")
	return b.Bytes()[:4096]
}

func BenchmarkScan(b *testing.B) {
	m := mustCompile(b, benchDefs...)
	for _, bc := range []struct {
		name  string
		match bool
	}{{"no_match", false}, {"one_match", true}} {
		body := benchBody(bc.match)
		dst := make([]Match, 0, 16)
		if got := len(m.Scan(body, dst)); got != map[bool]int{false: 0, true: 1}[bc.match] {
			b.Fatalf("%s: %d matches", bc.name, got)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				dst = m.Scan(body, dst[:0])
			}
		})
	}
}

func BenchmarkAny(b *testing.B) {
	m := mustCompile(b, benchDefs...)
	body := benchBody(false)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if m.Any(body) {
			b.Fatal("match")
		}
	}
}

func BenchmarkRedact(b *testing.B) {
	m := mustCompile(b, benchDefs...)
	body := benchBody(true)
	out := make([]byte, 0, 8192)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		out = m.Redact(out[:0], body, nil)
	}
}

func BenchmarkWindow(b *testing.B) {
	m := mustCompile(b, benchDefs...)
	body := benchBody(true)
	w := m.NewWindow()
	dst := make([]Match, 0, 16)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		w.Reset()
		for i := 0; i < len(body); i += 16 {
			_, dst = w.Feed(body[i:min(i+16, len(body))], dst[:0])
		}
		_, dst = w.Flush(dst[:0])
	}
}

// BenchmarkScanHostile runs 64 KB bodies made to be slow: each repeats what
// starts a candidate of some built-in or entry. Cost stays linear.
func BenchmarkScanHostile(b *testing.B) {
	m := mustCompile(b, fuzzDefs...)
	for _, unit := range []string{"a@", "eyJhbGciOiJIUzI1NiJ9.", "sk-", "aaaa-", "1-", "+1 ", "DE89", "she ", "123-45-", "zz"} {
		body := bytes.Repeat([]byte(unit), 65536/len(unit))
		dst := make([]Match, 0, 32768)
		b.Run(unit, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				dst = m.Scan(body, dst[:0])
			}
		})
	}
}

// BenchmarkPattern runs Any with one pattern at a time over the no-match
// body, so each built-in's and each kind of entry's share shows.
func BenchmarkPattern(b *testing.B) {
	body := benchBody(false)
	for _, bc := range []struct {
		name string
		def  Def
	}{
		{"email", Def{Builtins: []string{"email"}}},
		{"phone", Def{Builtins: []string{"phone"}}},
		{"card_number", Def{Builtins: []string{"card_number"}}},
		{"iban", Def{Builtins: []string{"iban"}}},
		{"provider_key", Def{Builtins: []string{"provider_key"}}},
		{"jwt", Def{Builtins: []string{"jwt"}}},
		{"deny", Def{Deny: benchDefs[3].Deny}},
		{"regex_literal", Def{Regex: benchDefs[2].Regex}},
		{"regex_seeded", Def{Regex: []string{`\d{3}-\d{2}-\d{4}`}}},
		{"regex_search", Def{Regex: []string{`\w+@\w+`, `[a-z]+\d+[a-z]+`}}},
	} {
		m := mustCompile(b, bc.def)
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if m.Any(body) {
					b.Fatal("match")
				}
			}
		})
	}
}
