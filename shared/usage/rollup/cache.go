package rollup

import "sync"

// Cache keeps decoded values by key and revision, so that a report
// decodes a stored value once, not at every read: a value's JSON (its
// cells and their sketches) is most of a report's cost, and the values of
// past buckets rarely change. A value read again at the same revision is
// the one decoded before; one at another revision replaces it. The values
// it hands out are shared: readers must not change them (the report's
// sums merge from them into sums of their own). It is safe for
// concurrent use.
type Cache struct {
	mu  sync.Mutex
	max int
	m   map[string]cached
}

type cached struct {
	rev uint64
	v   *Value
}

// DefaultCacheValues bounds a Cache: about two years of day values of a
// few providers, 90 days of hour values of a few, and their parts.
const DefaultCacheValues = 50_000

// NewCache returns a Cache of at most max values (0: DefaultCacheValues).
// Past it, it starts over empty.
func NewCache(max int) *Cache {
	if max <= 0 {
		max = DefaultCacheValues
	}
	return &Cache{max: max, m: map[string]cached{}}
}

// get returns the value of key decoded at revision rev, if kept.
func (c *Cache) get(key string, rev uint64) (*Value, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || e.rev != rev {
		return nil, false
	}
	return e.v, true
}

// put keeps v as key's value at revision rev.
func (c *Cache) put(key string, rev uint64, v *Value) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[key] = cached{rev, v}
}

// Len is the number of values kept.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
