package guardrail

import (
	"bytes"
	"errors"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"
)

// minLit is the shortest required literal worth searching for: a shorter
// one (a dash, an @) is in most texts.
const minLit = 2

// Seeding: a regex of bounded length whose first bytes are selective
// (seedRate below maxSeedRate) is run anchored, only where those bytes
// occur, instead of being searched for over the whole text (Go's regexp
// has no DFA: an unanchored search costs some 20 ns a byte).
const (
	maxSeedRate = 0.05
	maxSeedLen  = 1024
)

// userRegex is one distinct regex entry.
type userRegex struct {
	re   *regexp.Regexp
	lit  []byte // a literal every match contains (lower case when fold), or nil
	fold bool   // lit is matched ASCII-case-insensitively
	pats []int32

	// When seeded: the sets of a match's first bytes, the longest match,
	// and re anchored at the start of the text (at0) or after one rune of
	// context (atRune), so assertions such as \b see what precedes.
	seed   []byteSet
	maxLen int
	at0    *regexp.Regexp
	atRune *regexp.Regexp
}

// regexSet holds the regex entries of all guardrails.
type regexSet struct {
	alone []*userRegex // with a literal to search for first, or seeded
	bare  []*userRegex // neither: combo is run first
	combo *regexp.Regexp
}

// CheckRegex reports why src cannot be a guardrail's regex entry (nil: it
// can): it does not compile (RE2, Go's syntax), or it can match the empty
// string. Configuration validation calls it, so that a file or a routing
// version is refused before any process compiles it.
func CheckRegex(src string) error {
	if _, err := regexp.Compile(src); err != nil {
		return err
	}
	tree, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return err
	}
	if lo, _ := lenBounds(tree.Simplify()); lo == 0 {
		return errEmptyMatch
	}
	return nil
}

var errEmptyMatch = errors.New("can match the empty string")

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
	lo, hi := lenBounds(tree)
	if lo == 0 {
		return 0, errEmptyMatch
	}
	r := &userRegex{re: re, pats: []int32{pat}}
	if lit, fold := requiredLiteral(tree); len(lit) >= minLit {
		r.lit, r.fold = []byte(lit), fold
	}
	if seq, _ := seedSeq(tree, nil); len(seq) > 0 && hi >= 0 && hi <= maxSeedLen && seedRate(seq) <= maxSeedRate {
		r.at0, err = regexp.Compile(`^(?:` + src + `)`)
		if err == nil {
			r.atRune, err = regexp.Compile(`^(?s:.)(?:` + src + `)`)
		}
		if err != nil {
			return 0, err
		}
		r.seed, r.maxLen = seq, hi
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
// a search for it, seeded ones run alone where they may start; the others
// are combined into one alternation that is run first, so a text none of
// them matches costs one pass.
func (c *regexCompiler) build() regexSet {
	var s regexSet
	var alts []string
	for _, r := range c.all {
		if r.lit != nil || r.seed != nil {
			s.alone = append(s.alone, r)
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
	for _, r := range rs.alone {
		if r.lit != nil && !containsLit(s.text, r.lit, r.fold) {
			continue
		}
		if r.seed != nil {
			r.seeded(s, rs)
		} else {
			rs.run(s, r)
		}
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

func (rs *regexSet) run(s *scan, r *userRegex) { rs.runFrom(s, r, 0) }

// runFrom emits r's matches in s.text that start at or after from.
func (rs *regexSet) runFrom(s *scan, r *userRegex, from int) {
	if s.any {
		s.hit = r.re.Match(s.text)
		return
	}
	for _, loc := range r.re.FindAllIndex(s.text, -1) {
		if loc[0] >= from && loc[0] < loc[1] {
			s.emit(r.pats, loc[0], loc[1])
		}
	}
}

// seeded finds the matches of r as FindAllIndex would (leftmost-first,
// left to right, not overlapping), trying r anchored at each position
// where its first bytes are. When the seed proves common in this text (an
// anchored run costs some 25 times a byte of search), it searches the rest
// as Go's regexp does: the matches it found are those of the search that
// start before where it stopped.
func (r *userRegex) seeded(s *scan, rs *regexSet) {
	text, first := s.text, &r.seed[0]
	tries := 0
	for i := 0; i < len(text); i++ {
		for i < len(text) && !first.has(text[i]) {
			i++
		}
		if i+len(r.seed) > len(text) {
			return
		}
		k := 1
		for k < len(r.seed) && r.seed[k].has(text[i+k]) {
			k++
		}
		if k < len(r.seed) {
			continue
		}
		if tries++; tries > 8+len(text)/32 {
			rs.runFrom(s, r, i)
			return
		}
		if end := r.matchAt(text, i, s.any); end > i {
			if s.emit(r.pats, i, end); s.hit {
				return
			}
			i = end - 1
		}
	}
}

// matchAt returns the end of r's match starting at text[i], or -1. It reads
// up to one rune past the longest match, so assertions at its end see what
// follows. With any it only reports a match (returning len(text)).
func (r *userRegex) matchAt(text []byte, i int, any bool) int {
	re, from := r.at0, i
	if i > 0 {
		_, w := utf8.DecodeLastRune(text[:i])
		re, from = r.atRune, i-w
	}
	window := text[from:min(len(text), i+r.maxLen+utf8.UTFMax)]
	if any {
		if re.Match(window) {
			return len(text)
		}
		return -1
	}
	loc := re.FindIndex(window)
	if loc == nil {
		return -1
	}
	return from + loc[1]
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
