package guardrail

import (
	"bytes"
	"errors"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"
)

// userRegex is one distinct regex entry.
type userRegex struct {
	re   *regexp.Regexp
	lit  []byte // a literal every match contains (lower case when fold), or nil
	fold bool   // lit is matched ASCII-case-insensitively
	pats []int32
}

// regexSet holds the regex entries of all guardrails.
type regexSet struct {
	withLit []*userRegex // tried when their literal is in the text
	bare    []*userRegex // no literal: tried when combo matches
	combo   *regexp.Regexp
}

type regexCompiler struct {
	index map[string]*userRegex
	all   []*userRegex
}

// add compiles a regex entry for pattern pat and returns its reach.
func (c *regexCompiler) add(src string, pat int32) (int, error) {
	if r, ok := c.index[src]; ok {
		r.pats = append(r.pats, pat)
		return reachOf(src), nil
	}
	re, err := regexp.Compile(src)
	if err != nil {
		return 0, err
	}
	tree, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return 0, err
	}
	tree = tree.Simplify()
	if lo, _ := lenBounds(tree); lo == 0 {
		return 0, errors.New("can match the empty string")
	}
	r := &userRegex{re: re, pats: []int32{pat}}
	if lit, fold := requiredLiteral(tree); lit != "" {
		r.lit, r.fold = []byte(lit), fold
	}
	if c.index == nil {
		c.index = map[string]*userRegex{}
	}
	c.index[src] = r
	c.all = append(c.all, r)
	return reachOf(src), nil
}

// reachOf returns a regex's reach: its longest match and a rune after it,
// or -1 when unbounded.
func reachOf(src string) int {
	tree, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return -1
	}
	if _, hi := lenBounds(tree.Simplify()); hi >= 0 {
		return hi + 4
	}
	return -1
}

// build sorts the entries: those with a required literal run alone behind
// a search for it; the others are combined into one alternation that is
// run first, so a text none of them matches costs one pass.
func (c *regexCompiler) build() regexSet {
	var s regexSet
	var alts []string
	for _, r := range c.all {
		if r.lit != nil {
			s.withLit = append(s.withLit, r)
			continue
		}
		s.bare = append(s.bare, r)
		alts = append(alts, "(?:"+r.re.String()+")")
	}
	if len(alts) > 1 {
		s.combo, _ = regexp.Compile(strings.Join(alts, "|")) // nil: try each
	}
	return s
}

func (rs *regexSet) scan(s *scan) {
	for _, r := range rs.withLit {
		if !containsLit(s.text, r.lit, r.fold) {
			continue
		}
		rs.run(s, r)
		if s.hit {
			return
		}
	}
	if len(rs.bare) == 0 || rs.combo != nil && !rs.combo.Match(s.text) {
		return
	}
	for _, r := range rs.bare {
		rs.run(s, r)
		if s.hit {
			return
		}
	}
}

func (rs *regexSet) run(s *scan, r *userRegex) {
	if s.any {
		s.hit = r.re.Match(s.text)
		return
	}
	for _, loc := range r.re.FindAllIndex(s.text, -1) {
		if loc[0] < loc[1] {
			s.emit(r.pats, loc[0], loc[1])
		}
	}
}

// containsLit reports whether text contains lit, ASCII-case-insensitively
// when fold (lit is then lower case).
func containsLit(text, lit []byte, fold bool) bool {
	if !fold {
		return bytes.Contains(text, lit)
	}
	c0 := lit[0]
	if !isLetter(c0) {
		for i := 0; ; {
			j := bytes.IndexByte(text[i:], c0)
			if j < 0 {
				return false
			}
			if i += j; equalFold(text[i:], lit) {
				return true
			}
			i++
		}
	}
	lo, up := -1, -1 // next positions of each case of the first byte
	for i := 0; i < len(text); {
		if lo < i {
			if lo = bytes.IndexByte(text[i:], c0); lo >= 0 {
				lo += i
			} else {
				lo = len(text)
			}
		}
		if up < i {
			if up = bytes.IndexByte(text[i:], c0-'a'+'A'); up >= 0 {
				up += i
			} else {
				up = len(text)
			}
		}
		i = min(lo, up)
		if i >= len(text) {
			return false
		}
		if equalFold(text[i:], lit) {
			return true
		}
		i++
	}
	return false
}

// equalFold reports whether text starts with lit (lower case), folding
// ASCII letters.
func equalFold(text, lit []byte) bool {
	if len(text) < len(lit) {
		return false
	}
	for k, c := range lit {
		t := text[k]
		if t != c && !(isLetter(c) && t|0x20 == c) {
			return false
		}
	}
	return true
}

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
