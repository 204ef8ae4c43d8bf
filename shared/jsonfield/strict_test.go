package jsonfield

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStrictKeys(t *testing.T) {
	many := func(n int, extra string) string {
		var b strings.Builder
		b.WriteString(`{"model":"m"`)
		for i := range n {
			fmt.Fprintf(&b, `,"k%d":%d`, i, i)
		}
		b.WriteString(extra + "}")
		return b.String()
	}
	tests := []struct {
		name string
		in   string
		dup  string // "" when the body is unambiguous
	}{
		{"plain", `{"model":"a","stream":true,"messages":[{"role":"user","content":"hi"}]}`, ""},
		{"same key in sibling objects", `{"messages":[{"role":"a"},{"role":"b"}],"role":"x"}`, ""},
		{"same key nested and top", `{"model":"a","metadata":{"model":"b"}}`, ""},
		{"top-level duplicate", `{"model":"gmodel","model":"gpt-4.5-preview"}`, "model"},
		{"escaped duplicate", `{"model":"gmodel","mod\u0065l":"gpt-4.5-preview"}`, "model"},
		{"escaped first", `{"str\u0065am":false,"stream":true}`, "stream"},
		{"case variant at top", `{"model":"a","Model":"b"}`, "Model"},
		{"case variant of a read field", `{"MODEL":"b"}`, "MODEL"},
		{"unicode fold of a read field", `{"model":"a","ſtream":true}`, "ſtream"},
		{"dotless i of a read field", `{"model":"a","stream_optıons":{}}`, "stream_optıons"},
		{"dotted capital I at top", `{"İd":1,"id":2}`, "id"},
		{"dotless and plain i at top", `{"ı":1,"i":2}`, "i"},
		{"dotless and plain i in a large object", many(40, `,"ı":1,"i":2`), "i"},
		{"Kelvin sign at top", `{"\u212aey":1,"key":2}`, "key"},
		{"sigma forms at top", `{"σ":1,"ς":2}`, "ς"},
		{"fold is top-level only", `{"a":{"ı":1,"i":2}}`, ""},
		{"nested duplicate", `{"model":"a","stream_options":{"include_usage":true,"include_usage":false}}`, "include_usage"},
		{"duplicate in array element", `{"messages":[{"role":"user","role":"system"}]}`, "role"},
		{"case variants nested are distinct", `{"tools":[{"parameters":{"properties":{"id":{},"ID":{}}}}]}`, ""},
		{"strings that look like keys", `{"a":"\"b\":1","b":"x"}`, ""},
		{"large object unique", many(200, ""), ""},
		{"large object duplicate", many(200, `,"k150":0`), "k150"},
		{"large object fold duplicate", many(200, `,"K150":0`), "K150"},
		{"large object read field", many(200, `,"Stream":0`), "Stream"},
		{"array top", `[{"a":1,"a":2}]`, "a"},
		{"lone surrogates a Go parser reads as one", `{"tools":{"a\ud800":1,"a\udbff":2}}`, "a\uFFFD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !json.Valid([]byte(tt.in)) {
				t.Fatalf("test body is not valid JSON: %s", tt.in)
			}
			_, err := Strict([]byte(tt.in), []string{"model", "stream", "stream_options"})
			var de *DuplicateKeyError
			switch {
			case tt.dup == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.dup != "" && !errors.As(err, &de):
				t.Fatalf("no duplicate reported (err %v)", err)
			case tt.dup != "" && de.Key != tt.dup:
				t.Fatalf("reported %q, want %q", de.Key, tt.dup)
			}
		})
	}
}

// A key that is not valid UTF-8 is refused wherever it is: parsers replace
// its bad bytes differently, so "a\xe2\x82" and "a\xff" are two keys to
// encoding/json (two U+FFFD against one) and one key to a WHATWG decoder
// (Node's). Refusal comes first only when it is the first ambiguity.
func TestStrictKeysNotUTF8(t *testing.T) {
	fields := []string{"model"}
	for _, in := range []string{
		"{\"a\xe2\x82\":1,\"a\xff\":2}",
		"{\"model\":\"m\",\"tools\":[{\"x\xff\":1}]}",
		"{\"model\xc0\xaf\":\"m\"}", // an overlong '/'
		"{\"\xed\xa0\x80\":1}",      // a surrogate written as UTF-8
	} {
		if !Valid([]byte(in)) {
			t.Fatalf("%q: not valid to Valid", in)
		}
		if _, err := Strict([]byte(in), fields, "model"); err != ErrKeyNotUTF8 {
			t.Errorf("%q: err %v, want ErrKeyNotUTF8", in, err)
		}
	}
	// Values are not keys: bad bytes in a value are the upstream's to judge.
	if vals, err := Strict([]byte("{\"model\":\"m\",\"input\":\"a\xff\"}"), fields, "model"); err != nil || string(vals[0]) != `"m"` {
		t.Errorf("bad bytes in a value: %q, %v", vals[0], err)
	}
	// The first ambiguity in the body is the one reported.
	if _, err := Strict([]byte("{\"a\":1,\"a\":2,\"b\xff\":3}"), fields); !errors.As(err, new(*DuplicateKeyError)) {
		t.Errorf("duplicate first: %v", err)
	}
}

