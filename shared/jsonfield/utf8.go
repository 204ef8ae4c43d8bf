package jsonfield

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// NotUTF8Error is a JSON body with a string that is not valid UTF-8 as
// written (JSON exchanged between systems must be UTF-8, RFC 8259 section
// 8.1). Parsers disagree about such a string (encoding/json replaces each
// bad byte with U+FFFD, others each bad sequence, others refuse the
// body), so what a gateway reads, logs or forwards could differ from what
// the upstream acts on. A lone surrogate written as an escape ("\udc00")
// is valid JSON and is not this error: it is the reader's to judge.
type NotUTF8Error struct {
	// Path names the string: "messages[2].content", "reason" ("" for a
	// top-level string).
	Path string
}

func (e *NotUTF8Error) Error() string {
	if e.Path == "" {
		return "the body is a string that is not valid UTF-8"
	}
	return fmt.Sprintf("`%s` is not valid UTF-8", e.Path)
}

// CheckUTF8 returns nil when every string of b, a valid JSON value, is
// valid UTF-8 as written, else a *NotUTF8Error naming the first that is
// not. It does not allocate for a valid body: JSON's own syntax is ASCII,
// so only a string can hold a byte utf8.Valid refuses.
func CheckUTF8(b []byte) error {
	if utf8.Valid(b) {
		return nil
	}
	off := 0
	for off < len(b) {
		r, n := utf8.DecodeRune(b[off:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		off += n
	}
	return &NotUTF8Error{Path: pathAt(b, off)}
}

// pathAt names the string of the JSON value b that holds byte off, as a
// path of object keys and array indexes ("" when b does not decode).
func pathAt(b []byte, off int) string {
	type frame struct {
		obj     bool
		key     string
		n       int  // arrays: the index of the current element
		keyNext bool // objects: the next string token is a key
	}
	var stack []frame
	path := func() string {
		var sb strings.Builder
		for i, f := range stack {
			switch {
			case !f.obj:
				sb.WriteString("[" + strconv.Itoa(f.n) + "]")
			case i > 0:
				sb.WriteString("." + f.key)
			default:
				sb.WriteString(f.key)
			}
		}
		return sb.String()
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		end := int(dec.InputOffset())
		top := len(stack) - 1
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:top]
			if top > 0 && stack[top-1].obj {
				stack[top-1].keyNext = true
			}
			continue
		}
		if top >= 0 && stack[top].obj && stack[top].keyNext { // a key
			stack[top].key, stack[top].keyNext = tok.(string), false
			if end > off {
				return path()
			}
			continue
		}
		if top >= 0 && !stack[top].obj { // a value in an array
			stack[top].n++
		}
		switch t := tok.(type) {
		case json.Delim: // '{' or '['
			stack = append(stack, frame{obj: t == '{', keyNext: t == '{', n: -1})
			continue
		case string:
			if end > off {
				return path()
			}
		}
		if top >= 0 && stack[top].obj {
			stack[top].keyNext = true
		}
	}
}
