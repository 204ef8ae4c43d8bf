package guardrail

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

func mustCompile(t testing.TB, defs ...Def) *Matcher {
	t.Helper()
	m, err := Compile(defs)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// spans renders matches as guardrail/pattern:text for comparison.
func spans(text string, ms []Match) []string {
	var out []string
	for _, x := range ms {
		out = append(out, fmt.Sprintf("%s/%s:%s", x.Name, x.Pattern, text[x.Start:x.End]))
	}
	return out
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name string
		def  Def
		want string
	}{
		{"bad regex", Def{Name: "x", Regex: []string{`ok`, `(`}}, "guardrail \"x\": regex[1]: error parsing regexp: missing closing ): `(`"},
		{"unknown built-in", Def{Name: "x", Builtins: []string{"emial"}}, `guardrail "x": unknown built-in "emial" (known: email, phone, card_number, iban, provider_key, jwt)`},
		{"built-in twice", Def{Name: "x", Builtins: []string{"email", "email"}}, `guardrail "x": built-in "email" listed twice`},
		{"empty regex match", Def{Name: "x", Regex: []string{`a*`}}, `guardrail "x": regex[0]: can match the empty string`},
		{"empty-width regex", Def{Name: "x", Regex: []string{`\b|^`}}, `guardrail "x": regex[0]: can match the empty string`},
		{"empty deny", Def{Name: "x", Deny: []string{"ok", "  "}}, `guardrail "x": deny[1]: empty`},
		{"long deny", Def{Name: "x", Deny: []string{strings.Repeat("a", 201)}}, `guardrail "x": deny[0]: longer than 200 bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile([]Def{{Name: "fine", Builtins: []string{"email"}}, tt.def})
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Compile: %v, want %s", err, tt.want)
			}
		})
	}
}

func TestPatterns(t *testing.T) {
	m := mustCompile(t,
		Def{Name: "a", Builtins: []string{"email", "jwt"}},
		Def{Name: "b", Regex: []string{`x\d{3}`, `y+z`}, Deny: []string{"secret", "top secret"}})
	want := []Pattern{
		{Name: "email", Guardrail: 0, Reach: 256},
		{Name: "jwt", Guardrail: 0, Reach: -1},
		{Name: "regex[0]", Guardrail: 1, Reach: 1 + 3 + 4},
		{Name: "regex[1]", Guardrail: 1, Reach: -1},
		{Name: "deny[0]", Guardrail: 1, Reach: 6 + 4},
		{Name: "deny[1]", Guardrail: 1, Reach: -1},
	}
	if got := m.Patterns(); !slices.Equal(got, want) {
		t.Fatalf("Patterns() = %+v\nwant %+v", got, want)
	}
}

func TestRegexAndDeny(t *testing.T) {
	m := mustCompile(t, Def{
		Name:  "custom",
		Regex: []string{`\bACME-\d{6}\b`, `(?i)project\s+falcon`, `\d{3}-\d{2}-\d{4}`, `[A-Z]{3}\d{4}X`},
		Deny:  []string{"Internal Only", "codename", "c++", "naïve"},
	})
	tests := []struct {
		name, text string
		want       []string
	}{
		{"literal regex", "see ACME-123456, not ACME-1234567", []string{"custom/regex[0]:ACME-123456"}},
		{"case-folded regex", "PROJECT\tFalcon launch", []string{"custom/regex[1]:PROJECT\tFalcon"}},
		{"bare regexes", "ssn 123-45-6789 and ABC1234X", []string{"custom/regex[2]:123-45-6789", "custom/regex[3]:ABC1234X"}},
		{"deny case-insensitive", "this is INTERNAL ONLY.", []string{"custom/deny[0]:INTERNAL ONLY"}},
		{"deny white space run", "internal\n  only", []string{"custom/deny[0]:internal\n  only"}},
		{"deny word boundary", "codenames and xcodename and codename_x", nil},
		{"deny at the ends", "codename", []string{"custom/deny[1]:codename"}},
		{"deny punctuation edge", "I write c++code", []string{"custom/deny[2]:c++"}},
		{"deny non-ASCII", "a naïve approach, naïveté", []string{"custom/deny[3]:naïve"}},
		{"deny non-ASCII neighbour", "“codename”", []string{"custom/deny[1]:codename"}},
		{"deny letter neighbour in another script", "écodename", nil},
		{"nothing", "all clear", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := spans(tt.text, m.Scan([]byte(tt.text), nil))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Scan(%q) = %q, want %q", tt.text, got, tt.want)
			}
			if m.Any([]byte(tt.text)) != (len(tt.want) > 0) {
				t.Errorf("Any(%q) disagrees", tt.text)
			}
		})
	}
}

// A case-folded literal stops at a letter that folds outside ASCII: (?i)k
// matches the Kelvin sign, so a search for "k" must not rule it out.
func TestRegexFoldPrefilter(t *testing.T) {
	m := mustCompile(t, Def{Name: "g", Regex: []string{`(?i)kelvin`}})
	for _, text := range []string{"KELVIN", "\u212aelvin", "Kelvin"} {
		if !m.Any([]byte(text)) || len(m.Scan([]byte(text), nil)) != 1 {
			t.Errorf("(?i)kelvin missed %q", text)
		}
	}
}

func TestDenyOverlappingWords(t *testing.T) {
	m := mustCompile(t, Def{Name: "g", Deny: []string{"he", "she", "hers", "his", "she said"}})
	text := "ushers: she said his"
	got := spans(text, m.Scan([]byte(text), nil))
	want := []string{"g/deny[4]:she said", "g/deny[3]:his"}
	if !slices.Equal(got, want) {
		t.Fatalf("Scan = %q, want %q", got, want)
	}
}

// Each guardrail sees the text alone: one guardrail's longer match does
// not hide another's; within a guardrail the leftmost-longest wins.
func TestOverlaps(t *testing.T) {
	m := mustCompile(t,
		Def{Name: "warn", Regex: []string{`secret \w+`}},
		Def{Name: "block", Deny: []string{"secret", "plan"}, Regex: []string{`secret plan`}},
		Def{Name: "pii", Builtins: []string{"email"}, Deny: []string{"john"}})
	text := "the secret plan of john@example.com"
	got := spans(text, m.Scan([]byte(text), nil))
	want := []string{
		"warn/regex[0]:secret plan", "block/regex[0]:secret plan", "pii/email:john@example.com",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Scan = %q\nwant %q", got, want)
	}
	if red := string(m.Redact(nil, []byte(text), nil)); red != "the [REDACTED:warn] of [REDACTED:email]" {
		t.Fatalf("Redact = %q", red)
	}
}

func TestRedact(t *testing.T) {
	m := mustCompile(t,
		Def{Name: "pii", Builtins: []string{"email", "card_number", "phone"}},
		Def{Name: "codes", Deny: []string{"falcon"}, Regex: []string{`falcon-\d+`}})
	tests := []struct {
		name, text, want string
	}{
		{"none", "nothing to see", "nothing to see"},
		{"several", "mail a@b.com or call +1 415 555 2671, card 4111111111111111", "mail [REDACTED:email] or call [REDACTED:phone], card [REDACTED:card_number]"},
		{"adjacent guardrail overlap", "falcon-42 a@b.com", "[REDACTED:codes] [REDACTED:email]"},
		{"at both ends", "falcon", "[REDACTED:codes]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(m.Redact([]byte("> "), []byte(tt.text), nil)); got != "> "+tt.want {
				t.Errorf("Redact(%q) = %q, want %q", tt.text, got, "> "+tt.want)
			}
		})
	}
	custom := m.Redact(nil, []byte("x a@b.com y"), func(x Match) []byte { return []byte("<" + x.Pattern + ">") })
	if string(custom) != "x <email> y" {
		t.Errorf("Redact with repl = %q", custom)
	}
}

// Overlapping matches of different guardrails are replaced together.
func TestRedactUnion(t *testing.T) {
	m := mustCompile(t, Def{Name: "a", Regex: []string{`abc\w*`}}, Def{Name: "b", Regex: []string{`\w*xyz`}})
	text := "--abcdefxyzuvw--"
	if got := string(m.Redact(nil, []byte(text), nil)); got != "--[REDACTED:a]--" {
		t.Fatalf("Redact = %q", got)
	}
	m = mustCompile(t, Def{Name: "a", Regex: []string{`abcd`}}, Def{Name: "b", Regex: []string{`cdef`}})
	if got := string(m.Redact(nil, []byte("abcdefg"), nil)); got != "[REDACTED:a]g" {
		t.Fatalf("Redact = %q", got)
	}
}

// A label that would itself match falls back to one that does not.
func TestLabelFallback(t *testing.T) {
	m := mustCompile(t, Def{Name: "falcon", Deny: []string{"falcon"}}, Def{Name: "r", Deny: []string{"redacted"}})
	if got := string(m.Redact(nil, []byte("falcon and redacted"), nil)); got != " and " {
		t.Fatalf("Redact = %q", got)
	}
	m = mustCompile(t, Def{Name: "falcon", Deny: []string{"falcon"}})
	if got := string(m.Redact(nil, []byte("falcon!"), nil)); got != "[REDACTED]!" {
		t.Fatalf("Redact = %q", got)
	}
}

func TestScanAppends(t *testing.T) {
	m := mustCompile(t, Def{Name: "g", Builtins: []string{"email"}})
	pre := []Match{{Name: "kept", Start: 7}}
	got := m.Scan([]byte("b@c.io a@b.io"), pre)
	if len(got) != 3 || got[0].Name != "kept" || got[1].Start != 0 || got[2].Start != 7 {
		t.Fatalf("Scan = %+v", got)
	}
}

func TestSharedPatterns(t *testing.T) {
	m := mustCompile(t,
		Def{Name: "a", Builtins: []string{"email"}, Deny: []string{"x"}, Regex: []string{`y\d`}},
		Def{Name: "b", Builtins: []string{"email"}, Deny: []string{"X"}, Regex: []string{`y\d`}})
	text := "a@b.io x y1"
	got := spans(text, m.Scan([]byte(text), nil))
	want := []string{"a/email:a@b.io", "b/email:a@b.io", "a/deny[0]:x", "b/deny[0]:x", "a/regex[0]:y1", "b/regex[0]:y1"}
	if !slices.Equal(got, want) {
		t.Fatalf("Scan = %q\nwant %q", got, want)
	}
}

func TestConcurrentUse(t *testing.T) {
	m := mustCompile(t, benchDefs...)
	text := benchBody(true)
	want := m.Scan(text, nil)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if got := m.Scan(text, nil); !slices.Equal(got, want) {
					t.Error("concurrent Scan differs")
					return
				}
			}
		})
	}
	wg.Wait()
}
