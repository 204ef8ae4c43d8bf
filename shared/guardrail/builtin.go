package guardrail

import (
	"bytes"
	"encoding/base64"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"switchyard.dev/shared/redact"
)

// The built-ins, in the order the error for an unknown one lists them.
const (
	builtinEmail = iota
	builtinPhone
	builtinCard
	builtinIBAN
	builtinKey
	builtinJWT
	numBuiltins
)

// builtins is the catalogue of built-in patterns: name and reach (bytes
// from a match's start that deciding it may read, -1 when unbounded).
var builtins = [numBuiltins]struct {
	name  string
	reach int
}{
	builtinEmail: {"email", maxEmail + 6},
	builtinPhone: {"phone", maxPhoneBytes + 6},
	builtinCard:  {"card_number", maxCardBytes + 6},
	builtinIBAN:  {"iban", maxIBANBytes + 6},
	builtinKey:   {"provider_key", -1},
	builtinJWT:   {"jwt", -1},
}

// scanOrder runs the built-ins with the cheapest prefilters first, so Any
// returns early.
var scanOrder = [numBuiltins]int{builtinJWT, builtinEmail, builtinKey, builtinIBAN, builtinCard, builtinPhone}

func builtinID(name string) int {
	for id, b := range builtins {
		if b.name == name {
			return id
		}
	}
	return -1
}

func knownBuiltins() string {
	names := make([]string, 0, numBuiltins)
	for _, b := range builtins {
		names = append(names, b.name)
	}
	return strings.Join(names, ", ")
}

// findBuiltin returns the first match of built-in id in text at or after
// from, or -1, -1.
func findBuiltin(id int, text []byte, from int) (start, end int) {
	switch id {
	case builtinEmail:
		return findEmail(text, from)
	case builtinPhone:
		return findPhone(text, from)
	case builtinCard:
		return findCard(text, from)
	case builtinIBAN:
		return findIBAN(text, from)
	case builtinKey:
		return findKey(text, from)
	case builtinJWT:
		return findJWT(text, from)
	}
	return -1, -1
}

// Character classes shared by the built-ins.

func isDigit(c byte) bool  { return c-'0' < 10 }
func isLetter(c byte) bool { return (c|0x20)-'a' < 26 }
func isAlnum(c byte) bool  { return isDigit(c) || isLetter(c) }

// isWordRune reports whether r belongs to a word: a letter, digit, mark
// or underscore in any script.
func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return isAlnum(byte(r)) || r == '_'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

// wordBefore reports whether the rune ending at text[i] belongs to a word.
func wordBefore(text []byte, i int) bool {
	if i <= 0 {
		return false
	}
	if c := text[i-1]; c < utf8.RuneSelf {
		return isAlnum(c) || c == '_'
	}
	r, _ := utf8.DecodeLastRune(text[:i])
	return isWordRune(r)
}

// wordAfter reports whether the rune starting at text[i] belongs to a word.
func wordAfter(text []byte, i int) bool {
	if i >= len(text) {
		return false
	}
	if c := text[i]; c < utf8.RuneSelf {
		return isAlnum(c) || c == '_'
	}
	r, _ := utf8.DecodeRune(text[i:])
	return isWordRune(r)
}

// ---- email ----

const (
	maxLocal = 64  // RFC 5321's limit on the local part
	maxEmail = 250 // longer addresses are not matched (RFC 5321: 254)
)

func isLocal(c byte) bool {
	return isAlnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-'
}

func isDomain(c byte) bool { return isAlnum(c) || c == '.' || c == '-' }

func findEmail(text []byte, from int) (int, int) {
	for i := from; i < len(text); {
		j := bytes.IndexByte(text[i:], '@')
		if j < 0 {
			break
		}
		at := i + j
		if s, e := emailAt(text, from, at); s >= 0 {
			return s, e
		}
		i = at + 1
	}
	return -1, -1
}

// emailAt returns the address around the '@' at text[at], or -1, -1.
func emailAt(text []byte, from, at int) (int, int) {
	s := at
	for s > from && at-s <= maxLocal && isLocal(text[s-1]) {
		s--
	}
	if at-s > maxLocal {
		return -1, -1
	}
	for s < at && text[s] == '.' { // a sentence's dots are not the address's
		s++
	}
	if s == at || text[at-1] == '.' || bytes.Contains(text[s:at], []byte("..")) || wordBefore(text, s) {
		return -1, -1
	}
	// The domain: the longest run of whole labels, at least two, ending
	// with an alphabetic top-level label; a run longer than an address may
	// be is not one.
	maxDomain := maxEmail - (at - s) - 1
	e := at + 1
	for e < len(text) && e-at-1 <= maxDomain && isDomain(text[e]) {
		e++
	}
	if e-at-1 > maxDomain || wordAfter(text, e) {
		return -1, -1
	}
	end, labels := -1, 0
	for p := at + 1; p < e; {
		q := p
		for q < e && text[q] != '.' {
			q++
		}
		label := text[p:q]
		if !validLabel(label) || labels == 0 && retinaSuffix(label) {
			break
		}
		labels++
		if labels >= 2 && topLabel(label) {
			end = q
		}
		p = q + 1
	}
	if end < 0 {
		return -1, -1
	}
	for _, c := range text[end:e] { // only trailing punctuation may follow
		if isAlnum(c) {
			return -1, -1
		}
	}
	return s, end
}

