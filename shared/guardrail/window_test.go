package guardrail

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// stream feeds text to a new window of m in the given chunks and returns
// what it released and the matches, with offsets into the whole stream. It
// fails the test when the window holds back more than its bound.
func stream(t *testing.T, m *Matcher, chunks [][]byte) ([]byte, []Match) {
	t.Helper()
	w := m.NewWindow()
	var out []byte
	var all []Match
	collect := func(rel []byte, ms []Match) {
		for _, x := range ms {
			if x.Start < 0 || x.End > len(rel) || x.Start >= x.End {
				t.Fatalf("match %+v outside the %d bytes released", x, len(rel))
			}
			x.Start, x.End = x.Start+len(out), x.End+len(out)
			all = append(all, x)
		}
		out = append(out, rel...)
	}
	bound := w.Hold()
	if m.long {
		bound = maxHold
	}
	for _, c := range chunks {
		collect(w.Feed(c, nil))
		if w.Held() > bound {
			t.Fatalf("window holds %d bytes, bound %d", w.Held(), bound)
		}
	}
	collect(w.Flush(nil))
	if w.Held() != 0 {
		t.Fatalf("Flush left %d bytes held", w.Held())
	}
	return out, all
}

func checkStream(t *testing.T, m *Matcher, text []byte, chunks [][]byte, desc string) {
	t.Helper()
	out, got := stream(t, m, chunks)
	if !bytes.Equal(out, text) {
		t.Fatalf("%s: released %q, fed %q", desc, out, text)
	}
	if want := m.Scan(text, nil); !slices.Equal(got, want) {
		t.Fatalf("%s: window found %q, Scan %q", desc, spans(string(text), got), spans(string(text), want))
	}
}

// windowSamples hold one match of each built-in, in text long enough that
// the window releases before it and after it.
var windowSamples = map[string]string{
	"email":        "mail john.doe+ai@mail.example.co.uk now",
	"phone":        "call +44 (0)20 7946 0958, or (415) 555-2671",
	"card_number":  "pay with 4111 1111 1111 1111 or 378282246310005.",
	"iban":         "to DE89 3704 0044 0532 0130 00 please",
	"provider_key": "the key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 leaked",
	"jwt":          "Bearer " + testJWT + " expired",
}

func TestWindowSplitEveryPoint(t *testing.T) {
	pad := strings.Repeat("lorem ipsum dolor sit amet. ", 12) // 336 bytes, more than any hold
	for name, sample := range windowSamples {
		t.Run(name, func(t *testing.T) {
			m := mustCompile(t, Def{Name: "g", Builtins: []string{name}})
			text := []byte(pad + sample + pad)
			if len(m.Scan(text, nil)) == 0 {
				t.Fatal("sample has no match")
			}
			for k := 0; k <= len(text); k++ {
				checkStream(t, m, text, [][]byte{text[:k], text[k:]}, "split at "+string(rune('0'+k%10)))
			}
			// Three pieces: every split of the sample's own bytes.
			lo := len(pad)
			for i := lo; i <= lo+len(sample); i++ {
				for j := i; j <= lo+len(sample); j += 3 {
					checkStream(t, m, text, [][]byte{text[:i], text[i:j], text[j:]}, "three pieces")
				}
			}
			var bytewise [][]byte
			for i := range text {
				bytewise = append(bytewise, text[i:i+1])
			}
			checkStream(t, m, text, bytewise, "byte by byte")
		})
	}
}

// All patterns together, fed in random chunks.
func TestWindowRandomChunks(t *testing.T) {
	m := mustCompile(t, append(slices.Clone(benchDefs), Def{Name: "all", Builtins: []string{"email", "phone", "card_number", "iban", "provider_key", "jwt"}})...)
	var b strings.Builder
	for _, s := range windowSamples {
		b.WriteString(s)
		b.WriteString(" — ACME-123456, Project Falcon; internal only. ")
	}
	text := []byte(b.String() + string(benchBody(true)))
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var chunks [][]byte
		for i := 0; i < len(text); {
			n := min(len(text)-i, 1+r.IntN(64))
			chunks = append(chunks, text[i:i+n])
			i += n
		}
		checkStream(t, m, text, chunks, "random chunks")
	}
}

// A JWT longer than the hold-back is held while it arrives and found.
func TestWindowLongJWT(t *testing.T) {
	m := mustCompile(t, Def{Name: "g", Builtins: []string{"jwt"}})
	long := "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6ImFiYyJ9." + strings.Repeat("eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ", 20) + "." + strings.Repeat("c2lnbmF0dXJl", 30)
	text := []byte("token: " + long + " end")
	if len(long) <= windowCap {
		t.Fatalf("JWT of %d bytes is not longer than the window", len(long))
	}
	var chunks [][]byte
	for i := 0; i < len(text); i += 7 {
		chunks = append(chunks, text[i:min(i+7, len(text))])
	}
	checkStream(t, m, text, chunks, "7-byte chunks")
	if _, ms := stream(t, m, chunks); len(ms) != 1 || ms[0].End-ms[0].Start != len(long) {
		t.Fatalf("long JWT: %+v", ms)
	}
}

// A held match is given up after maxHold bytes: the window's bound holds.
func TestWindowHoldBound(t *testing.T) {
	m := mustCompile(t, Def{Name: "g", Regex: []string{`secret\w+`}})
	text := []byte("a secret" + strings.Repeat("x", 3*maxHold) + " b")
	var chunks [][]byte
	for i := 0; i < len(text); i += 100 {
		chunks = append(chunks, text[i:min(i+100, len(text))])
	}
	out, ms := stream(t, m, chunks) // fails when more than maxHold is held
	if !bytes.Equal(out, text) || len(ms) == 0 || ms[0].Start != 2 {
		t.Fatalf("released %d of %d bytes, matches %+v", len(out), len(text), ms)
	}
}

func TestWindowHold(t *testing.T) {
	tests := []struct {
		name string
		def  Def
		hold int
	}{
		{"iban", Def{Builtins: []string{"iban"}}, maxIBANBytes + 6},
		{"card and phone", Def{Builtins: []string{"card_number", "phone"}}, maxPhoneBytes + 6},
		{"email", Def{Builtins: []string{"email"}}, 256},
		{"jwt", Def{Builtins: []string{"jwt"}}, windowCap},
		{"short regex", Def{Regex: []string{`ab\d{2}`}}, 4 + 4},
		{"deny word", Def{Deny: []string{"falcon"}}, 6 + 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustCompile(t, tt.def).NewWindow().Hold(); got != tt.hold {
				t.Fatalf("Hold() = %d, want %d", got, tt.hold)
			}
		})
	}
}

func TestWindowReset(t *testing.T) {
	m := mustCompile(t, Def{Name: "g", Builtins: []string{"email"}})
	w := m.NewWindow()
	w.Feed([]byte("half an addr@"), nil)
	w.Reset()
	rel, ms := w.Feed([]byte("example.com"), nil)
	rel2, ms2 := w.Flush(ms)
	if len(rel)+len(rel2) != len("example.com") || len(ms2) != 0 {
		t.Fatalf("after Reset: %q %q %+v", rel, rel2, ms2)
	}
}