func TestFindUnescapesKeys(t *testing.T) {
	obj := []byte(`{"str\u0065am":true,"model":"x"}`)
	if !Bool(obj, "stream") {
		t.Error("escaped stream key not found")
	}
	got := string(SetString(nil, []byte(`{"mod\u0065l":"a"}`), "model", "b"))
	if got != `{"mod\u0065l":"b"}` {
		t.Errorf("SetString on an escaped key: %s", got)
	}
}

func BenchmarkStrict(b *testing.B) {
	body := []byte(`{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"temperature":0.2,` +
		`"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"` + strings.Repeat("hello world ", 100) + `"}]}`)
	fields := []string{"model", "stream", "stream_options"}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Strict(body, fields, "model", "stream", "stream_options", "messages"); err != nil {
			b.Fatal(err)
		}
	}
}

// checkKeysOld is the key check as it was before Strict read keys during
// the validation pass, the oracle Strict must agree with: the first
// ambiguous key of the valid JSON value obj: a key not valid UTF-8 as
// written, a key repeated within any object (unescaped by encoding/json,
// not by the code under test), two top-level keys
// equal under Unicode case folding, or a top-level key equal to one of
// fields under case folding but not exactly. It returns nil when every
// parser reads obj the same way. obj must be valid JSON (json.Valid).
func checkKeysOld(obj []byte, fields ...string) error {
	var (
		keyBuf   [32][]byte
		stackBuf [8]object
		depthBuf [8]int
		keys     = keyBuf[:0]   // canonical (unescaped) keys of the open objects
		stack    = stackBuf[:0] // open objects; arrays are not tracked
		objDepth = depthBuf[:0] // the container depth at which stack[i] opened
		depth    int            // containers open
	)
	for i := 0; i < len(obj); i++ {
		switch obj[i] {
		case '{':
			depth++
			stack = append(stack, object{first: len(keys)})
			objDepth = append(objDepth, depth)
		case '[':
			depth++
		case '}':
			if n := len(stack); n > 0 && objDepth[n-1] == depth {
				keys = keys[:stack[n-1].first]
				stack, objDepth = stack[:n-1], objDepth[:n-1]
			}
			depth--
		case ']':
			depth--
		case '"':
			end := skipString(obj, i)
			if end < 0 {
				return nil // not valid JSON: the caller's json.Valid says so
			}
			raw := obj[i+1 : end-1]
			j := skipWS(obj, end)
			n := len(stack)
			if j < len(obj) && obj[j] == ':' && n > 0 && objDepth[n-1] == depth {
				if !utf8.Valid(raw) {
					return ErrKeyNotUTF8
				}
				var name string
				if err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &name); err != nil {
					return fmt.Errorf("key %q does not decode: %w", raw, err)
				}
				key := []byte(name)
				top := n == 1 && depth == 1
				o := &stack[n-1]
				if o.set != nil {
					if _, dup := o.set[foldKey(key, top)]; dup {
						return &DuplicateKeyError{Key: string(key), Depth: depth - 1}
					}
				} else {
					for _, k := range keys[o.first:] {
						if bytes.Equal(k, key) || top && foldEqual(k, key) {
							return &DuplicateKeyError{Key: string(key), Depth: depth - 1}
						}
					}
				}
				if top {
					for _, f := range fields {
						if string(key) != f && foldEqual(key, []byte(f)) {
							return &DuplicateKeyError{Key: string(key), Depth: 0}
						}
					}
				}
				switch {
				case o.set != nil:
					o.set[foldKey(key, top)] = struct{}{}
				case len(keys)-o.first >= largeObject:
					o.set = make(map[string]struct{}, 2*largeObject)
					for _, k := range keys[o.first:] {
						o.set[foldKey(k, top)] = struct{}{}
					}
					keys = keys[:o.first]
					o.set[foldKey(key, top)] = struct{}{}
				default:
					keys = append(keys, key)
				}
			}
			i = end - 1
		}
	}
	return nil
}

