// Package redact masks credentials in text that leaves the process that
// holds them: provider error bodies relayed to callers, hold reasons in
// KV and events, log lines. Providers echo keys in their error messages
// ("Incorrect API key provided: sk-..."), so everything an upstream says is
// masked before anyone else sees it: the exact secrets the gateway holds,
// and anything shaped like a credential.
package redact

import (
	"bytes"
	"encoding/json"
	"net/url"
	"regexp"
	"strings"

	"switchyard.dev/shared/jsonfield"
)

// Mask replaces what is masked.
const Mask = "[redacted]"

// minSecret is the shortest secret masked by value: shorter ones would mask
// ordinary words (no real credential is this short).
const minSecret = 4

// prefixRE matches what looks like a credential by its form: well-known
// key prefixes followed by key material, and bearer tokens. runRE finds
// long unbroken runs of key characters, masked only when they look random
// (randomRun): identifiers such as "unsupported_country_region_territory"
// or resource paths are not secrets. Neither matches a quote or a
// backslash, so masking the inside of a JSON string keeps the JSON valid.
var (
	prefixRE = regexp.MustCompile(KeyShape + `|\bBearer\s+[^\s"\\]+`)
	runRE    = regexp.MustCompile(`[A-Za-z0-9_\-+/]{32,}={0,2}`)
)

// KeyShape is the RE2 expression (case-insensitive) of provider keys known
// by their form: a well-known prefix (sk- for OpenAI and sk-ant- for
// Anthropic, pk/rk for publishable and restricted keys, gsk_ for Groq,
// xai- for xAI, sess- for session keys) joined by - or _ to at least 8
// characters of key material, or a Google API key (AIza...). Masked keys
// ("sk-abc1****xyz9") match too. Package guardrail reuses it for its
// provider_key built-in; its prefilter assumes that every prefix is a word
// of at most 4 letters followed by - or _, or AIza.
const KeyShape = `(?i)\b(?:sk|pk|rk|gsk|xai|sess)[-_][A-Za-z0-9_\-*.]{8,}|\bAIza[A-Za-z0-9_\-]{20,}`

// randomRun reports whether a long run of key characters looks like key
// material: a piece between separators (_ - / . =) of at least 20
// characters that mixes letters and digits. Words joined by underscores,
// paths and UUIDs have short pieces; tokens, hashes and base64 have long
// ones.
func randomRun(run string) bool {
	piece, letters, digits := 0, 0, 0
	for i := 0; i <= len(run); i++ {
		if i == len(run) || strings.IndexByte("_-/.=", run[i]) >= 0 {
			if piece >= 20 && letters > 0 && digits > 0 {
				return true
			}
			piece, letters, digits = 0, 0, 0
			continue
		}
		piece++
		if c := run[i]; c >= '0' && c <= '9' {
			digits++
		} else {
			letters++
		}
	}
	return false
}

// String masks credential-shaped text in s.
func String(s string) string {
	if s == "" {
		return s
	}
	s = prefixRE.ReplaceAllString(s, Mask)
	return runRE.ReplaceAllStringFunc(s, func(run string) string {
		if randomRun(run) {
			return Mask
		}
		return run
	})
}

// Text masks the given secrets (as written and percent-encoded, see
// escapedSpellings) and credential-shaped text in b. It returns b itself when
// nothing needed masking.
func Text(b []byte, secrets ...string) []byte {
	out := b
	copied := false
	mask := func(form string) {
		if bytes.Contains(out, []byte(form)) {
			out = bytes.ReplaceAll(out, []byte(form), []byte(Mask))
			copied = true
		}
	}
	for _, s := range secrets {
		if len(s) < minSecret {
			continue
		}
		mask(s)
		for _, form := range escapedSpellings(s) {
			mask(form)
		}
	}
	if prefixRE.Match(out) || runRE.Match(out) {
		if m := String(string(out)); m != string(out) {
			return []byte(m)
		}
	}
	if !copied {
		return b
	}
	return out
}

// escapedSpellings returns the other ways s is written in what an upstream
// echoes: percent-encoded as in the query (a key sent as ?key=) or the path
// of a URL an error message quotes. Most secrets need no escaping: then
// there are none, and nothing is allocated.
func escapedSpellings(s string) []string {
	if !needsEscape(s) {
		return nil
	}
	forms := []string{url.QueryEscape(s)}
	if p := url.PathEscape(s); p != forms[0] {
		forms = append(forms, p)
	}
	// Percent-encoding's hex digits may be written in lower case.
	for _, f := range forms {
		if l := lowerEscapes(f); l != f {
			forms = append(forms, l)
		}
	}
	return forms
}

// needsEscape reports whether s has a byte a URL's query escapes (anything
// but letters, digits and -_.~).
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~') {
			return true
		}
	}
	return false
}

// lowerEscapes writes the hex digits of f's %XX escapes in lower case.
func lowerEscapes(f string) string {
	b := []byte(f)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerHex(b[i+1]), lowerHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerHex(c byte) byte {
	if 'A' <= c && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// Body masks a relayed body: inside the string literals of a JSON body
// (so it stays valid JSON with the same structure), or all of it when it
// is not JSON. It returns b itself when nothing needed masking.
func Body(b []byte, secrets ...string) []byte {
	if !jsonfield.Valid(b) {
		return Text(b, secrets...)
	}
	var out []byte // nil until something changes
	last := 0
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		end := stringEnd(b, i)
		if end < 0 {
			break
		}
		raw := b[i+1 : end]
		m := maskLiteral(raw, secrets)
		if len(m) != len(raw) || !bytes.Equal(m, raw) {
			if out == nil {
				out = make([]byte, 0, len(b))
			}
			out = append(out, b[last:i+1]...)
			out = append(out, m...)
			last = end
		}
		i = end
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// maskLiteral masks the inside of one JSON string literal (raw, without
// its quotes). A literal with escapes is decoded first, so a secret
// spelled with escapes ("key\/part", "\u0073k-...") is found, and
// re-encoded when something was masked.
func maskLiteral(raw []byte, secrets []string) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return Text(raw, secrets...)
	}
	var s string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	if err := json.Unmarshal(q, &s); err != nil {
		return Text(raw, secrets...)
	}
	m := Text([]byte(s), secrets...)
	if string(m) == s {
		return raw
	}
	enc, err := json.Marshal(string(m))
	if err != nil {
		return []byte(Mask)
	}
	return enc[1 : len(enc)-1]
}

// stringEnd returns the index of the closing quote of the JSON string
// opening at b[i], or -1.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j
		}
	}
	return -1
}
