package route

import (
	"slices"
	"testing"

	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/provider"
)

type denyKeys map[string]bool

func (d denyKeys) Admit(_, keyID, _ string) hold.Admission {
	if d[keyID] {
		return hold.Deny
	}
	return hold.Admit
}

// order walks a route's candidates for a chat request, as a request whose
// every attempt fails would.
func order(rt *Route, req *Request) []string {
	var c Cursor
	rt.Start(&c, req)
	var out []string
	for st, _ := c.Next(); st != nil; st, _ = c.Next() {
		out = append(out, st.Provider.Name+"/"+st.Model)
		c.Progress()
	}
	return out
}

// orderUntried is order when no step could be tried (every key held).
func orderUntried(rt *Route, req *Request) []string {
	var c Cursor
	rt.Start(&c, req)
	var out []string
	for st, _ := c.Next(); st != nil; st, _ = c.Next() {
		out = append(out, st.Provider.Name+"/"+st.Model)
	}
	return out
}

func ids(ns []ModelName) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.ID)
	}
	return out
}

func TestHealthMakesTargetsLessPreferred(t *testing.T) {
	tab, err := Build(testConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	set := func(offline []string, sick map[string]bool) {
		tab.SetHealth(func(p string) Health {
			if slices.Contains(offline, p) {
				return HealthOffline
			}
			return HealthHealthy
		}, func(p, k string) bool { return sick[p+"/"+k] })
	}
	tests := []struct {
		name        string
		offline     []string
		sick        map[string]bool
		shared      []string // candidates of "shared" when every attempt fails
		untried     []string // when no step could be tried
		hiddenIDs   []string
		visibleAlso []string
	}{
		{name: "all healthy", shared: []string{"oa/shared", "an/shared"}, untried: []string{"oa/shared", "an/shared"}},
		{name: "oa offline: skipped while an serves, its own models are hidden", offline: []string{"oa"},
			shared: []string{"an/shared"}, untried: []string{"an/shared", "oa/shared"},
			hiddenIDs:   []string{"oa/gpt-4.1", "oa/shared", "gpt-4.1", "chain:main"},
			visibleAlso: []string{"shared", "an/claude"}},
		{name: "every provider offline: tried in order, nothing hidden", offline: []string{"oa", "an"},
			shared: []string{"oa/shared", "an/shared"}, untried: []string{"oa/shared", "an/shared"},
			visibleAlso: []string{"oa/shared", "an/claude"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set(tt.offline, tt.sick)
			rt, _ := tab.Resolve("shared")
			req := &Request{Op: provider.OpChat}
			if got := order(rt, req); !slices.Equal(got, tt.shared) {
				t.Fatalf("shared = %v, want %v", got, tt.shared)
			}
			if got := orderUntried(rt, req); !slices.Equal(got, tt.untried) {
				t.Fatalf("shared, nothing tried = %v, want %v", got, tt.untried)
			}
			vis := ids(tab.VisibleNames())
			for _, h := range tt.hiddenIDs {
				if slices.Contains(vis, h) {
					t.Errorf("%s listed: %v", h, vis)
				}
			}
			for _, v := range tt.visibleAlso {
				if !slices.Contains(vis, v) {
					t.Errorf("%s not listed: %v", v, vis)
				}
			}
		})
	}

	// A sick key is tried after the healthy ones, even of lower priority;
	// a held key stays held whatever its health.
	set(nil, map[string]bool{"oa/hi1": true, "oa/hi2": true})
	oa := tab.Providers[0]
	if k, _ := oa.Pick("gpt-4.1", NoHolds{}, 0, nil); k.ID != "low" {
		t.Fatalf("picked %s, want the healthy low-priority key", k.ID)
	}
	if k, _ := oa.Pick("gpt-4.1", denyKeys{"low": true}, 0, nil); k == nil || k.ID == "low" {
		t.Fatalf("picked %v, want a sick key once the healthy one is held", k)
	}
	if k, _ := oa.Pick("gpt-4.1", denyKeys{"low": true, "hi1": true, "hi2": true}, 0, nil); k != nil {
		t.Fatalf("picked %s: health brought back a held key", k.ID)
	}
	set(nil, nil)
	if allocs := testing.AllocsPerRun(100, func() { oa.Pick("gpt-4.1", NoHolds{}, 0, nil); tab.ResolveBytes([]byte("shared")) }); allocs != 0 {
		t.Fatalf("%v allocations per Pick+Resolve", allocs)
	}
}
