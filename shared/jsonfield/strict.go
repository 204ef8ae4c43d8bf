package jsonfield

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// DuplicateKeyError reports a JSON object that names the same key twice
// (compared after unescaping), or, at the top level, two keys that differ
// only in case or a top-level key that differs only in case from a field
// the caller reads. Parsers disagree about such bodies (the first key wins
// in one, the last in another, and Go's encoding/json matches struct fields
// case-insensitively), so a gateway that reads one value and forwards the
// body could authorise a value other than the one the upstream acts on.
type DuplicateKeyError struct {
	Key   string // the second key, unescaped
	Depth int    // 0 for the top-level object
}

func (e *DuplicateKeyError) Error() string {
	if e.Depth == 0 {
		return fmt.Sprintf("the request body names the field %q more than once (or in two spellings)", e.Key)
	}
	return fmt.Sprintf("the request body names the key %q twice in one object", e.Key)
}

// largeObject is the number of keys past which an object's keys are
// compared through a map instead of one by one, so a hostile object with
// many keys costs linear time.
const largeObject = 32

// ErrInvalid is a body that is not valid JSON (as Valid decides).
var ErrInvalid = errors.New("not valid JSON")

// ErrKeyNotUTF8 is a body with an object key that is not valid UTF-8.
// Parsers replace the bad bytes in different ways (encoding/json each byte,
// a WHATWG decoder each maximal bad sequence), so they can disagree about
// whether two such keys are one, and JSON exchanged between systems must
// be UTF-8 (RFC 8259, section 8.1).
var ErrKeyNotUTF8 = errors.New("an object key is not valid UTF-8")

// Strict reads the JSON value b in one pass: it validates b as Valid does
// (ErrInvalid), then refuses the first ambiguous key in b: a key that is
// not valid UTF-8 as written (ErrKeyNotUTF8), or (*DuplicateKeyError) a
// key repeated within any object (escapes resolved), two top-level keys
// equal under Unicode case folding, or a top-level key equal to one of
// fields under case folding but not exactly. When b is valid and unambiguous, every
// parser reads its keys the same way (values with invalid UTF-8 are
// the reader's to judge), and vals holds the raw value of each
// top-level member named in want (nil when absent, or when b is not an
// object), as Lookup would read it. It allocates only for keys written
// with escapes, objects of more than 32 keys, more than
// 32 keys or 8 objects open at once, and fields when it is not a
// package-level slice (the scan keeps it).
func Strict(b []byte, fields []string, want ...string) (vals [MaxLookup][]byte, err error) {
	k := keyScan{dups: true, fields: fields}
	k.nwant = copy(k.want[:], want)
	if !scan(b, &k) {
		return vals, ErrInvalid
	}
	if k.err != nil {
		return vals, k.err
	}
	return k.vals, nil
}

// ValidLookup is Valid and Lookup in one pass: whether b is valid JSON,
// and, when it is, what Lookup(b, keys...) returns. Where b is not valid,
// vals is partial; Lookup reads what it can of such a body.
func ValidLookup(b []byte, keys ...string) (vals [MaxLookup][]byte, ok bool) {
	var k keyScan
	k.nwant = copy(k.want[:], keys)
	ok = scan(b, &k)
	return k.vals, ok
}

// keyScan follows the keys of a validation pass (scanValid): it notes the
// values of the top-level members named in want and, with dups, the first
// ambiguous key. It keeps the names and the first entries of its lists in
// place (no slice of it points into it, none of the caller's is kept), so
// that neither it nor the caller's variadic names move to the heap.
type keyScan struct {
	want    [MaxLookup]string
	nwant   int
	vals    [MaxLookup][]byte
	pending uint8 // the slots of want the member being read fills
	start   int   // where that member's value starts

	dups   bool
	fields []string                 // top-level names compared under case folding
	err    error                    // the first ambiguous key
	keys   list[[]byte, [32][]byte] // the keys of the open objects, escapes resolved
	objs   list[object, [8]object]  // the open objects, innermost last
}

// object is an open object's share of keyScan.keys.
type object struct {
	first int                 // index of its first key in keys
	set   map[string]struct{} // built once the object is large
}

// list is a stack of T whose first len(A) entries live in A, in place.
type list[T any, A ~[32]T | ~[8]T] struct {
	n    int
	in   A
	more []T // the entries past in
}

func (l *list[T, A]) push(v T) {
	if l.n < len(l.in) {
		l.in[l.n] = v
	} else {
		l.more = append(l.more[:l.n-len(l.in)], v)
	}
	l.n++
}

func (l *list[T, A]) at(i int) *T {
	if i < len(l.in) {
		return &l.in[i]
	}
	return &l.more[i-len(l.in)]
}

