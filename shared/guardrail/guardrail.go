package guardrail

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Def is the pattern part of one guardrail, as the routing document states
// it: named built-ins, RE2 regular expressions (Go regexp syntax) and
// literal deny words or phrases.
type Def struct {
	Name     string
	Builtins []string
	Regex    []string
	Deny     []string
}

// Pattern is one compiled pattern of a guardrail.
type Pattern struct {
	// Name is the built-in's name ("email", "card_number", ...) or the
	// entry's place in its Def: "regex[1]", "deny[0]".
	Name string
	// Guardrail is the index of the pattern's Def in the slice given to
	// Compile.
	Guardrail int
	// Reach is how many bytes from the start of a match deciding it may
	// read (the match and what follows it), or -1 when a match has no
	// bound (a regex with unbounded repetition, provider keys, JWTs).
	Reach int
}

// Match is where one pattern matched: offsets only, so a match can be
// logged or counted without carrying the matched text anywhere.
type Match struct {
	Guardrail  int    // index of the guardrail's Def given to Compile
	Name       string // the guardrail's name
	Pattern    string // the pattern's name (Pattern.Name)
	Start, End int    // the match is text[Start:End]

	pat int32 // index into Matcher.patterns
}

// Matcher holds the compiled patterns of a set of guardrails. It is
// compiled once per routing version and is safe for concurrent use.
type Matcher struct {
	patterns []Pattern
	names    []string // guardrail names, by index
	labels   [][]byte // default replacement, by pattern

	builtins [numBuiltins][]int32 // patterns using each built-in
	deny     *denySet
	regex    regexSet

	hold int  // bytes a Window holds back (see Window)
	long bool // some pattern's reach exceeds windowCap
	jwt  bool // the jwt built-in is in use
}

// Compile compiles the pattern parts of the guardrails. An error names the
// guardrail and the entry at fault.
func Compile(defs []Def) (*Matcher, error) {
	m := &Matcher{names: make([]string, len(defs))}
	var rc regexCompiler
	var dc denyCompiler
	for g, d := range defs {
		m.names[g] = d.Name
		seen := map[string]bool{}
		for _, b := range d.Builtins {
			id := builtinID(b)
			if id < 0 {
				return nil, fmt.Errorf("guardrail %q: unknown built-in %q (known: %s)", d.Name, b, knownBuiltins())
			}
			if seen[b] {
				return nil, fmt.Errorf("guardrail %q: built-in %q listed twice", d.Name, b)
			}
			seen[b] = true
			m.builtins[id] = append(m.builtins[id], m.add(Pattern{Name: b, Guardrail: g, Reach: builtins[id].reach}))
		}
		for i, src := range d.Regex {
			p := m.add(Pattern{Name: "regex[" + strconv.Itoa(i) + "]", Guardrail: g})
			reach, err := rc.add(src, p)
			if err != nil {
				return nil, fmt.Errorf("guardrail %q: regex[%d]: %w", d.Name, i, err)
			}
			m.patterns[p].Reach = reach
		}
		for i, w := range d.Deny {
			p := m.add(Pattern{Name: "deny[" + strconv.Itoa(i) + "]", Guardrail: g})
			reach, err := dc.add(w, p)
			if err != nil {
				return nil, fmt.Errorf("guardrail %q: deny[%d]: %w", d.Name, i, err)
			}
			m.patterns[p].Reach = reach
		}
	}
	m.regex = rc.build()
	m.deny = dc.build()
	m.jwt = m.builtins[builtinJWT] != nil
	m.window()
	m.labelPatterns()
	return m, nil
}

// add appends p to the pattern table and returns its index.
func (m *Matcher) add(p Pattern) int32 {
	m.patterns = append(m.patterns, p)
	return int32(len(m.patterns) - 1)
}

// labelPatterns gives each pattern its default replacement:
// [REDACTED:<built-in>] for built-ins, [REDACTED:<guardrail>] for regex
// and deny entries, falling back to [REDACTED] and then to nothing when a
// label would itself match (a deny word "redacted"), so that Redact leaves
// no match behind.
func (m *Matcher) labelPatterns() {
	m.labels = make([][]byte, len(m.patterns))
	for i, p := range m.patterns {
		name := p.Name
		if strings.HasPrefix(name, "regex[") || strings.HasPrefix(name, "deny[") {
			name = m.names[p.Guardrail]
		}
		for _, l := range []string{"[REDACTED:" + name + "]", "[REDACTED]", ""} {
			if l == "" || !m.Any([]byte(l)) {
				m.labels[i] = []byte(l)
				break
			}
		}
	}
}

// Patterns returns the compiled patterns, indexed as Compile numbered
// them. The slice must not be modified.
func (m *Matcher) Patterns() []Pattern { return m.patterns }

// Label returns the default replacement of a match: [REDACTED:<built-in>]
// for built-ins and [REDACTED:<guardrail name>] for regex and deny entries
// (or a shorter label when that one would itself match). The slice must not
// be modified.
func (m *Matcher) Label(x Match) []byte {
	if int(x.pat) < len(m.labels) && m.patterns[x.pat].Name == x.Pattern {
		return m.labels[x.pat]
	}
	return []byte("[REDACTED]")
}

