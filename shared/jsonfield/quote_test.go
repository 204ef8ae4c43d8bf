package jsonfield

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestAppendUnquoted(t *testing.T) {
	for _, raw := range []string{`""`, `"plain"`, `"a\nb\tc\"d\\e\/f"`, `"\u00e9t\u00E9"`, `"\ud83d\ude00 smile"`,
		`"lone \ud800 surrogate"`, `"\b\f\r"`, `"caf√©"`} {
		got, ok := AppendUnquoted(nil, []byte(raw))
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil || !ok || string(got) != want {
			t.Errorf("%s: got %q, %v; want %q (%v)", raw, got, ok, want, err)
		}
	}
	for _, bad := range []string{``, `"`, `abc`, `"\x"`, `"\u12"`, `"end\"`} {
		if _, ok := AppendUnquoted(nil, []byte(bad)); ok {
			t.Errorf("%s: read as a string", bad)
		}
	}
	dst := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { dst, _ = AppendUnquoted(dst[:0], []byte(`"a\nb \u00e9"`)) }); n != 0 {
		t.Errorf("%v allocations into a large enough buffer", n)
	}
}

func TestAppendQuoted(t *testing.T) {
	for _, s := range []string{"", "plain", "a\nb\tc\"d\\e", "\x00\x1f ctl", "été 😀", "</script>"} {
		q := AppendQuoted(nil, []byte(s))
		var back string
		if err := json.Unmarshal(q, &back); err != nil || back != s {
			t.Errorf("%q: quoted %s reads back %q (%v)", s, q, back, err)
		}
	}
}

func FuzzQuoteRoundTrip(f *testing.F) {
	f.Add([]byte("a\nb\"c"))
	f.Fuzz(func(t *testing.T, s []byte) {
		if !utf8.Valid(s) {
			return
		}
		back, ok := AppendUnquoted(nil, AppendQuoted(nil, s))
		if !ok || string(back) != string(s) {
			t.Fatalf("%q: round trip %q, %v", s, back, ok)
		}
	})
}
