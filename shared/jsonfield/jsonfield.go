// Package jsonfield finds and replaces the top-level fields of a JSON object
// without decoding it: the request path reads "model" and "stream" and
// rewrites "model" with it, at a fraction of the cost of encoding/json.
//
// The input must already be valid JSON (check with json.Valid or a decode);
// on invalid input the functions report "not found" rather than panic.
package jsonfield

import "bytes"

// Find returns the raw value of the top-level field key of the JSON object
// obj, and its byte offsets.
func Find(obj []byte, key string) (value []byte, start, end int, ok bool) {
	_, start, end, ok = find(obj, key)
	if !ok {
		return nil, 0, 0, false
	}
	return obj[start:end], start, end, true
}

// find returns the offset of the key's opening quote and the value's span.
func find(obj []byte, key string) (keyStart, start, end int, ok bool) {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return 0, 0, 0, false
	}
	i++
	for {
		i = skipWS(obj, i)
		if i >= len(obj) || obj[i] == '}' {
			return 0, 0, 0, false
		}
		if obj[i] == ',' {
			i++
			continue
		}
		if obj[i] != '"' {
			return 0, 0, 0, false
		}
		ks := i
		ke := skipString(obj, i)
		if ke < 0 {
			return 0, 0, 0, false
		}
		match := keyIs(obj[ks+1:ke-1], key)
		i = skipWS(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return 0, 0, 0, false
		}
		i = skipWS(obj, i+1)
		vs := i
		ve := skipValue(obj, i)
		if ve < 0 {
			return 0, 0, 0, false
		}
		if match {
			return ks, vs, ve, true
		}
		i = ve
	}
}

// String returns the top-level field key when it is a JSON string (escapes
// resolved), and whether it was.
func String(obj []byte, key string) (string, bool) {
	v, _, _, ok := Find(obj, key)
	if !ok {
		return "", false
	}
	return StringValue(v)
}

// keyIs reports whether the raw (possibly escaped) key names key.
func keyIs(raw []byte, key string) bool {
	if len(raw) == len(key) && string(raw) == key {
		return true
	}
	return bytes.IndexByte(raw, '\\') >= 0 && string(canonical(raw)) == key
}

// Bool returns the top-level boolean field key (false when absent).
func Bool(obj []byte, key string) bool {
	v, _, _, ok := Find(obj, key)
	return ok && string(v) == "true"
}

// SetString returns obj with the top-level field key set to the JSON string
// s (appended when absent). s must not need escaping beyond quotes and
// backslashes; other control characters are escaped as \u00XX.
func SetString(dst, obj []byte, key, s string) []byte {
	return set(dst, obj, key, s, nil, true)
}

// SetRaw returns obj with the top-level field key set to raw, a valid JSON
// value (inserted first when absent).
func SetRaw(dst, obj []byte, key string, raw []byte) []byte {
	return set(dst, obj, key, "", raw, false)
}

// set writes obj with key set to the string s (quoted) or to raw.
func set(dst, obj []byte, key, s string, raw []byte, quoted bool) []byte {
	value := func(dst []byte) []byte {
		if quoted {
			return appendQuoted(dst, s)
		}
		return append(dst, raw...)
	}
	_, start, end, ok := Find(obj, key)
	if ok {
		dst = append(dst, obj[:start]...)
		dst = value(dst)
		return append(dst, obj[end:]...)
	}
	// Insert right after the opening brace.
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return append(dst, obj...)
	}
	dst = append(dst, obj[:i+1]...)
	dst = appendQuoted(dst, key)
	dst = append(dst, ':')
	dst = value(dst)
	rest := obj[i+1:]
	if j := skipWS(rest, 0); j < len(rest) && rest[j] != '}' {
		dst = append(dst, ',')
	}
	return append(dst, rest...)
}

// Delete returns obj without the top-level field key.
func Delete(dst, obj []byte, key string) []byte {
	ks, _, end, ok := find(obj, key)
	if !ok {
		return append(dst, obj...)
	}
	// Remove one adjoining comma: the following one, else the preceding one.
	if e := skipWS(obj, end); e < len(obj) && obj[e] == ',' {
		end = e + 1
	} else {
		p := ks - 1
		for p > 0 && isWS(obj[p]) {
			p--
		}
		if obj[p] == ',' {
			ks = p
		}
	}
	dst = append(dst, obj[:ks]...)
	return append(dst, obj[end:]...)
}

func appendQuoted(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the closing quote of the string
// starting at b[i] == '"', or -1. It jumps from quote to quote, so long
// strings (prompts) cost a memchr rather than a loop per byte.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		n := 0 // backslashes right before the quote
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return -1
}

// skipValue returns the index after the value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				if i < 0 {
					return -1
				}
				i--
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	default:
		for ; i < len(b); i++ {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
		}
		return i
	}
}

// Each calls fn with the raw value of each element of the JSON array arr,
// in order, and reports whether arr is an array. It does not allocate (fn
// may, but a func literal that does not escape stays on the stack).
func Each(arr []byte, fn func(elem []byte)) bool {
	i := skipWS(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return false
	}
	i++
	for {
		i = skipWS(arr, i)
		if i >= len(arr) {
			return false
		}
		switch arr[i] {
		case ']':
			return true
		case ',':
			i++
			continue
		}
		end := skipValue(arr, i)
		if end < 0 {
			return false
		}
		fn(arr[i:end])
		i = end
	}
}