// Any reports whether any pattern matches text. It stops at the first
// match and allocates nothing.
func (m *Matcher) Any(text []byte) bool {
	s := scan{m: m, text: text, any: true}
	m.run(&s)
	return s.hit
}

// Scan appends the matches in text to dst and returns it. Each guardrail
// sees text as if it were alone: its matches do not overlap (where its
// patterns overlap, the leftmost-longest wins), while matches of different
// guardrails may. Matches are sorted by Start, longest first, then by
// guardrail. Scan allocates nothing when nothing matches, nor when dst has
// room for the matches (regex matches excepted: Go's regexp allocates the
// offsets it returns).
func (m *Matcher) Scan(text []byte, dst []Match) []Match {
	base := len(dst)
	s := scan{m: m, text: text, dst: dst}
	m.run(&s)
	kept := resolve(s.dst[base:])
	return s.dst[:base+len(kept)]
}

// redactPasses bounds how often Redact redacts its own result.
const redactPasses = 4

// Redact appends text to dst with every match replaced by repl(match), or
// by m.Label(match) when repl is nil, and returns dst. Overlapping matches
// (of different guardrails) are replaced together by one replacement, that
// of the leftmost-longest, so no byte of any match survives. A replacement
// can make a match where there was none (a pattern that wants a word
// boundary finds one at the replacement's bracket): Redact then redacts its
// result again, up to 4 passes in all. A replacement must not itself match.
func (m *Matcher) Redact(dst, text []byte, repl func(Match) []byte) []byte {
	if !m.Any(text) {
		return append(dst, text...)
	}
	base := len(dst)
	dst = m.Replace(dst, text, m.Scan(text, nil), repl)
	for range redactPasses - 1 {
		out := dst[base:]
		if !m.Any(out) {
			break
		}
		again := m.Replace(nil, out, m.Scan(out, nil), repl)
		dst = append(dst[:base], again...)
	}
	return dst
}

// Replace appends text to dst with the given matches replaced as Redact
// replaces them; ms must be sorted by Start, as Scan and Window return
// them.
func (m *Matcher) Replace(dst, text []byte, ms []Match, repl func(Match) []byte) []byte {
	last := 0
	for i := 0; i < len(ms); {
		x := ms[i]
		end := x.End
		j := i + 1
		for j < len(ms) && ms[j].Start < end {
			end = max(end, ms[j].End)
			j++
		}
		i = j
		if end <= last || x.Start > len(text) || end > len(text) {
			continue
		}
		dst = append(dst, text[last:max(last, x.Start)]...)
		if repl != nil {
			dst = append(dst, repl(x)...)
		} else {
			dst = append(dst, m.Label(x)...)
		}
		last = end
	}
	return append(dst, text[last:]...)
}

// scan is one pass over a text: where matches go, or whether one was seen.
type scan struct {
	m    *Matcher
	text []byte
	dst  []Match
	any  bool // stop at the first match
	hit  bool
}

// emit records text[start:end] as a match of each of the patterns.
func (s *scan) emit(pats []int32, start, end int) {
	if s.any {
		s.hit = true
		return
	}
	for _, p := range pats {
		pt := &s.m.patterns[p]
		s.dst = append(s.dst, Match{
			Guardrail: pt.Guardrail, Name: s.m.names[pt.Guardrail], Pattern: pt.Name,
			Start: start, End: end, pat: p,
		})
	}
}

// run feeds s every match of every pattern, cheapest prefilters first so
// Any returns early.
func (m *Matcher) run(s *scan) {
	for _, id := range scanOrder {
		pats := m.builtins[id]
		if pats == nil {
			continue
		}
		for from := 0; ; {
			start, end := findBuiltin(id, s.text, from)
			if start < 0 {
				break
			}
			s.emit(pats, start, end)
			if s.hit {
				return
			}
			from = end
		}
	}
	if m.deny != nil {
		m.deny.scan(s)
		if s.hit {
			return
		}
	}
	m.regex.scan(s)
}

// resolve drops, per guardrail, the matches that overlap an earlier or
// longer one of the same guardrail, in place, and sorts the rest by start.
func resolve(ms []Match) []Match {
	if len(ms) < 2 {
		return ms
	}
	slices.SortFunc(ms, func(a, b Match) int {
		return cmp.Or(cmp.Compare(a.Guardrail, b.Guardrail), cmp.Compare(a.Start, b.Start),
			cmp.Compare(b.End, a.End), cmp.Compare(a.pat, b.pat))
	})
	out := ms[:0]
	lastG, lastEnd := -1, 0
	for _, x := range ms {
		if x.Guardrail != lastG {
			lastG, lastEnd = x.Guardrail, 0
		} else if x.Start < lastEnd {
			continue
		}
		out = append(out, x)
		lastEnd = x.End
	}
	slices.SortFunc(out, func(a, b Match) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(b.End, a.End),
			cmp.Compare(a.Guardrail, b.Guardrail))
	})
	return out
}
