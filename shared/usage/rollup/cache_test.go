package rollup

import "testing"

// TestCache: a value is handed out again only at the revision it was
// decoded at; past its bound the cache starts over; a nil cache keeps
// nothing.
func TestCache(t *testing.T) {
	c := NewCache(2)
	v1, v2 := &Value{Part: 1}, &Value{Part: 2}
	c.put("day.1.openai.0", 7, v1)
	if got, ok := c.get("day.1.openai.0", 7); !ok || got != v1 {
		t.Fatalf("same revision: %v %v", got, ok)
	}
	if _, ok := c.get("day.1.openai.0", 8); ok {
		t.Fatal("another revision was handed the old value")
	}
	c.put("day.1.openai.0", 8, v2)
	if got, ok := c.get("day.1.openai.0", 8); !ok || got != v2 {
		t.Fatalf("replaced: %v %v", got, ok)
	}
	c.put("day.2.openai.0", 1, v1)
	c.put("day.3.openai.0", 1, v2) // the third: over the bound of 2
	if n := c.Len(); n != 1 {
		t.Fatalf("%d values after the bound, want 1 (started over)", n)
	}
	var none *Cache
	none.put("k", 1, v1)
	if _, ok := none.get("k", 1); ok {
		t.Fatal("a nil cache kept a value")
	}
}
