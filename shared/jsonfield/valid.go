package jsonfield

import (
	"encoding/binary"
	"math/bits"
)

// MaxDepth is the deepest nesting of objects and arrays Valid accepts, the
// limit encoding/json enforces.
const MaxDepth = 10000

// Valid reports whether b is one JSON value surrounded by optional
// whitespace, exactly as encoding/json.Valid does: RFC 8259 syntax, at most
// MaxDepth nested objects and arrays, and, like encoding/json, any byte of
// 0x20 or above inside a string (invalid UTF-8 and lone surrogate escapes
// are accepted). It does not allocate, and it is several times faster than
// encoding/json.Valid: strings, the bulk of a request or response body, are
// scanned eight bytes at a time.
func Valid(b []byte) bool {
	return scan(b, nil)
}

// scan validates b as Valid does, telling k (nil: nobody) of its keys.
func scan(b []byte, k *keyScan) bool {
	var stack [1]uint64 // the first 64 levels live in a register-sized word
	switch scanValid(b, stack[:], k) {
	case validOK:
		return true
	case validDeep:
		k.reset()
		return validDeeply(b, k)
	}
	return false
}

// validDeeply scans again with room for MaxDepth levels; it is a separate
// function so that the common shallow body does not pay for zeroing it.
//
//go:noinline
func validDeeply(b []byte, k *keyScan) bool {
	var stack [(MaxDepth + 63) / 64]uint64
	return scanValid(b, stack[:], k) == validOK
}

const (
	validOK   = iota // one valid value
	validBad         // a syntax error, or deeper than MaxDepth
	validDeep        // deeper than stack holds, but not than MaxDepth
)

