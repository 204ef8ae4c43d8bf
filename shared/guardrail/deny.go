package guardrail

import (
	"bytes"
	"errors"
	"strings"
)

// maxDeny is the longest deny entry, in bytes.
const maxDeny = 200

// denyWord is one distinct deny entry, normalised: ASCII lower case, runs
// of white space as one space.
type denyWord struct {
	w                    string
	pats                 []int32 // the patterns (of any guardrail) that list it
	boundStart, boundEnd bool    // starts or ends with a word character
	spaced               bool
}

// denyCompiler gathers the deny entries of all guardrails.
type denyCompiler struct {
	index map[string]int
	words []denyWord
}

// add adds a deny entry for pattern pat and returns its reach.
func (c *denyCompiler) add(entry string, pat int32) (int, error) {
	w := asciiLower(strings.Join(strings.Fields(entry), " "))
	switch {
	case w == "":
		return 0, errors.New("empty")
	case len(w) > maxDeny:
		return 0, errors.New("longer than 200 bytes")
	}
	if c.index == nil {
		c.index = map[string]int{}
	}
	i, ok := c.index[w]
	if !ok {
		i = len(c.words)
		c.index[w] = i
		c.words = append(c.words, denyWord{
			w:          w,
			boundStart: wordAfter([]byte(w), 0),
			boundEnd:   wordBefore([]byte(w), len(w)),
			spaced:     strings.IndexByte(w, ' ') >= 0,
		})
	}
	c.words[i].pats = append(c.words[i].pats, pat)
	if c.words[i].spaced {
		return -1, nil // white space runs have no bound
	}
	return len(w) + 4, nil
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c-'A' < 26 {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// denySet finds all deny entries in one pass: an Aho-Corasick automaton
// over byte classes (ASCII letters folded, bytes no entry uses in one
// class), as a full transition table. In the root state it skips to the
// next byte that can start an entry: with bytes.IndexByte when few bytes
// can, with a table otherwise.
type denySet struct {
	words  []denyWord
	class  [256]uint8
	nclass int
	// rows[r+class] is the row (state*nclass) of the next state, or its
	// complement when an entry ends there.
	rows   []int32
	out    []int32 // by state: the word ending there, or -1
	link   []int32 // by state: nearest proper suffix state with a word, or -1
	first  [256]bool
	firsts []byte // the bytes that can start an entry, when at most 4
	spaces bool   // some entry has a space: runs of white space count as one
	space  uint8  // the class of white space
}

func (c *denyCompiler) build() *denySet {
	if len(c.words) == 0 {
		return nil
	}
	d := &denySet{words: c.words}
	k := uint8(1)
	for _, w := range c.words {
		for _, b := range []byte(w.w) {
			if d.class[b] != 0 {
				continue
			}
			switch {
			case isLetter(b):
				d.class[b], d.class[b-'a'+'A'] = k, k
			case b == ' ':
				d.spaces, d.space = true, k
				for _, s := range []byte(" \t\n\r\v\f") {
					d.class[s] = k
				}
			default:
				d.class[b] = k
			}
			k++
		}
	}
	n := int(k)
	d.nclass = n
	var next []int32 // state*n+class -> state, -1 before the links are set
	newState := func() int32 {
		for range n {
			next = append(next, -1)
		}
		d.out = append(d.out, -1)
		return int32(len(d.out) - 1)
	}
	newState()
	for wi, w := range c.words {
		st := int32(0)
		for _, b := range []byte(w.w) {
			at := int(st)*n + int(d.class[b])
			if next[at] < 0 {
				s := newState()
				next[at] = s
			}
			st = next[at]
		}
		d.out[st] = int32(wi)
	}
	// Breadth first: failure links, dictionary links and the full table.
	fail := make([]int32, len(d.out))
	d.link = make([]int32, len(d.out))
	d.link[0] = -1
	var queue []int32
	for cl := range n {
		if v := next[cl]; v < 0 {
			next[cl] = 0
		} else {
			queue = append(queue, v)
		}
	}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		f := fail[u]
		if d.out[f] >= 0 {
			d.link[u] = f
		} else {
			d.link[u] = d.link[f]
		}
		for cl := range n {
			at := int(u)*n + cl
			if v := next[at]; v < 0 {
				next[at] = next[int(f)*n+cl]
			} else {
				fail[v] = next[int(f)*n+cl]
				queue = append(queue, v)
			}
		}
	}
	d.rows = make([]int32, len(next))
	for at, st := range next {
		d.rows[at] = st * int32(n)
		if d.out[st] >= 0 || d.link[st] >= 0 {
			d.rows[at] = ^d.rows[at]
		}
	}
	for b := range 256 {
		if d.rows[d.class[b]] != 0 {
			d.first[b] = true
			d.firsts = append(d.firsts, byte(b))
		}
	}
	if len(d.firsts) > 4 {
		d.firsts = nil
	}
	return d
}

// skip returns the first index at or after i of a byte that can start an
// entry, or len(text); pos caches the next index of each of d.firsts.
func (d *denySet) skip(text []byte, i int, pos *[4]int) int {
	if d.firsts == nil {
		for i < len(text) && !d.first[text[i]] {
			i++
		}
		return i
	}
	best := len(text)
	for k, b := range d.firsts {
		if pos[k] < i {
			if j := bytes.IndexByte(text[i:], b); j < 0 {
				pos[k] = len(text)
			} else {
				pos[k] = i + j
			}
		}
		best = min(best, pos[k])
	}
	return best
}

// scan reports every occurrence of every entry in s.text that stands on
// word boundaries.
func (d *denySet) scan(s *scan) {
	text, n := s.text, d.nclass
	pos := [4]int{-1, -1, -1, -1}
	r := int32(0) // the current state's row
	prevSpace := false
	for i := 0; i < len(text); i++ {
		if r == 0 {
			if i = d.skip(text, i, &pos); i == len(text) {
				return
			}
			prevSpace = false
		}
		c := d.class[text[i]]
		if d.spaces {
			if c == d.space {
				if prevSpace {
					continue
				}
				prevSpace = true
			} else {
				prevSpace = false
			}
		}
		if r = d.rows[int(r)+int(c)]; r < 0 {
			r = ^r
			d.report(s, i+1, r/int32(n))
			if s.hit {
				return
			}
		}
	}
}

// report emits the entries that end at text[end] in state st.
func (d *denySet) report(s *scan, end int, st int32) {
	t := st
	if d.out[t] < 0 {
		t = d.link[t]
	}
	for ; t >= 0; t = d.link[t] {
		w := &d.words[d.out[t]]
		start := end - len(w.w)
		if w.spaced {
			start = end
			for k := len(w.w) - 1; k >= 0; k-- {
				if w.w[k] != ' ' {
					start--
					continue
				}
				for start > 0 && isSpace(s.text[start-1]) {
					start--
				}
			}
		}
		if w.boundStart && wordBefore(s.text, start) || w.boundEnd && wordAfter(s.text, end) {
			continue
		}
		s.emit(w.pats, start, end)
		if s.hit {
			return
		}
	}
}
