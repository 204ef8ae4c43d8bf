package headroom

// Collected is a Header of the few headers Parse reads, gathered in one
// pass over an answer's headers (Add for each; the rest are dropped), for
// header sets whose own lookup costs a scan per name (fasthttp's Peek
// normalises the name and walks every header, and a dialect asks up to 14
// names). It holds the slices it was given: use it while they are valid
// (within the handler of the answer), and do not modify them.
type Collected struct {
	keys, vals [maxCollected][]byte
	n          int
}

// Reset empties c for another answer, letting go of its slices.
func (c *Collected) Reset() {
	clear(c.keys[:c.n])
	clear(c.vals[:c.n])
	c.n = 0
}

// maxCollected bounds a Collected: every dialect's names and both
// retry-after forms fit; an answer with more rate-limit headers keeps the
// first.
const maxCollected = 16

// Add keeps key and value when key is a header Parse may read: one
// beginning with x-ratelimit- or anthropic-ratelimit-, or retry-after(-ms),
// in any case.
func (c *Collected) Add(key, value []byte) {
	if c.n == maxCollected || !relevant(key) {
		return
	}
	c.keys[c.n], c.vals[c.n] = key, value
	c.n++
}

// Peek implements Header: the value of the first header added under key
// (ASCII case-insensitive), nil when none was.
func (c *Collected) Peek(key string) []byte {
	for i := range c.n {
		if equalFold(c.keys[i], key) {
			return c.vals[i]
		}
	}
	return nil
}

func relevant(key []byte) bool {
	return hasPrefixFold(key, "x-ratelimit-") || hasPrefixFold(key, "anthropic-ratelimit-") ||
		equalFold(key, "retry-after") || equalFold(key, "retry-after-ms")
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && equalFold(b[:len(prefix)], prefix)
}

// equalFold is ASCII case-insensitive equality of b and s.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if x != y && lower(x) != lower(y) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
