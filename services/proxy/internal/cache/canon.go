package cache

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"switchyard.dev/shared/jsonfield"
)

// Canonical is body with its keys sorted at every level, no insignificant
// white space, strings in one form (as strconv.Quote writes them, escapes
// decoded first), numbers in one form (an integer as digits, any other
// number as the shortest form that reads back the same float64: 1.0, 1e0
// and 1 are one number), and the ignored fields (and "user" unless
// withUser) left out at the top level; of a key given twice, the last
// counts. Two bodies with the same Canonical ask the same question.
func Canonical(body []byte, withUser bool) ([]byte, error) {
	c := canonPool.Get().(*canonicaliser)
	defer canonPool.Put(c)
	c.out = c.out[:0]
	if err := c.body(body, withUser); err != nil {
		return nil, err
	}
	return append([]byte(nil), c.out...), nil
}

// A canonicaliser reads a body in one pass into a tree of its values
// (each scalar already in its one form, in vals), then writes the tree
// into out with each object's members in key order: linear in the body,
// however deep, and no allocation once its buffers have grown.
type canonicaliser struct {
	src      []byte
	pos      int
	withUser bool // "user" is part of the key
	out      []byte
	vals     []byte  // the scalars, each in its one form
	keys     []byte  // the decoded keys of the objects
	str      []byte  // a string value being decoded
	nodes    []node  // the values read
	kids     []int32 // the children of each object and array, contiguous
	stack    []int32 // the children of the containers being read
}

// node is one value of a body: a scalar (vals[a:b]), or an object or an
// array (its children kids[a:b]); an object member keeps its key
// (keys[k0:k1]).
type node struct {
	kind   byte // 's', 'o' or 'a'
	a, b   int
	k0, k1 int
}

var canonPool = sync.Pool{New: func() any { return &canonicaliser{out: make([]byte, 0, 2048)} }}

// keepBuffers bounds the buffers a pooled canonicaliser keeps: one that
// read a larger body is let go.
const keepBuffers = 1 << 20

func putCanonicaliser(c *canonicaliser) {
	if cap(c.out) <= keepBuffers && cap(c.vals) <= keepBuffers {
		canonPool.Put(c)
	}
}

// maxDepth bounds the nesting of a body (encoding/json's own bound).
const maxDepth = 10000

var (
	errSyntax   = errors.New("cache: the body is not valid JSON")
	errNotObj   = errors.New("cache: the body is not a JSON object")
	errTrailing = errors.New("cache: trailing data after the body")
	errNumber   = errors.New("cache: a number out of range")
)

// body appends the canonical form of src to out.
func (c *canonicaliser) body(src []byte, withUser bool) error {
	c.src, c.pos, c.withUser = src, 0, withUser
	c.vals, c.keys, c.nodes, c.kids, c.stack = c.vals[:0], c.keys[:0], c.nodes[:0], c.kids[:0], c.stack[:0]
	defer func() { c.src = nil }()
	c.space()
	if c.pos >= len(c.src) {
		return errSyntax
	}
	if c.src[c.pos] != '{' {
		return errNotObj
	}
	root, err := c.object(1, true)
	if err != nil {
		return err
	}
	c.space()
	if c.pos < len(c.src) {
		return errTrailing
	}
	c.write(root)
	return nil
}

// write appends node i in its canonical form to out.
func (c *canonicaliser) write(i int32) {
	n := &c.nodes[i]
	switch n.kind {
	case 's':
		c.out = append(c.out, c.vals[n.a:n.b]...)
	case 'o':
		c.out = append(c.out, '{')
		for j, k := range c.kids[n.a:n.b] {
			if j > 0 {
				c.out = append(c.out, ',')
			}
			m := &c.nodes[k]
			c.out = strconv.AppendQuote(c.out, unsafeString(c.keys[m.k0:m.k1]))
			c.out = append(c.out, ':')
			c.write(k)
		}
		c.out = append(c.out, '}')
	case 'a':
		c.out = append(c.out, '[')
		for j, k := range c.kids[n.a:n.b] {
			if j > 0 {
				c.out = append(c.out, ',')
			}
			c.write(k)
		}
		c.out = append(c.out, ']')
	}
}

