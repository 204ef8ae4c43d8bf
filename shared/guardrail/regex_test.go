package guardrail

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"testing"
)

// diffRegexes are entries of every kind the regex set runs: seeded, with a
// literal, bare and combined; with assertions, case folding and UTF-8.
var diffRegexes = []string{
	`\d{3}-\d{2}-\d{4}`,
	`\b[A-Z]{2}\d{2}\b`,
	`(?i)\bab+c\b`,
	`^x\d`,
	`(?m)^Q\d$`,
	`\d$`,
	`Zé[a-c]{1,3}`,
	`(?i)k\d`,
	`X(?:a|bb|ccc)Y`,
	`\Bq\d\B`,
	`[a-c]+\d`,
	`(?:9|98)7`,
	`\w+@\w+`,
	`(?i)xy\s*z`,
	`zq[0-9]+`,
	`[ -~][0-4]`, // seeded, and common enough in these texts to fall back to a search
}

func randomText(r *rand.Rand, n int) []byte {
	const alphabet = "abcqxyzXYZQKkK -\n0123456789é@_"
	runes := []rune(alphabet + "\u212a")
	var b []byte
	for len(b) < n {
		b = append(b, string(runes[r.IntN(len(runes))])...)
	}
	return b
}

// Every entry, however it is run, finds what regexp.FindAllIndex finds.
func TestRegexMatchesFindAll(t *testing.T) {
	var defs []Def
	res := make([]*regexp.Regexp, len(diffRegexes))
	for i, src := range diffRegexes {
		defs = append(defs, Def{Name: src, Regex: []string{src}})
		res[i] = regexp.MustCompile(src)
	}
	m := mustCompile(t, defs...)
	seeded := 0
	for _, r := range m.regex.alone {
		if r.seed != nil {
			seeded++
		}
	}
	if seeded < 5 || m.regex.combo == nil {
		t.Fatalf("%d seeded entries, combo %v: the test does not cover each way", seeded, m.regex.combo)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		text := randomText(r, 1+r.IntN(80))
		compareFindAll(t, m, res, text)
	}
}

func compareFindAll(t *testing.T, m *Matcher, res []*regexp.Regexp, text []byte) {
	t.Helper()
	got := m.Scan(text, nil)
	for g, re := range res {
		var want, have [][2]int
		for _, loc := range re.FindAllIndex(text, -1) {
			want = append(want, [2]int{loc[0], loc[1]})
		}
		for _, x := range got {
			if x.Guardrail == g {
				have = append(have, [2]int{x.Start, x.End})
			}
		}
		if !slices.Equal(have, want) {
			t.Fatalf("%s in %q: got %v, FindAllIndex %v", re, text, have, want)
		}
	}
	if m.Any(text) != (len(got) > 0) {
		t.Fatalf("Any(%q) = %v with %d matches", text, !(len(got) > 0), len(got))
	}
}

func FuzzRegexMatchesFindAll(f *testing.F) {
	var defs []Def
	res := make([]*regexp.Regexp, len(diffRegexes))
	for i, src := range diffRegexes {
		defs = append(defs, Def{Name: src, Regex: []string{src}})
		res[i] = regexp.MustCompile(src)
	}
	m := mustCompile(f, defs...)
	f.Add([]byte("x1 Q2\nQ3 abbc 123-45-6789 Zéab K9 XbbY aq1b 98 987 a@b"))
	f.Fuzz(func(t *testing.T, text []byte) {
		compareFindAll(t, m, res, text)
	})
}

func TestSeedSelection(t *testing.T) {
	tests := []struct {
		src    string
		seeded bool
	}{
		{`\d{3}-\d{2}-\d{4}`, true},
		{`\bACME-\d{6}\b`, true},
		{`[A-Z]{3}\d{4}X`, true},
		{`\w{3}\d`, true},           // rare enough: a digit after three word characters
		{`\w\w`, false},             // starts with what most text is
		{`[a-z ]{3}`, false},        // likewise
		{`[a-z]+@corp\.com`, false}, // unbounded
		{`(?i)the\s+plan`, false},   // unbounded
	}
	for _, tt := range tests {
		m := mustCompile(t, Def{Name: "g", Regex: []string{tt.src}})
		var r *userRegex
		if len(m.regex.alone) > 0 {
			r = m.regex.alone[0]
		} else {
			r = m.regex.bare[0]
		}
		if (r.seed != nil) != tt.seeded {
			t.Errorf("%s: seeded %v, want %v (rate %g)", tt.src, r.seed != nil, tt.seeded, seedRate(r.seed))
		}
	}
}
