package guardrail

// What the syntax of a regex entry tells before it is run: its bounds, a
// literal every match contains, and the bytes a match can start with.

import (
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// requiredLiteral returns the longest literal that every match of re
// contains, as bytes to search for, and whether to fold ASCII case. A
// case-folded literal stops at a rune that folds outside ASCII (k folds to
// the Kelvin sign), so the search never misses a match.
func requiredLiteral(re *syntax.Regexp) (string, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		fold := re.Flags&syntax.FoldCase != 0
		best, cur := "", []byte(nil)
		for _, r := range append(re.Rune, -1) {
			if r >= 0 && (!fold || asciiFold(r)) {
				if fold {
					r = unicode.ToLower(r)
				}
				cur = utf8.AppendRune(cur, r)
				continue
			}
			if len(cur) > len(best) {
				best = string(cur)
			}
			cur = cur[:0]
		}
		return best, fold
	case syntax.OpCapture, syntax.OpPlus:
		return requiredLiteral(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return requiredLiteral(re.Sub[0])
		}
	case syntax.OpConcat:
		best, bestFold := "", false
		for _, sub := range re.Sub {
			if l, f := requiredLiteral(sub); len(l) > len(best) {
				best, bestFold = l, f
			}
		}
		return best, bestFold
	}
	return "", false
}

// asciiFold reports whether r and every rune it folds to are ASCII.
func asciiFold(r rune) bool {
	if r >= utf8.RuneSelf {
		return false
	}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// lenBounds returns the shortest and longest match of re in bytes (-1:
// unbounded).
func lenBounds(re *syntax.Regexp) (lo, hi int) {
	const huge = 1 << 20
	sat := func(v int) int { return min(v, huge) }
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			lo++
			hi += 4
			if re.Flags&syntax.FoldCase == 0 {
				hi += utf8.RuneLen(r) - 4
			}
		}
		return lo, hi
	case syntax.OpCharClass:
		if len(re.Rune) == 0 {
			return 0, 0
		}
		return 1, max(1, utf8.RuneLen(min(re.Rune[len(re.Rune)-1], unicode.MaxRune)))
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1, 4
	case syntax.OpCapture:
		return lenBounds(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		l, h := lenBounds(re.Sub[0])
		mn, mx := 0, 1
		switch re.Op {
		case syntax.OpStar:
			mx = -1
		case syntax.OpPlus:
			mn, mx = 1, -1
		case syntax.OpRepeat:
			mn, mx = re.Min, re.Max
		}
		lo = sat(mn * l)
		switch {
		case h == 0:
			hi = 0
		case mx < 0 || h < 0:
			hi = -1
		default:
			hi = sat(mx * h)
		}
		return lo, hi
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			l, h := lenBounds(sub)
			lo = sat(lo + l)
			if hi >= 0 {
				hi = sat(hi + h)
			}
			if h < 0 {
				hi = -1
			}
		}
		return lo, hi
	case syntax.OpAlternate:
		lo = huge
		for _, sub := range re.Sub {
			l, h := lenBounds(sub)
			lo = min(lo, l)
			if hi >= 0 && h >= 0 {
				hi = max(hi, h)
			} else {
				hi = -1
			}
		}
		return lo, hi
	}
	return 0, 0 // empty-width assertions, empty match, no match
}

// byteSet is a set of bytes.
type byteSet [4]uint64

func (b *byteSet) add(c byte)      { b[c>>6] |= 1 << (c & 63) }
func (b *byteSet) has(c byte) bool { return b[c>>6]&(1<<(c&63)) != 0 }
func (b *byteSet) union(o *byteSet) {
	b[0], b[1], b[2], b[3] = b[0]|o[0], b[1]|o[1], b[2]|o[2], b[3]|o[3]
}
func (b *byteSet) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		b.add(byte(c))
	}
}

// runeBytes adds the bytes that can begin the runes lo..hi, and for an
// invalid byte (which Go's regexp reads as U+FFFD) every non-ASCII byte.
func (b *byteSet) runeBytes(lo, hi rune) {
	if lo < utf8.RuneSelf {
		b.addRange(byte(lo), byte(min(hi, utf8.RuneSelf-1)))
	}
	if hi >= utf8.RuneSelf {
		b.addRange(0x80, 0xff)
	}
}