// reset forgets what a pass saw, for another pass over the same body.
func (k *keyScan) reset() {
	if k == nil {
		return
	}
	k.vals, k.pending, k.keys.n, k.objs.n, k.err = [MaxLookup][]byte{}, 0, 0, 0, nil
}

// open notes an object's opening brace.
func (k *keyScan) open() {
	if k.dups {
		k.objs.push(object{first: k.keys.n})
	}
}

// close notes an object's closing brace.
func (k *keyScan) close() {
	if k.objs.n > 0 {
		k.objs.n--
		o := k.objs.at(k.objs.n)
		k.keys.n = o.first
		o.set = nil
	}
}

// value is the value of the top-level member whose key was the last.
func (k *keyScan) value(v []byte) {
	for i := range k.nwant {
		if k.pending&(1<<i) != 0 {
			k.vals[i] = v
		}
	}
	k.pending = 0
}

// key notes raw, a key as written, of an object depth containers deep.
func (k *keyScan) key(raw []byte, depth int) {
	top := depth == 1
	if !k.dups {
		if top {
			for i, w := range k.want[:k.nwant] {
				if k.vals[i] == nil && keyIs(raw, w) {
					k.pending |= 1 << i
				}
			}
		}
		return
	}
	if !utf8.Valid(raw) {
		if k.err == nil {
			k.err = ErrKeyNotUTF8
		}
		return
	}
	key := canonical(raw)
	if top {
		for i, w := range k.want[:k.nwant] {
			if k.vals[i] == nil && string(key) == w {
				k.pending |= 1 << i
			}
		}
	}
	if k.err != nil || k.objs.n == 0 {
		return
	}
	o := k.objs.at(k.objs.n - 1)
	if k.ambiguous(o, key, top) {
		k.err = &DuplicateKeyError{Key: string(key), Depth: depth - 1}
		return
	}
	switch {
	case o.set != nil:
		o.set[foldKey(key, top)] = struct{}{}
	case k.keys.n-o.first >= largeObject:
		o.set = make(map[string]struct{}, 2*largeObject)
		for i := o.first; i < k.keys.n; i++ {
			o.set[foldKey(*k.keys.at(i), top)] = struct{}{}
		}
		k.keys.n = o.first
		o.set[foldKey(key, top)] = struct{}{}
	default:
		k.keys.push(key)
	}
}

// ambiguous reports whether key repeats a key of o, the innermost open
// object (or, at the top level, folds to one of it or of fields).
func (k *keyScan) ambiguous(o *object, key []byte, top bool) bool {
	if o.set != nil {
		if _, dup := o.set[foldKey(key, top)]; dup {
			return true
		}
	} else {
		for i := o.first; i < k.keys.n; i++ {
			if s := *k.keys.at(i); bytes.Equal(s, key) || top && foldEqual(s, key) {
				return true
			}
		}
	}
	if top {
		for _, f := range k.fields {
			if string(key) != f && foldEqual(key, []byte(f)) {
				return true
			}
		}
	}
	return false
}

// foldKey is the map form of a key: case-folded (foldRune) at the top
// level.
func foldKey(k []byte, top bool) string {
	if !top {
		return string(k)
	}
	out := make([]byte, 0, len(k))
	for _, r := range string(k) {
		out = utf8.AppendRune(out, foldRune(r))
	}
	return string(out)
}

// foldEqual reports whether a and b are one key under case folding
// (foldRune), as foldKey compares them, without allocating.
func foldEqual(a, b []byte) bool {
	for len(a) > 0 && len(b) > 0 {
		if ca, cb := a[0], b[0]; ca|cb < utf8.RuneSelf { // ASCII: EqualFold decided
			if ca != cb && ca|0x20 != cb|0x20 || !isLetter(ca) && ca != cb {
				return false
			}
			a, b = a[1:], b[1:]
			continue
		}
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if ra != rb && foldRune(ra) != foldRune(rb) {
			return false
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) == 0 && len(b) == 0
}

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// foldRune is r's case-folding class, coarser than any simple case
// mapping, so that no parser's case-insensitive match of one rune to one
// rune goes unnoticed: the least rune
// of the Unicode simple folding orbit (encoding/json's and
// bytes.EqualFold's: ſ is s, K is k) of r upper-cased then lower-cased
// (what ToUpperInvariant or toLowerCase elsewhere fold together: ı and İ
// are i).
func foldRune(r rune) rune {
	r = unicode.ToLower(unicode.ToUpper(r))
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// canonical returns the key with its escapes resolved (the raw bytes when
// it has none).
func canonical(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	return unquote(raw)
}

// unquote decodes raw, a JSON string's contents, as encoding/json does
// (raw itself when it does not decode).
func unquote(raw []byte) []byte {
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return raw
	}
	return []byte(s)
}
