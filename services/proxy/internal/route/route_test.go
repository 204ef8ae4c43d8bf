package route

import (
	"testing"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
)

func testConfig() *config.Config {
	cfg := config.Defaults()
	cfg.Providers = []config.Provider{
		{
			Name: "oa", Type: "openai", Selection: "round_robin",
			Keys: []config.Key{
				{ID: "low", Priority: 0, Weight: 1, Value: config.NewSecret("s-low")},
				{ID: "hi1", Priority: 5, Weight: 1, Value: config.NewSecret("s-hi1")},
				{ID: "hi2", Priority: 5, Weight: 1, Value: config.NewSecret("s-hi2")},
			},
			Models: []config.Model{{Name: "gpt-4.1", Kind: "chat"}, {Name: "shared", Kind: "chat"}},
		},
		{
			Name: "an", Type: "anthropic", Selection: "weighted",
			Keys: []config.Key{
				{ID: "w3", Weight: 3, Value: config.NewSecret("s-w3")},
				{ID: "w1", Weight: 1, Value: config.NewSecret("s-w1")},
			},
			Models: []config.Model{{Name: "claude", Upstream: "claude-sonnet-4-5", Kind: "chat"}, {Name: "shared", Kind: "chat"}},
		},
	}
	cfg.Chains = map[string]config.Chain{
		"main": {Steps: []config.ChainStep{
			{Target: "oa/gpt-4.1"},
			{Target: "an/claude", Active: ptr(false)},
			{Target: "gone/model", Unavailable: true},
		}},
	}
	cfg.Aliases = map[string]string{"smart": "chain:main", "fast": "an/claude"}
	return cfg
}

func ptr(b bool) *bool { return &b }

func TestResolve(t *testing.T) {
	tab, err := Build(testConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		model  string
		want   []string // provider/model per step, "-" for a skipped provider
		active []bool
	}{
		{"chain", "chain:main", []string{"oa/gpt-4.1", "an/claude", "-/model"}, []bool{true, false, false}},
		{"bare chain name", "main", []string{"oa/gpt-4.1", "an/claude", "-/model"}, []bool{true, false, false}},
		{"alias to chain", "smart", []string{"oa/gpt-4.1", "an/claude", "-/model"}, []bool{true, false, false}},
		{"alias to target", "fast", []string{"an/claude"}, []bool{true}},
		{"provider/model", "an/shared", []string{"an/shared"}, []bool{true}},
		{"plain name, config order", "shared", []string{"oa/shared", "an/shared"}, []bool{true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, ok := tab.Resolve(tt.model)
			if !ok {
				t.Fatal("not resolved")
			}
			steps := rt.Steps
			if len(steps) != len(tt.want) {
				t.Fatalf("%d steps, want %d", len(steps), len(tt.want))
			}
			for i, s := range steps {
				p := "-"
				if s.Provider != nil {
					p = s.Provider.Name
				}
				if got := p + "/" + s.Model; got != tt.want[i] {
					t.Errorf("step %d = %s, want %s", i, got, tt.want[i])
				}
				if s.Usable() != tt.active[i] {
					t.Errorf("step %d usable = %v", i, s.Usable())
				}
			}
		})
	}
	if rt, _ := tab.Resolve("fast"); rt.Steps[0].Upstream != "claude-sonnet-4-5" {
		t.Errorf("upstream name %q", rt.Steps[0].Upstream)
	}
	if _, ok := tab.Resolve("nope"); ok {
		t.Error("unknown model resolved")
	}
}

type heldKeys map[string]bool

func (h heldKeys) Admit(_, key, _ string) hold.Admission {
	if h[key] {
		return hold.Deny
	}
	return hold.Admit
}

func pick(p *Provider, model string, gate Admitter, tried uint64) *Key {
	k, _ := p.Pick(model, gate, tried, nil)
	return k
}