func validLabel(l []byte) bool {
	if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for _, c := range l {
		if !isAlnum(c) && c != '-' {
			return false
		}
	}
	return true
}

// topLabel reports whether l can be a top-level domain: letters, or
// punycode (xn--...).
func topLabel(l []byte) bool {
	if len(l) < 2 {
		return false
	}
	if len(l) > 4 && (l[0]|0x20) == 'x' && (l[1]|0x20) == 'n' && l[2] == '-' && l[3] == '-' {
		return true
	}
	for _, c := range l {
		if !isLetter(c) {
			return false
		}
	}
	return true
}

// retinaSuffix reports whether a first domain label is an image density
// suffix ("icon@2x.png"): digits then x.
func retinaSuffix(l []byte) bool {
	n := len(l)
	if n < 2 || (l[n-1]|0x20) != 'x' {
		return false
	}
	for _, c := range l[:n-1] {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

// ---- provider_key ----

// keyRE is redact.KeyShape anchored: it is run at candidate starts only.
var keyRE = regexp.MustCompile(`^(?:` + redact.KeyShape + `)`)

// maxKey is the longest key reported: a longer one is reported as its
// first maxKey bytes.
const maxKey = windowCap

// findKey finds provider keys: a candidate is a word of 2 to 4 letters
// followed by - or _, or AIza (the shapes of redact.KeyShape), followed in
// its run of key characters by key material (keyMaterial), confirmed by
// keyRE.
func findKey(text []byte, from int) (int, int) {
	const marks = "-_zZ"
	var next [len(marks)]int
	for k := range next {
		next[k] = from - 1
	}
	ks := keyScan{text: text, runEnd: -1}
	for i := from; i < len(text); {
		pos := len(text)
		for k := range next {
			if next[k] < i {
				if j := bytes.IndexByte(text[i:], marks[k]); j < 0 {
					next[k] = len(text)
				} else {
					next[k] = i + j
				}
			}
			pos = min(pos, next[k])
		}
		if pos >= len(text) {
			break
		}
		start := -1
		if c := text[pos]; c == '-' || c == '_' {
			w := pos
			for w > from && pos-w <= 4 && isLetter(text[w-1]) {
				w--
			}
			if l := pos - w; l >= 2 && l <= 4 && !wordBefore(text, w) {
				start = w
			}
		} else if pos-2 >= from && pos+1 < len(text) && (text[pos-2]|0x20) == 'a' &&
			(text[pos-1]|0x20) == 'i' && (text[pos+1]|0x20) == 'a' && !wordBefore(text, pos-2) {
			start = pos - 2
		}
		if start >= 0 && ks.material(start) {
			if e := keyAt(text, start); e > 0 {
				return start, e
			}
		}
		i = pos + 1
	}
	return -1, -1
}

func isKeyChar(c byte) bool { return isB64URL(c) || c == '*' || c == '.' }

func isKeySep(c byte) bool { return c == '-' || c == '_' || c == '.' || c == '*' }

// keyScan walks the runs of key characters of a text once, so that each
// candidate learns in constant time (amortised) whether key material
// follows it: "sk-sk-sk-..." costs a pass, not a pass per candidate.
type keyScan struct {
	text       []byte
	runEnd     int // end of the run of the last candidate
	scanned    int // pieces before it are judged
	pieceStart int // the first qualifying piece at or after scanned, or runEnd
}

// material reports whether a qualifying piece (see keyMaterial) starts in
// the window a key starting at s may have.
func (k *keyScan) material(s int) bool {
	if s >= k.runEnd {
		e := s
		for e < len(k.text) && isKeyChar(k.text[e]) {
			e++
		}
		k.runEnd, k.scanned, k.pieceStart = e, s, -1
	}
	if k.pieceStart < s {
		k.pieceStart = k.runEnd
		piece, classes := 0, 0
		for i := max(k.scanned, s); i <= k.runEnd; i++ {
			if i == k.runEnd || isKeySep(k.text[i]) {
				if piece >= 16 && classes&1+classes>>1&1+classes>>2&1 >= 2 {
					k.pieceStart, k.scanned = i-piece, i
					break
				}
				piece, classes = 0, 0
				k.scanned = i
				continue
			}
			piece++
			classes |= charClass(k.text[i])
		}
	}
	return k.pieceStart < k.runEnd && k.pieceStart <= s+maxKey-16
}

// charClass is 1 for lower case, 2 for upper case, 4 for a digit.
func charClass(c byte) int {
	switch {
	case c >= 'a' && c <= 'z':
		return 1
	case c >= 'A' && c <= 'Z':
		return 2
	case isDigit(c):
		return 4
	}
	return 0
}

// keyAt returns the end of the key starting at text[start], or 0: keyRE's
// match, without a full stop after it, carrying key material.
func keyAt(text []byte, start int) int {
	loc := keyRE.FindIndex(text[start:min(len(text), start+maxKey)])
	if loc == nil {
		return 0
	}
	e := start + loc[1]
	for e > start && text[e-1] == '.' { // a sentence's full stop
		e--
	}
	if !keyMaterial(text[start:e]) {
		return 0
	}
	return e
}

// keyMaterial reports whether a key-shaped word carries key material: a
// piece between separators (- _ . *) of at least 16 characters mixing two
// of lower case, upper case and digits. "sk-learn-tutorial" and masked keys
// ("sk-abc1****xyz9", which leak nothing) do not.
func keyMaterial(k []byte) bool {
	piece, classes := 0, 0
	for i := 0; i <= len(k); i++ {
		if i == len(k) || isKeySep(k[i]) {
			if piece >= 16 && (classes&1+classes>>1&1+classes>>2&1) >= 2 {
				return true
			}
			piece, classes = 0, 0
			continue
		}
		piece++
		classes |= charClass(k[i])
	}
	return false
}

// ---- jwt ----

// maxJWTHeader is how much of a header segment is decoded to look for
// "alg"; a longer header is judged by its first maxJWTHeader characters.
const maxJWTHeader = 1024

func isB64URL(c byte) bool { return isAlnum(c) || c == '-' || c == '_' }

// findJWT looks for the J of "eyJ" (rarer in text than its e).
func findJWT(text []byte, from int) (int, int) {
	for i := from + 2; i < len(text); {
		j := bytes.IndexByte(text[i:], 'J')
		if j < 0 {
			break
		}
		s := i + j - 2
		if text[s] == 'e' && text[s+1] == 'y' && (s == 0 || !(isB64URL(text[s-1]) || text[s-1] == '.')) {
			if e := jwtAt(text, s); e > 0 {
				return s, e
			}
		}
		i = s + 3
	}
	return -1, -1
}

// b64Run returns the end of the run of base64url characters at text[i].
func b64Run(text []byte, i int) int {
	for i < len(text) && isB64URL(text[i]) {
		i++
	}
	return i
}

// jwtAt returns the end of the token starting at text[s] ("eyJ"), or 0:
// a header that decodes to a JSON object with "alg", a payload of at least
// two characters and a signature (empty for alg none), and for an
// encrypted token (JWE) its two further segments.
func jwtAt(text []byte, s int) int {
	h := b64Run(text, s)
	if h >= len(text) || text[h] != '.' || !jwtHeader(text[s:h]) {
		return 0
	}
	q := b64Run(text, h+1)
	if q-h-1 < 2 || q >= len(text) || text[q] != '.' {
		return 0
	}
	e := b64Run(text, q+1)
	for k := 0; k < 2 && e+1 < len(text) && text[e] == '.' && isB64URL(text[e+1]); k++ {
		e = b64Run(text, e+1)
	}
	return e
}

// jwtHeader reports whether seg, a header segment, decodes to a JSON
// object that names its "alg".
func jwtHeader(seg []byte) bool {
	if len(seg) > maxJWTHeader {
		seg = seg[:maxJWTHeader]
	}
	if len(seg)%4 == 1 {
		seg = seg[:len(seg)-1]
	}
	var buf [maxJWTHeader * 3 / 4]byte
	n, err := base64.RawURLEncoding.Decode(buf[:], seg)
	if err != nil {
		return false
	}
	return n > 0 && buf[0] == '{' && bytes.Contains(buf[:n], []byte(`"alg"`))
}

// jwtOpen returns where a JWT may still be arriving at the end of text (at
// or after from): a run of token characters reaching the end that starts
// with "eyJ" at a token boundary and whose header, when complete, is valid.
// It returns -1 when there is none or the run is longer than maxHold.
func jwtOpen(text []byte, from int) int {
	s := len(text)
	for s > from && len(text)-s < maxHold && (isB64URL(text[s-1]) || text[s-1] == '.') {
		s--
	}
	if len(text)-s >= maxHold || !bytes.HasPrefix(text[s:], []byte("eyJ")) ||
		s > 0 && (isB64URL(text[s-1]) || text[s-1] == '.') {
		return -1
	}
	if h := bytes.IndexByte(text[s:], '.'); h >= 0 && !jwtHeader(text[s:s+h]) {
		return -1
	}
	return s
}