// foldBytes adds the first bytes of r and the runes it folds to.
func (b *byteSet) foldBytes(r rune) {
	b.runeBytes(r, r)
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		b.runeBytes(f, f)
	}
}

// firstBytes returns the bytes a match of re can begin with, and whether re
// can match the empty string (then what follows it can begin too).
func firstBytes(re *syntax.Regexp) (set byteSet, nullable bool) {
	switch re.Op {
	case syntax.OpLiteral:
		if len(re.Rune) == 0 {
			return set, true
		}
		if re.Flags&syntax.FoldCase != 0 {
			set.foldBytes(re.Rune[0])
		} else {
			set.runeBytes(re.Rune[0], re.Rune[0])
		}
		return set, false
	case syntax.OpCharClass:
		for k := 0; k+1 < len(re.Rune); k += 2 {
			set.runeBytes(re.Rune[k], re.Rune[k+1])
		}
		return set, false
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		set.addRange(0, 0xff)
		if re.Op == syntax.OpAnyCharNotNL {
			set[0] &^= 1 << '\n'
		}
		return set, false
	case syntax.OpCapture, syntax.OpPlus:
		return firstBytes(re.Sub[0])
	case syntax.OpStar, syntax.OpQuest:
		set, _ = firstBytes(re.Sub[0])
		return set, true
	case syntax.OpRepeat:
		set, nullable = firstBytes(re.Sub[0])
		return set, nullable || re.Min == 0
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			s, n := firstBytes(sub)
			set.union(&s)
			if !n {
				return set, false
			}
		}
		return set, true
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			s, n := firstBytes(sub)
			set.union(&s)
			nullable = nullable || n
		}
		return set, nullable
	}
	return set, true // empty-width assertions, empty match
}

// maxSeed is the longest byte-set prefix computed.
const maxSeed = 8

// seedSeq appends to seq the sets of the bytes at the first offsets of
// every match of re, as far as they are fixed (single-byte steps), and
// reports whether what follows re may extend it.
func seedSeq(re *syntax.Regexp, seq []byteSet) ([]byteSet, bool) {
	if len(seq) >= maxSeed {
		return seq, false
	}
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary, syntax.OpEmptyMatch:
		return seq, true // zero width: the next byte is what follows
	case syntax.OpLiteral:
		fold := re.Flags&syntax.FoldCase != 0
		for _, r := range re.Rune {
			if len(seq) >= maxSeed {
				return seq, false
			}
			var b byteSet
			switch {
			case fold && !asciiFold(r):
				b.foldBytes(r)
				return append(seq, b), false
			case r >= utf8.RuneSelf:
				for _, c := range utf8.AppendRune(nil, r) {
					var one byteSet
					one.add(c)
					seq = append(seq, one)
				}
				continue
			case fold:
				b.foldBytes(r)
			default:
				b.add(byte(r))
			}
			seq = append(seq, b)
		}
		return seq, true
	case syntax.OpCharClass:
		var b byteSet
		ascii := true
		for k := 0; k+1 < len(re.Rune); k += 2 {
			b.runeBytes(re.Rune[k], re.Rune[k+1])
			ascii = ascii && re.Rune[k+1] < utf8.RuneSelf
		}
		return append(seq, b), ascii
	case syntax.OpCapture:
		return seedSeq(re.Sub[0], seq)
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			var more bool
			if seq, more = seedSeq(sub, seq); !more {
				return seq, false
			}
		}
		return seq, true
	}
	if set, nullable := firstBytes(re); !nullable {
		return append(seq, set), false
	}
	return seq, false
}

// textFreq is a rough share of each byte in the texts guardrails read
// (prose, JSON, code), to judge how often a seed hits.
func textFreq(c byte) float64 {
	switch {
	case c >= 'a' && c <= 'z':
		return 0.025
	case c == ' ':
		return 0.15
	case c >= 'A' && c <= 'Z', c == '\n':
		return 0.002
	case c >= '0' && c <= '9':
		return 0.005
	case c > ' ' && c < 0x7f:
		return 0.003
	}
	return 0.001
}

// seedRate estimates the share of text positions where seq matches.
func seedRate(seq []byteSet) float64 {
	p := 1.0
	for k := range seq {
		q := 0.0
		for c := range 256 {
			if seq[k].has(byte(c)) {
				q += textFreq(byte(c))
			}
		}
		p *= min(q, 1)
	}
	return p
}