// scanValid validates b, tracking in stack (one bit per open container, set
// for an object) whether each open container is an object or an array. k,
// when not nil, is told of each object's opening and closing and of each
// key, and given the span of each top-level value it asked for.
func scanValid(b []byte, stack []uint64, k *keyScan) int {
	var (
		i     int
		depth int  // open containers
		inObj bool // the innermost open container is an object
	)
	limit := len(stack) * 64
	if limit > MaxDepth {
		limit = MaxDepth
	}

value: // a value starts at or after i, past optional whitespace
	for i < len(b) && b[i] <= ' ' && isWS(b[i]) {
		i++
	}
	if i >= len(b) {
		return validBad
	}
	switch c := b[i]; c {
	case '"':
		if i = validString(b, i+1); i < 0 {
			return validBad
		}
	case '{', '[':
		if depth >= limit {
			if depth >= MaxDepth {
				return validBad
			}
			return validDeep
		}
		inObj = c == '{'
		w, bit := depth>>6, uint64(1)<<(depth&63)
		if inObj {
			stack[w] |= bit
			if k != nil {
				k.open()
			}
		} else {
			stack[w] &^= bit
		}
		depth++
		i++
		for i < len(b) && b[i] <= ' ' && isWS(b[i]) {
			i++
		}
		if i >= len(b) {
			return validBad
		}
		if b[i] == c+2 { // '{'+2 == '}', '['+2 == ']': empty
			i++
			goto pop
		}
		if inObj {
			goto key
		}
		goto value
	case 't':
		if len(b)-i < 4 || string(b[i:i+4]) != "true" {
			return validBad
		}
		i += 4
	case 'f':
		if len(b)-i < 5 || string(b[i:i+5]) != "false" {
			return validBad
		}
		i += 5
	case 'n':
		if len(b)-i < 4 || string(b[i:i+4]) != "null" {
			return validBad
		}
		i += 4
	default:
		if i = validNumber(b, i); i < 0 {
			return validBad
		}
	}

after: // a value ended at i: a separator, a close or the end follows
	if k != nil && depth == 1 && k.pending != 0 {
		k.value(b[k.start:i])
	}
	for i < len(b) && b[i] <= ' ' && isWS(b[i]) {
		i++
	}
	if depth == 0 {
		if i == len(b) {
			return validOK
		}
		return validBad
	}
	if i >= len(b) {
		return validBad
	}
	switch b[i] {
	case ',':
		i++
		if inObj {
			for i < len(b) && b[i] <= ' ' && isWS(b[i]) {
				i++
			}
			goto key
		}
		goto value
	case '}':
		if !inObj {
			return validBad
		}
	case ']':
		if inObj {
			return validBad
		}
	default:
		return validBad
	}
	i++

pop: // the innermost container closed just before i
	if k != nil && inObj {
		k.close()
	}
	depth--
	if depth > 0 {
		d := depth - 1
		inObj = stack[d>>6]&(1<<(d&63)) != 0
	}
	goto after

key: // an object member starts at i: "key" :
	if i >= len(b) || b[i] != '"' {
		return validBad
	}
	ks := i
	if i = validString(b, i+1); i < 0 {
		return validBad
	}
	if k != nil {
		k.key(b[ks+1:i-1], depth)
	}
	for i < len(b) && b[i] <= ' ' && isWS(b[i]) {
		i++
	}
	if i >= len(b) || b[i] != ':' {
		return validBad
	}
	i++
	if k != nil && depth == 1 && k.pending != 0 {
		for i < len(b) && b[i] <= ' ' && isWS(b[i]) {
			i++
		}
		k.start = i
	}
	goto value
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// validString returns the index after the closing quote of the string whose
// contents start at b[i], or -1 when it is not a valid JSON string.
func validString(b []byte, i int) int {
	for {
		// Eight bytes at a time (stringMask) to the first quote, backslash
		// or control byte.
		if len(b)-i >= 8 {
			// Most strings are short (keys, roles): try one word first.
			if m := stringMask(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				goto special
			}
			i += 8
			for len(b)-i >= 32 {
				w := b[i : i+32]
				m0 := stringMask(binary.LittleEndian.Uint64(w[0:]))
				m1 := stringMask(binary.LittleEndian.Uint64(w[8:]))
				m2 := stringMask(binary.LittleEndian.Uint64(w[16:]))
				m3 := stringMask(binary.LittleEndian.Uint64(w[24:]))
				if m0|m1|m2|m3 != 0 {
					switch {
					case m0 != 0:
						i += bits.TrailingZeros64(m0) >> 3
					case m1 != 0:
						i += 8 + bits.TrailingZeros64(m1)>>3
					case m2 != 0:
						i += 16 + bits.TrailingZeros64(m2)>>3
					default:
						i += 24 + bits.TrailingZeros64(m3)>>3
					}
					goto special
				}
				i += 32
			}
			for len(b)-i >= 8 {
				if m := stringMask(binary.LittleEndian.Uint64(b[i:])); m != 0 {
					i += bits.TrailingZeros64(m) >> 3
					goto special
				}
				i += 8
			}
		}
		for ; i < len(b); i++ {
			if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
				goto special
			}
		}
		return -1

	special:
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
		default: // a control byte
			return -1
		}
		i++
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i++
		case 'u':
			if len(b)-i < 5 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
				return -1
			}
			i += 5
		default:
			return -1
		}
	}
}

// stringMask flags (in its high bit) each byte of x that ends or escapes a
// string or may not appear in one: a quote, a backslash or a byte below
// 0x20. Bytes are reduced to seven bits so that no sum carries into the
// next byte; y+0x60, (y^'"')+0x7f and (y^'\\')+0x7f set the high bit when
// the byte is at least 0x20, is not a quote, is not a backslash, and the
// byte's own high bit (from 0x80 up, always allowed) clears the flag.
func stringMask(x uint64) uint64 {
	y := x & (lsb * 0x7f)
	ok := (y + lsb*0x60) & ((y ^ lsb*'"') + lsb*0x7f) & ((y ^ lsb*'\\') + lsb*0x7f)
	return ^(ok | x) & msb
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f'
}

// validNumber returns the index after the RFC 8259 number starting at b[i],
// or -1. What follows the number is the caller's to check ("01" is the
// number 0 followed by a stray 1).
func validNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
		if i >= len(b) {
			return -1
		}
	}
	switch c := b[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i++
		for i < len(b) && b[i]-'0' <= 9 {
			i++
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i]-'0' > 9 {
			return -1
		}
		for i < len(b) && b[i]-'0' <= 9 {
			i++
		}
	}
	if i < len(b) && b[i]|0x20 == 'e' {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i]-'0' > 9 {
			return -1
		}
		for i < len(b) && b[i]-'0' <= 9 {
			i++
		}
	}
	return i
}