func TestPickPriorityAndRoundRobin(t *testing.T) {
	tab, err := Build(testConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	oa := tab.Providers[0]
	counts := map[string]int{}
	for i := 0; i < 10; i++ {
		counts[pick(oa, "gpt-4.1", NoHolds{}, 0).ID]++
	}
	if counts["hi1"] != 5 || counts["hi2"] != 5 || counts["low"] != 0 {
		t.Errorf("picks %v, want hi1/hi2 alternating and never low", counts)
	}
	// Held keys are skipped; the lower priority is used when the higher are held.
	if k := pick(oa, "gpt-4.1", heldKeys{"hi1": true, "hi2": true}, 0); k == nil || k.ID != "low" {
		t.Errorf("picked %v, want low", k)
	}
	// Tried keys are skipped within a request.
	hi1 := oa.Keys[0]
	if hi1.ID != "hi1" {
		t.Fatalf("keys not ordered by priority: %s", hi1.ID)
	}
	var tried uint64
	seen := map[string]bool{}
	for {
		k := pick(oa, "gpt-4.1", NoHolds{}, tried)
		if k == nil {
			break
		}
		if seen[k.ID] {
			t.Fatalf("key %s picked twice", k.ID)
		}
		seen[k.ID] = true
		tried |= 1 << uint(k.Index())
	}
	if len(seen) != 3 {
		t.Errorf("tried %v, want all 3 keys", seen)
	}
}

func TestPickWeighted(t *testing.T) {
	tab, err := Build(testConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	an := tab.Providers[1]
	counts := map[string]int{}
	for i := 0; i < 400; i++ {
		counts[pick(an, "claude", NoHolds{}, 0).ID]++
	}
	if counts["w3"] != 300 || counts["w1"] != 100 {
		t.Errorf("weighted picks %v, want 300/100", counts)
	}
	// Smooth: the light key is never starved for more than 3 picks in a row.
	run := 0
	for i := 0; i < 40; i++ {
		if pick(an, "claude", NoHolds{}, 0).ID == "w3" {
			run++
			if run > 3 {
				t.Fatal("weighted wheel is bursty")
			}
		} else {
			run = 0
		}
	}
}

func TestBuildErrors(t *testing.T) {
	cfg := testConfig()
	cfg.Aliases["bad"] = "oa/missing"
	if _, err := Build(cfg, Options{}); err == nil {
		t.Error("alias to an unknown model accepted")
	}
}

func BenchmarkResolve(b *testing.B) {
	tab, err := Build(testConfig(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	name := []byte("smart")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := tab.ResolveBytes(name); !ok {
			b.Fatal("not resolved")
		}
	}
}

func BenchmarkPick(b *testing.B) {
	tab, err := Build(testConfig(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := tab.Providers[1]
	b.ReportAllocs()
	for b.Loop() {
		if pick(p, "claude", NoHolds{}, 0) == nil {
			b.Fatal("no key")
		}
	}
}

func BenchmarkPickParallel(b *testing.B) {
	tab, err := Build(testConfig(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := tab.Providers[0]
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			pick(p, "gpt-4.1", NoHolds{}, 0)
		}
	})
}

// NoHolds admits every target.
type NoHolds struct{}

// Admit implements Admitter.
func (NoHolds) Admit(string, string, string) hold.Admission { return hold.Admit }

// TestDisabledKeys: a key switched off (keys[].enabled: false) is never
// picked; a provider whose keys are all off serves nothing.
func TestDisabledKeys(t *testing.T) {
	cfg := testConfig()
	cfg.Providers[0].Keys[1].Enabled = ptr(false) // hi1
	for i := range cfg.Providers[1].Keys {
		cfg.Providers[1].Keys[i].Enabled = ptr(false)
	}
	tab, err := Build(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if k := pick(tab.Providers[0], "gpt-4.1", NoHolds{}, 0); k == nil || k.ID != "hi2" {
			t.Fatalf("picked %v, want hi2 (hi1 is off, low is lower)", k)
		}
	}
	if tab.Key("oa", "hi1") != nil {
		t.Error("a key switched off is in the table")
	}
	if k := pick(tab.Providers[1], "claude", NoHolds{}, 0); k != nil {
		t.Errorf("a provider with every key off picked %s", k.ID)
	}
}

// TestProviderModelBeatsPlainName: a provider's model named like another
// provider's provider/model id ("oa/gpt-4.1" listed by an OpenRouter-style
// provider) does not take that id over: the id names its provider, and the
// listed model stays reachable under its own provider's prefix.
func TestProviderModelBeatsPlainName(t *testing.T) {
	cfg := testConfig()
	cfg.Providers = append(cfg.Providers, config.Provider{Name: "router", Type: "openrouter",
		Keys:   []config.Key{{ID: "r", Weight: 1, Value: config.NewSecret("s-r")}},
		Models: []config.Model{{Name: "oa/gpt-4.1", Kind: "chat"}}})
	tab, err := Build(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt, ok := tab.Resolve("oa/gpt-4.1")
	if !ok || len(rt.Steps) != 1 || rt.Steps[0].Provider.Name != "oa" {
		t.Fatalf("oa/gpt-4.1 resolves to %+v", rt)
	}
	if rt, ok := tab.Resolve("router/oa/gpt-4.1"); !ok || rt.Steps[0].Provider.Name != "router" {
		t.Fatalf("router/oa/gpt-4.1 resolves to %+v", rt)
	}
	seen := map[string]int{}
	for _, n := range tab.Names {
		seen[n.ID]++
	}
	if seen["oa/gpt-4.1"] != 1 {
		t.Errorf("oa/gpt-4.1 listed %d times", seen["oa/gpt-4.1"])
	}
}

// TestUnlistedModelPolicy: a route made on demand for an unlisted model
// follows routing.fail_closed like every other route.
func TestUnlistedModelPolicy(t *testing.T) {
	cfg := testConfig()
	cfg.Providers[0].AllowUnlistedModels = true
	cfg.Routing.FailClosed = true
	tab, err := Build(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt, ok := tab.Resolve("oa/some-new-model")
	if !ok || !rt.Dynamic || !rt.Policy.FailClosed || !rt.ReadsBody {
		t.Fatalf("route %+v, %v", rt, ok)
	}
}
