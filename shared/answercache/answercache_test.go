package answercache

import (
	"strings"
	"testing"
)

// TestKeys: a key's route and scope read back from it, whatever they
// hold; filters select by route and by scope.
func TestKeys(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	for _, c := range []struct{ route, scope string }{
		{"chain:demo-chat", "team"}, {"openai/gpt-4.1", SharedScope}, {"a.b", "_"}, {"x=y", "c-1"},
	} {
		key := KeyPrefix(c.route, c.scope) + sum
		r, s, ok := Parts(key)
		if !ok || r != c.route || s != c.scope || strings.Count(key, ".") != 2 {
			t.Errorf("%+v: key %q reads back %q %q %v", c, key, r, s, ok)
		}
	}
	if f := Filter("chain:demo-chat", ""); f != "chain=3Ademo-chat.*.*" {
		t.Errorf("filter %q", f)
	}
	if f := Filter("", ""); f != "*.*.*" {
		t.Errorf("filter %q", f)
	}
	for _, bad := range []string{"a.b", "a.b.c", "a.b.c." + sum} {
		if _, _, ok := Parts(bad); ok {
			t.Errorf("%q read as a key", bad)
		}
	}
	if _, err := Decode([]byte(`{"v":2,"answer":{}}`)); err == nil {
		t.Error("another schema version decoded")
	}
}