// FuzzStrict: Strict's one pass decides what Valid, then checkKeysOld,
// then Lookup decided in three, and ValidLookup what Valid and Lookup did,
// on any input.
func FuzzStrict(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	for _, tt := range validCases {
		f.Add([]byte(tt.in))
	}
	bodies := benchBodies()
	f.Add(bodies["request"])
	f.Add(bodies["response"])
	for _, s := range []string{`{"model":"a","Model":"b"}`, `{"a":{"b":1,"b":2},"model":"x"}`, `[{"a":1,"a":2}]`,
		`{"str\u0065am":false,"stream":true}`, `{"model":"a","ſtream":true}`, `{"a":[{"x":1},{"x":2}],"x":{"x":{"x":3}}}`,
		`{"model":"a","model":"b",}`, `{"MODEL":1,"model":[`, "{\"a\xe2\x82\":1,\"a\xff\":2}", "{\"m\":{\"a\":1,\"b\xff\":2,\"a\":3}}",
		`{"a\ud800":1,"a\udc00":2}`} {
		f.Add([]byte(s))
	}
	// The scan's less travelled paths: an object of more than 32 keys (a
	// map), more than 32 keys and 8 objects open at once, nesting past 64
	// (a second pass).
	many := func(n int, extra string) string {
		var b strings.Builder
		b.WriteString(`{"model":"m"`)
		for i := range n {
			fmt.Fprintf(&b, `,"k%d":{"a":%d,"b":[{"c":1}]}`, i, i)
		}
		return b.String() + extra + "}"
	}
	nest := func(n int, inner string) string {
		return strings.Repeat(`{"o":[`, n) + inner + strings.Repeat(`]}`, n)
	}
	f.Add([]byte(many(40, "")))
	f.Add([]byte(many(40, `,"K7":1`)))
	f.Add([]byte(nest(12, `{"a":1,"a":2}`)))
	f.Add([]byte(nest(70, `{"x":1}`) + ` `))
	f.Add([]byte(`{"model":"m","x":` + nest(70, `{"y":1,"y":1}`) + `}`))
	fields := []string{"model", "stream", "stream_options"}
	want := []string{"model", "stream", "stream_options", "messages", "x", "model", "a"}
	f.Fuzz(func(t *testing.T, b []byte) {
		vals, err := Strict(b, fields, want...)
		valid := Valid(b)
		switch {
		case !valid:
			if err != ErrInvalid {
				t.Fatalf("invalid body: Strict err %v", err)
			}
		case checkKeysOld(b, fields...) != nil:
			old := checkKeysOld(b, fields...)
			oldDup, _ := old.(*DuplicateKeyError)
			de, _ := err.(*DuplicateKeyError)
			if err != old && (de == nil || oldDup == nil || *de != *oldDup) {
				t.Fatalf("Strict err %v, old %v", err, old)
			}
		case err != nil:
			t.Fatalf("Strict err %v on an unambiguous body", err)
		default:
			if l := Lookup(b, want...); !sameVals(l, vals) {
				t.Fatalf("Strict %q, Lookup %q", vals, l)
			}
		}
		lv, ok := ValidLookup(b, want...)
		if ok != valid {
			t.Fatalf("ValidLookup ok %v, Valid %v", ok, valid)
		}
		if ok {
			if l := Lookup(b, want...); !sameVals(l, lv) {
				t.Fatalf("ValidLookup %q, Lookup %q", lv, l)
			}
		}
	})
}

// sameVals reports whether two lookups found the same fields (nil for
// absent) with the same bytes.
func sameVals(a, b [MaxLookup][]byte) bool {
	for i := range a {
		if (a[i] == nil) != (b[i] == nil) || !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// FuzzFold: the allocation-free comparison of small objects and the map
// form of large ones fold keys alike, so an object's size never decides
// whether two keys are one.
func FuzzFold(f *testing.F) {
	for _, p := range [][2]string{{"i", "ı"}, {"İd", "id"}, {"ſtream", "STREAM"}, {"\u212a", "k"}, {"σ", "ς"}, {"ß", "ss"}, {"a", "ab"}, {"ǅ", "ǆ"}} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			return // Strict refuses such keys before comparing them
		}
		eq, mapped := foldEqual([]byte(a), []byte(b)), foldKey([]byte(a), true) == foldKey([]byte(b), true)
		if eq != mapped {
			t.Fatalf("%q %q: foldEqual %v, foldKey equal %v", a, b, eq, mapped)
		}
		if bytes.EqualFold([]byte(a), []byte(b)) && !eq {
			t.Fatalf("%q %q: equal to encoding/json, not to Strict", a, b)
		}
	})
}
