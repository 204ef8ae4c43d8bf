package route

import (
	"testing"
)

// TestChainTwin: a chain's two names are twins only while the bare name
// resolves to the chain (no model or alias has it).
func TestChainTwin(t *testing.T) {
	cfg := testConfig()
	cfg.Chains["shared"] = cfg.Chains["main"] // "shared" is a plain model name too
	cfg.Chains["smart"] = cfg.Chains["main"]  // and "smart" an alias
	tab, err := Build(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, in, twin, counted string }{
		{"bare", "main", "chain:main", "chain:main"},
		{"prefixed", "chain:main", "main", "chain:main"},
		{"bare name of a model", "shared", "", "shared"},
		{"chain shadowed by a model", "chain:shared", "", "chain:shared"},
		{"alias of a chain", "smart", "", "smart"},
		{"plain model", "gpt-4.1", "", "gpt-4.1"},
		{"unknown", "nope", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tab.ChainTwin(tt.in); got != tt.twin {
				t.Errorf("ChainTwin(%q) = %q, want %q", tt.in, got, tt.twin)
			}
			if rt, ok := tab.Resolve(tt.in); ok && rt.CountedAs(tt.in) != tt.counted {
				t.Errorf("CountedAs(%q) = %q, want %q", tt.in, rt.CountedAs(tt.in), tt.counted)
			}
		})
	}
	listed := map[string]int{}
	for _, n := range tab.Names {
		listed[n.ID]++
	}
	for id, want := range map[string]int{"main": 1, "chain:main": 1, "shared": 1, "smart": 1, "chain:smart": 1} {
		if listed[id] != want {
			t.Errorf("%s listed %d times, want %d", id, listed[id], want)
		}
	}
}
