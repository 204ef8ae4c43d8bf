package jsonfield

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// CheckKeys reports the first ambiguous key of the valid JSON value obj:
// a key repeated within any object (after unescaping), two top-level keys
// equal under Unicode case folding, or a top-level key equal to one of
// fields under case folding but not exactly. It returns nil when every
// parser reads obj the same way. obj must be valid JSON (json.Valid).
func CheckKeys(obj []byte, fields ...string) error {
	type object struct {
		first int                 // index of its first key in keys
		set   map[string]struct{} // built once the object is large
	}
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
				key := canonical(raw)
				top := n == 1 && depth == 1
				o := &stack[n-1]
				if o.set != nil {
					if _, dup := o.set[foldKey(key, top)]; dup {
						return &DuplicateKeyError{Key: string(key), Depth: depth - 1}
					}
				} else {
					for _, k := range keys[o.first:] {
						if bytes.Equal(k, key) || top && bytes.EqualFold(k, key) {
							return &DuplicateKeyError{Key: string(key), Depth: depth - 1}
						}
					}
				}
				if top {
					for _, f := range fields {
						if string(key) != f && bytes.EqualFold(key, []byte(f)) {
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

// foldKey is the map form of a key: case-folded at the top level.
func foldKey(k []byte, top bool) string {
	if top {
		return string(bytes.ToLower(bytes.ToUpper(k)))
	}
	return string(k)
}

// canonical returns the key with its escapes resolved (the raw bytes when
// it has none).
func canonical(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return raw
	}
	return []byte(s)
}