func (c *canonicaliser) space() {
	for c.pos < len(c.src) {
		switch c.src[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// value reads the value at pos: its node.
func (c *canonicaliser) value(depth int) (int32, error) {
	if depth > maxDepth {
		return 0, errSyntax
	}
	c.space()
	if c.pos >= len(c.src) {
		return 0, errSyntax
	}
	switch ch := c.src[c.pos]; {
	case ch == '{':
		return c.object(depth, false)
	case ch == '[':
		return c.array(depth)
	}
	a := len(c.vals)
	if err := c.scalar(); err != nil {
		return 0, err
	}
	c.nodes = append(c.nodes, node{kind: 's', a: a, b: len(c.vals)})
	return int32(len(c.nodes) - 1), nil
}

// scalar reads the string, number or literal at pos into vals.
func (c *canonicaliser) scalar() error {
	switch ch := c.src[c.pos]; {
	case ch == '"':
		c.str = c.str[:0]
		var err error
		if c.str, err = c.decode(c.str); err != nil {
			return err
		}
		c.vals = strconv.AppendQuote(c.vals, unsafeString(c.str))
		return nil
	case ch == '-' || ('0' <= ch && ch <= '9'):
		return c.number()
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(c.src)-c.pos >= len(lit) && string(c.src[c.pos:c.pos+len(lit)]) == lit {
			c.vals = append(c.vals, lit...)
			c.pos += len(lit)
			return nil
		}
	}
	return errSyntax
}

// object reads the object at pos (top: the body's, whose ignored members
// are left out): its node, its members in key order.
func (c *canonicaliser) object(depth int, top bool) (int32, error) {
	base := len(c.stack)
	if c.enter('}') {
		return c.container('o', base), nil
	}
	for {
		c.space()
		if c.pos >= len(c.src) || c.src[c.pos] != '"' {
			return 0, errSyntax
		}
		k0 := len(c.keys)
		var err error
		if c.keys, err = c.decode(c.keys); err != nil {
			return 0, err
		}
		k1 := len(c.keys)
		c.space()
		if c.pos >= len(c.src) || c.src[c.pos] != ':' {
			return 0, errSyntax
		}
		c.pos++
		v, err := c.value(depth + 1)
		if err != nil {
			return 0, err
		}
		if top && c.leftOut(unsafeString(c.keys[k0:k1])) {
			c.keys = c.keys[:k0]
		} else {
			c.nodes[v].k0, c.nodes[v].k1 = k0, k1
			c.stack = append(c.stack, v)
		}
		if more, err := c.more('}'); err != nil {
			return 0, err
		} else if !more {
			break
		}
	}
	c.order(base)
	return c.container('o', base), nil
}

func (c *canonicaliser) array(depth int) (int32, error) {
	base := len(c.stack)
	if c.enter(']') {
		return c.container('a', base), nil
	}
	for {
		v, err := c.value(depth + 1)
		if err != nil {
			return 0, err
		}
		c.stack = append(c.stack, v)
		if more, err := c.more(']'); err != nil {
			return 0, err
		} else if !more {
			return c.container('a', base), nil
		}
	}
}

// enter steps into the object or array at pos ('{' or '['), and over the
// white space after it; it reports whether the container closes at once
// (end: its closing byte), stepping over that too.
func (c *canonicaliser) enter(end byte) bool {
	c.pos++
	c.space()
	if c.pos < len(c.src) && c.src[c.pos] == end {
		c.pos++
		return true
	}
	return false
}

// more reads what follows a member of a container: a comma (more: true)
// or its closing byte end (false); anything else is a syntax error.
func (c *canonicaliser) more(end byte) (bool, error) {
	c.space()
	if c.pos >= len(c.src) {
		return false, errSyntax
	}
	switch c.src[c.pos] {
	case ',':
		c.pos++
		return true, nil
	case end:
		c.pos++
		return false, nil
	}
	return false, errSyntax
}

// container makes the node of an object or array whose children are
// stack[base:], moving them to kids.
func (c *canonicaliser) container(kind byte, base int) int32 {
	a := len(c.kids)
	c.kids = append(c.kids, c.stack[base:]...)
	c.stack = c.stack[:base]
	c.nodes = append(c.nodes, node{kind: kind, a: a, b: len(c.kids)})
	return int32(len(c.nodes) - 1)
}

// leftOut reports whether a top-level member is not part of the key.
func (c *canonicaliser) leftOut(key string) bool {
	return slices.Contains(ignored, key) || (key == "user" && !c.withUser)
}

// key is member node i's key.
func (c *canonicaliser) key(i int32) string {
	n := &c.nodes[i]
	return unsafeString(c.keys[n.k0:n.k1])
}

// order puts the members of the object being read (stack[base:]) in key
// order; of equal keys only the last stays.
func (c *canonicaliser) order(base int) {
	ms := c.stack[base:]
	sorted := true
	for i := 1; i < len(ms) && sorted; i++ {
		sorted = c.key(ms[i-1]) < c.key(ms[i])
	}
	if sorted {
		return
	}
	slices.SortStableFunc(ms, func(a, b int32) int { return strings.Compare(c.key(a), c.key(b)) })
	w := 0
	for i, m := range ms {
		if i+1 < len(ms) && c.key(ms[i+1]) == c.key(m) {
			continue // a later member of the same key counts
		}
		ms[w] = m
		w++
	}
	c.stack = c.stack[:base+w]
}

// decode reads the string at pos and appends its decoded text to dst:
// escapes decoded, a lone surrogate or a byte that is not UTF-8 as
// U+FFFD (as encoding/json reads them).
func (c *canonicaliser) decode(dst []byte) ([]byte, error) {
	end := c.pos + 1
	for ; end < len(c.src) && c.src[end] != '"'; end++ {
		switch ch := c.src[end]; {
		case ch == '\\':
			end++ // what it escapes: checked by AppendUnquoted
		case ch < 0x20:
			return dst, errSyntax
		}
	}
	if end >= len(c.src) {
		return dst, errSyntax
	}
	raw := c.src[c.pos : end+1]
	c.pos = end + 1
	n := len(dst)
	dst, ok := jsonfield.AppendUnquoted(dst, raw)
	if !ok {
		return dst, errSyntax
	}
	if !utf8.Valid(dst[n:]) { // (the gateway refuses such bodies before)
		dst = append(dst[:n], string([]rune(string(dst[n:])))...) // each bad byte as U+FFFD
	}
	return dst, nil
}

// number reads a JSON number and writes it in its one form.
func (c *canonicaliser) number() error {
	p := c.pos
	if p < len(c.src) && c.src[p] == '-' {
		p++
	}
	switch {
	case p < len(c.src) && c.src[p] == '0':
		p++
	case p < len(c.src) && '1' <= c.src[p] && c.src[p] <= '9':
		for p < len(c.src) && '0' <= c.src[p] && c.src[p] <= '9' {
			p++
		}
	default:
		return errSyntax
	}
	if p < len(c.src) && c.src[p] == '.' {
		p++
		d := p
		for p < len(c.src) && '0' <= c.src[p] && c.src[p] <= '9' {
			p++
		}
		if p == d {
			return errSyntax
		}
	}
	if p < len(c.src) && (c.src[p] == 'e' || c.src[p] == 'E') {
		p++
		if p < len(c.src) && (c.src[p] == '+' || c.src[p] == '-') {
			p++
		}
		d := p
		for p < len(c.src) && '0' <= c.src[p] && c.src[p] <= '9' {
			p++
		}
		if p == d {
			return errSyntax
		}
	}
	num := unsafeString(c.src[c.pos:p])
	integer := !strings.ContainsAny(num, ".eE")
	c.pos = p
	if integer {
		// Under 19 digits it fits an int64 (no error to make); longer,
		// it may not: then it is read as a float64.
		if n, err := strconv.ParseInt(num, 10, 64); len(num) < 19 || err == nil {
			c.vals = strconv.AppendInt(c.vals, n, 10)
			return nil
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsInf(f, 0) {
		return errNumber
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		c.vals = strconv.AppendInt(c.vals, int64(f), 10)
		return nil
	}
	c.vals = strconv.AppendFloat(c.vals, f, 'g', -1, 64)
	return nil
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
