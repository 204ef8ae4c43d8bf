package route

import (
	"fmt"
	"testing"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/usage"
)

const benchSteps = 50

// selectCase is one strategy over a chain of benchSteps providers (two
// keys each), with prices, latencies, health, regions and capabilities
// set so that every strategy has work to do.
type selectCase struct {
	name string
	rt   *Route
	req  *Request
}

func selectCases(tb testing.TB) []selectCase {
	tb.Helper()
	type variant struct {
		name, strategy string
		req            Request
	}
	budget := BudgetFunc(func(p string) (float64, bool) { return 100, len(p) > 0 })
	variants := []variant{
		{"priority", config.StrategyPriority, Request{}},
		{"weighted", config.StrategyWeighted, Request{}},
		{"weighted_hashed", config.StrategyWeighted, Request{Hash: Hash("conversation-42"), Hashed: true}},
		{"least_latency", config.StrategyLeastLatency, Request{}},
		{"least_cost", config.StrategyLeastCost, Request{}},
		{"health_aware", config.StrategyHealthAware, Request{}},
		{"budget_aware", config.StrategyBudgetAware, Request{Budget: budget}},
		{"region_affinity", config.StrategyRegionAffinity, Request{Region: "eu"}},
		{"capability_aware", config.StrategyCapabilityAware, Request{Needs: CapVision | CapTools}},
	}
	var out []selectCase
	for _, v := range variants {
		cfg := config.Defaults()
		explore := 0.02
		cfg.Routing.Explore = &explore
		var entries []usage.Entry
		var steps []config.ChainStep
		regions := []string{"us", "eu", "ap", ""}
		for i := range benchSteps {
			name := fmt.Sprintf("p%02d", i)
			m := config.Model{Name: "m", ContextWindow: 200_000, MaxOutput: 8192}
			if i%3 != 0 {
				m.Capabilities = []string{"vision", "tools"}
			}
			cfg.Providers = append(cfg.Providers, config.Provider{
				Name: name, Type: "openai", Region: regions[i%len(regions)],
				Keys: []config.Key{
					{ID: "a", Weight: 1, Value: config.NewSecret("s-a")},
					{ID: "b", Weight: 1, Value: config.NewSecret("s-b")},
				},
				Models: []config.Model{m},
			})
			entries = append(entries, usage.Entry{Provider: name, Model: "m",
				Price: usage.Price{Input: float64(1 + (i*7)%13), Output: float64(2 + (i*11)%17)}})
			steps = append(steps, config.ChainStep{Target: name + "/m", Weight: 1 + i%4})
		}
		cfg.Chains = map[string]config.Chain{"bench": {Strategy: v.strategy, Steps: steps}}
		tab, err := Build(cfg, Options{Prices: usage.NewTable(usage.Defaults(), entries)})
		if err != nil {
			tb.Fatal(err)
		}
		tab.SetHealth(func(p string) Health {
			switch p[len(p)-1] {
			case '3':
				return HealthDegraded
			case '7':
				return HealthOffline
			case '5':
				return HealthUnknown
			}
			return HealthHealthy
		}, func(string, string) bool { return false })
		rt, _ := tab.Resolve("chain:bench")
		for i := range rt.Steps {
			rt.Steps[i].Latency.Observe(float64(100+(i*37)%251), 0.2, int64(i+1))
		}
		req := v.req
		req.Op = provider.OpChat
		req.InputTokens, req.MaxOutput = 2000, 1000
		out = append(out, selectCase{v.name, rt, &req})
	}
	return out
}

// selectOnce is one request's selection: Start, the first candidate and
// its key.
func selectOnce(rt *Route, req *Request) *Key {
	var c Cursor
	rt.Start(&c, req)
	st, _ := c.Next()
	if st == nil {
		return nil
	}
	k, _ := st.Provider.Pick(st.Model, NoHolds{}, 0, req)
	return k
}

func BenchmarkSelect(b *testing.B) {
	for _, sc := range selectCases(b) {
		b.Run(sc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if selectOnce(sc.rt, sc.req) == nil {
					b.Fatal("no key")
				}
			}
		})
	}
}

func BenchmarkSelectParallel(b *testing.B) {
	for _, sc := range selectCases(b) {
		b.Run(sc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					selectOnce(sc.rt, sc.req)
				}
			})
		})
	}
}

// BenchmarkSelectWalk walks all 50 candidates (every attempt failing).
func BenchmarkSelectWalk(b *testing.B) {
	for _, sc := range selectCases(b) {
		b.Run(sc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var c Cursor
				sc.rt.Start(&c, sc.req)
				for st, _ := c.Next(); st != nil; st, _ = c.Next() {
					c.Progress()
				}
			}
		})
	}
}

// TestSelectAllocs: selecting a step and a key among 50 candidates does
// not allocate, whatever the strategy.
func TestSelectAllocs(t *testing.T) {
	for _, sc := range selectCases(t) {
		t.Run(sc.name, func(t *testing.T) {
			if selectOnce(sc.rt, sc.req) == nil {
				t.Fatal("no key")
			}
			if n := testing.AllocsPerRun(200, func() { selectOnce(sc.rt, sc.req) }); n != 0 {
				t.Errorf("%v allocations per selection", n)
			}
			n := testing.AllocsPerRun(50, func() {
				var c Cursor
				sc.rt.Start(&c, sc.req)
				for st, _ := c.Next(); st != nil; st, _ = c.Next() {
				}
			})
			if n != 0 {
				t.Errorf("%v allocations per full walk", n)
			}
		})
	}
}

// TestSelectCases checks the benchmark's setup: every strategy has
// candidates, filters some steps, and the first pick is what the
// strategy prefers.
func TestSelectCases(t *testing.T) {
	for _, sc := range selectCases(t) {
		t.Run(sc.name, func(t *testing.T) {
			var c Cursor
			sc.rt.Start(&c, sc.req)
			n, prev, undeclared := 0, -1.0, false
			for st, i := c.Next(); st != nil; st, i = c.Next() {
				n++
				if st.Provider.Health() == HealthOffline {
					t.Fatalf("offline step %d yielded while healthy ones remain", i)
				}
				if sc.name == "least_cost" {
					cost, _ := c.EstimatedCost(i)
					if cost < prev {
						t.Fatalf("step %d costs %v after %v", i, cost, prev)
					}
					prev = cost
				}
				if sc.name == "capability_aware" {
					if st.capsKnown && undeclared {
						t.Fatalf("declared step %d after an undeclared one", i)
					}
					undeclared = undeclared || !st.capsKnown
				}
				c.Progress()
			}
			if n == 0 || n == benchSteps {
				t.Fatalf("%d candidates of %d", n, benchSteps)
			}
		})
	}
}
