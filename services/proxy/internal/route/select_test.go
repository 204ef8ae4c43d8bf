package route

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/usage"
)

// selProv is one provider of a selection test: one key ("k") and one
// model, which chain "c" targets in declaration order.
type selProv struct {
	name   string
	typ    string // default openai
	model  string // default "m"
	region string
	caps   []string // nil: undeclared
	ctx    int      // context_window
	maxOut int      // max_output
	weight int      // the chain step's weight (0: default)
	off    bool     // the chain step is inactive
}

// selTable builds a table whose chain "c" has one step per provider, in
// order, under strategy. mod (may be nil) edits the configuration before
// Build; exploration is off unless mod turns it on.
func selTable(t testing.TB, strategy string, provs []selProv, o Options, mod func(*config.Config)) (*Table, *Route) {
	t.Helper()
	cfg := config.Defaults()
	zero := 0.0
	cfg.Routing.Explore = &zero
	var steps []config.ChainStep
	for _, p := range provs {
		typ, model := p.typ, p.model
		if typ == "" {
			typ = "openai"
		}
		if model == "" {
			model = "m"
		}
		cfg.Providers = append(cfg.Providers, config.Provider{
			Name: p.name, Type: typ, Region: p.region, Selection: config.SelectionRoundRobin,
			Keys: []config.Key{{ID: "k", Weight: 1, Value: config.NewSecret("s-" + p.name)}},
			Models: []config.Model{{Name: model, Kind: "chat", Capabilities: p.caps,
				ContextWindow: p.ctx, MaxOutput: p.maxOut}},
		})
		st := config.ChainStep{Target: p.name + "/" + model, Weight: p.weight}
		if p.off {
			st.Active = ptr(false)
		}
		steps = append(steps, st)
	}
	cfg.Chains = map[string]config.Chain{"c": {Strategy: strategy, Steps: steps}}
	if mod != nil {
		mod(cfg)
	}
	tab, err := Build(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	rt, ok := tab.Resolve("chain:c")
	if !ok {
		t.Fatal("chain:c not resolved")
	}
	return tab, rt
}

// chainMod edits chain "c".
func chainMod(f func(*config.Chain)) func(*config.Config) {
	return func(cfg *config.Config) {
		c := cfg.Chains["c"]
		f(&c)
		cfg.Chains["c"] = c
	}
}

// failClosed makes chain "c" fail closed.
func failClosed(c *config.Chain) { c.FailClosed = ptr(true) }

// setHealth applies provider health (unnamed providers: healthy).
func setHealth(tab *Table, h map[string]Health) {
	tab.SetHealth(func(p string) Health {
		if v, ok := h[p]; ok {
			return v
		}
		return HealthHealthy
	}, func(string, string) bool { return false })
}

// walk returns the provider names of every candidate in cursor order (each
// tried: Progress after each), and the reasons of the steps' rejections
// keyed by provider name ("-" for a step without provider).
func walk(rt *Route, req *Request) (names []string, reasons map[string]Reason) {
	var c Cursor
	rt.Start(&c, req)
	for st, _ := c.Next(); st != nil; st, _ = c.Next() {
		names = append(names, st.Provider.Name)
		c.Progress()
	}
	reasons = map[string]Reason{}
	for i, st := range rt.Steps {
		if r := c.Reason(i); r != Candidate {
			name := "-"
			if st.Provider != nil {
				name = st.Provider.Name
			}
			reasons[name] = r
		}
	}
	return names, reasons
}

// first is the step Next yields first (-1: none).
func first(rt *Route, req *Request) int {
	var c Cursor
	rt.Start(&c, req)
	_, i := c.Next()
	return i
}

func chatReq() *Request { return &Request{Op: provider.OpChat} }

func equalReasons(got, want map[string]Reason) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func TestParseStrategy(t *testing.T) {
	for i, name := range config.Strategies {
		s, ok := ParseStrategy(name)
		if !ok || int(s) != i || s.String() != name {
			t.Errorf("ParseStrategy(%q) = %v (%d), %v", name, s, s, ok)
		}
	}
	if s, ok := ParseStrategy(""); !ok || s != Priority {
		t.Errorf(`ParseStrategy("") = %v, %v; want priority`, s, ok)
	}
	if _, ok := ParseStrategy("fastest"); ok {
		t.Error("unknown strategy accepted")
	}
	cfg := config.Defaults()
	cfg.Providers = []config.Provider{{Name: "a", Type: "openai", Models: []config.Model{{Name: "m"}}}}
	cfg.Chains = map[string]config.Chain{"c": {Strategy: "fastest", Steps: []config.ChainStep{{Target: "a/m"}}}}
	if _, err := Build(cfg, Options{}); err == nil {
		t.Error("Build accepted an unknown chain strategy")
	}
}

func TestCaps(t *testing.T) {
	c := ParseCaps([]string{"vision", "tools", "bogus", "reasoning"})
	if c != CapVision|CapTools|CapReasoning {
		t.Fatalf("ParseCaps = %b", c)
	}
	if got := c.Names(); !slices.Equal(got, []string{"tools", "vision", "reasoning"}) {
		t.Errorf("Names = %v", got)
	}
	if got := ParseCaps(config.Capabilities); got != CapTools|CapVision|CapAudio|CapJSONSchema|CapReasoning {
		t.Errorf("all capabilities = %b", got)
	}
}

// TestPriorityStrategy: declared order, with the filters every strategy
// applies (inactive, unavailable provider, unsupported operation).
func TestPriorityStrategy(t *testing.T) {
	provs := []selProv{{name: "a"}, {name: "b", off: true}, {name: "an", typ: "anthropic"}, {name: "c"}}
	tests := []struct {
		name    string
		req     *Request
		want    []string
		reasons map[string]Reason
	}{
		{"chat", chatReq(), []string{"a", "an", "c"}, map[string]Reason{"b": ReasonInactive}},
		{"embeddings: anthropic cannot", &Request{Op: provider.OpEmbeddings}, []string{"a", "c"},
			map[string]Reason{"b": ReasonInactive, "an": ReasonUnsupported}},
	}
	_, rt := selTable(t, config.StrategyPriority, provs, Options{}, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 3 { // no rotation between requests
				got, reasons := walk(rt, tt.req)
				if !slices.Equal(got, tt.want) {
					t.Fatalf("order %v, want %v", got, tt.want)
				}
				if !equalReasons(reasons, tt.reasons) {
					t.Fatalf("reasons %v, want %v", reasons, tt.reasons)
				}
			}
		})
	}

	// A step whose optional provider was skipped keeps its place, unused.
	cfg := testConfig()
	tab, err := Build(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	main, _ := tab.Resolve("chain:main")
	var c Cursor
	main.Start(&c, chatReq())
	if st, i := c.Next(); st == nil || i != 0 {
		t.Fatalf("first = %d", i)
	}
	if st, i := c.Next(); st != nil {
		t.Fatalf("second = %d, want none", i)
	}
	if c.Reason(1) != ReasonInactive || c.Reason(2) != ReasonUnavailable {
		t.Errorf("reasons %v %v, want inactive, provider_unavailable", c.Reason(1), c.Reason(2))
	}
	if ReasonUnavailable.String() != "provider_unavailable" || Candidate.String() != "" {
		t.Errorf("reason names %q %q", ReasonUnavailable, Candidate)
	}
}

// TestCursorExhausts: every candidate is yielded once, then nil forever.
func TestCursorExhausts(t *testing.T) {
	provs := []selProv{{name: "a"}, {name: "b"}, {name: "c"}}
	for _, s := range config.Strategies {
		t.Run(s, func(t *testing.T) {
			_, rt := selTable(t, s, provs, Options{}, nil)
			var c Cursor
			rt.Start(&c, &Request{Op: provider.OpChat, Hash: 7, Hashed: true})
			seen := map[int]bool{}
			for st, i := c.Next(); st != nil; st, i = c.Next() {
				if seen[i] || &rt.Steps[i] != st {
					t.Fatalf("step %d yielded twice or mismatched", i)
				}
				seen[i] = true
			}
			if len(seen) != 3 {
				t.Fatalf("yielded %v, want 3 steps", seen)
			}
			for range 3 {
				if st, i := c.Next(); st != nil || i != -1 {
					t.Fatalf("Next after the end = %v, %d", st, i)
				}
			}
		})
	}
}

func weightedProvs(weights ...int) []selProv {
	var out []selProv
	for i, w := range weights {
		out = append(out, selProv{name: string(rune('a' + i)), weight: w})
	}
	return out
}

func hashedReq(h uint64) *Request { return &Request{Op: provider.OpChat, Hash: h, Hashed: true} }

// TestWeightedHashShares: a hashed request always gets the same first step,
// and over many conversations the shares follow the weights.
func TestWeightedHashShares(t *testing.T) {
	tests := []struct {
		weights []int
	}{
		{[]int{3, 1}},
		{[]int{1, 1}},
		{[]int{2, 1, 1}},
		{[]int{5, 3, 2}},
		{[]int{1, 1, 1, 1, 96}},
	}
	const n = 10000
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.weights), func(t *testing.T) {
			hashOn := chainMod(func(c *config.Chain) { c.HashOn = "client" })
			_, rt := selTable(t, config.StrategyWeighted, weightedProvs(tt.weights...), Options{}, hashOn)
			_, again := selTable(t, config.StrategyWeighted, weightedProvs(tt.weights...), Options{}, hashOn)
			total := 0
			for _, w := range tt.weights {
				total += w
			}
			counts := make([]int, len(tt.weights))
			for i := range n {
				h := Hash(fmt.Sprintf("conversation-%d", i))
				f := first(rt, hashedReq(h))
				if f < 0 {
					t.Fatal("no first step")
				}
				if g := first(rt, hashedReq(h)); g != f {
					t.Fatalf("hash %x: first %d then %d", h, f, g)
				}
				if g := first(again, hashedReq(h)); g != f {
					t.Fatalf("hash %x: first %d, on a table built again %d", h, f, g)
				}
				counts[f]++
			}
			for i, w := range tt.weights {
				got, want := 100*float64(counts[i])/n, 100*float64(w)/float64(total)
				if math.Abs(got-want) > 3 {
					t.Errorf("step %d: %.1f%% of first steps, want %.1f%% ±3 (counts %v)", i, got, want, counts)
				}
			}
		})
	}
}

// TestWeightedSmooth: without a hash, smooth weighted round robin gives
// the exact shares, interleaved.
func TestWeightedSmooth(t *testing.T) {
	tests := []struct {
		weights []int
		n       int
		maxRun  int // the longest run of one step as first
	}{
		{[]int{3, 1}, 400, 3},
		{[]int{1, 1}, 400, 1},
		{[]int{2, 1, 1}, 400, 2},
		{[]int{6, 4}, 500, 2}, // reduced by the gcd: 3:2
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.weights), func(t *testing.T) {
			_, rt := selTable(t, config.StrategyWeighted, weightedProvs(tt.weights...), Options{}, nil)
			total := 0
			for _, w := range tt.weights {
				total += w
			}
			counts := make([]int, len(tt.weights))
			last, run := -1, 0
			for range tt.n {
				f := first(rt, chatReq())
				counts[f]++
				if f == last {
					run++
				} else {
					last, run = f, 1
				}
				if run > tt.maxRun {
					t.Fatalf("step %d first %d times in a row", f, run)
				}
			}
			for i, w := range tt.weights {
				if want := tt.n * w / total; counts[i] != want {
					t.Errorf("step %d first %d times, want %d (counts %v)", i, counts[i], want, counts)
				}
			}
		})
	}

	// The rest of the walk is the declared order.
	_, rt := selTable(t, config.StrategyWeighted, weightedProvs(1, 1, 1), Options{}, nil)
	for range 6 {
		names, _ := walk(rt, chatReq())
		if len(names) != 3 {
			t.Fatalf("walk %v", names)
		}
		rest := slices.Clone(names[1:])
		if !slices.IsSorted(rest) {
			t.Fatalf("after the weighted first step, %v is not in declared order", names)
		}
	}
}

// TestWeightedStickyWhenTargetLeaves: when the hashed target becomes
// ineligible (inactive, or offline), only its conversations move.
func TestWeightedStickyWhenTargetLeaves(t *testing.T) {
	weights := []int{2, 1, 1}
	hashOn := chainMod(func(c *config.Chain) { c.HashOn = "user" })
	_, base := selTable(t, config.StrategyWeighted, weightedProvs(weights...), Options{}, hashOn)

	inactive := weightedProvs(weights...)
	inactive[1].off = true
	_, withInactive := selTable(t, config.StrategyWeighted, inactive, Options{}, hashOn)

	offTab, withOffline := selTable(t, config.StrategyWeighted, weightedProvs(weights...), Options{}, hashOn)
	setHealth(offTab, map[string]Health{"b": HealthOffline})

	tests := []struct {
		name string
		rt   *Route
	}{{"inactive", withInactive}, {"offline", withOffline}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			moved, stayed := map[int]int{}, 0
			for i := range 10000 {
				h := Hash(fmt.Sprintf("user-%d", i))
				before, after := first(base, hashedReq(h)), first(tt.rt, hashedReq(h))
				switch {
				case after == 1:
					t.Fatalf("hash %x: first step is the ineligible one", h)
				case before != 1 && after != before:
					t.Fatalf("hash %x: moved from %d to %d though its target stayed", h, before, after)
				case before == 1:
					moved[after]++
				default:
					stayed++
				}
			}
			if moved[0]+moved[2] == 0 || stayed == 0 {
				t.Fatalf("moved %v, stayed %d", moved, stayed)
			}
			names, reasons := walk(tt.rt, hashedReq(Hash("user-1")))
			if slices.Contains(names, "b") {
				t.Errorf("walk %v includes b", names)
			}
			wantReason := ReasonInactive
			if tt.name == "offline" {
				wantReason = ReasonFallback
			}
			if reasons["b"] != wantReason {
				t.Errorf("b: %v, want %v", reasons["b"], wantReason)
			}
		})
	}
}

// latencies observes ms on each step (ms < 0: never measured); samples
// are taken at times[i] (0: 1+i).
func latencies(rt *Route, ms []float64, times []int64) {
	for i, v := range ms {
		if v < 0 {
			continue
		}
		at := int64(1 + i)
		if times != nil {
			at = times[i]
		}
		rt.Steps[i].Latency.Observe(v, 1, at)
	}
}

func TestLeastLatency(t *testing.T) {
	provs := []selProv{{name: "a"}, {name: "b"}, {name: "c"}, {name: "d"}}
	tests := []struct {
		name string
		ms   []float64
		want []string
	}{
		{"fastest first", []float64{400, 120, 80, 900}, []string{"c", "b", "a", "d"}},
		{"ties keep declared order", []float64{100, 50, 100, 50}, []string{"b", "d", "a", "c"}},
		{"unknown counts as fastest", []float64{10, -1, 5, -1}, []string{"b", "d", "c", "a"}},
		{"all unknown: declared order", []float64{-1, -1, -1, -1}, []string{"a", "b", "c", "d"}},
		{"sub-millisecond", []float64{0.5, 0.25, 0, 1}, []string{"c", "b", "a", "d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rt := selTable(t, config.StrategyLeastLatency, provs, Options{}, nil)
			latencies(rt, tt.ms, nil)
			for range 5 {
				if got, _ := walk(rt, chatReq()); !slices.Equal(got, tt.want) {
					t.Fatalf("order %v, want %v", got, tt.want)
				}
			}
		})
	}

	// The averages outlive a configuration reload: a table built from the
	// same book orders by them.
	book := NewLatencyBook()
	_, rt := selTable(t, config.StrategyLeastLatency, provs, Options{Latency: book}, nil)
	latencies(rt, []float64{300, 200, 100, 50}, nil)
	_, rt2 := selTable(t, config.StrategyLeastLatency, provs, Options{Latency: book}, nil)
	if got, _ := walk(rt2, chatReq()); !slices.Equal(got, []string{"d", "c", "b", "a"}) {
		t.Errorf("after a reload: %v", got)
	}
}

// TestExplore: routing.explore 0.25 sends every 4th request to the
// candidate sampled least recently; the rest of that walk is by latency.
func TestExplore(t *testing.T) {
	provs := []selProv{{name: "a"}, {name: "b"}, {name: "c"}}
	tests := []struct {
		strategy string
		explore  float64
		every    int // 0: never
	}{
		{config.StrategyLeastLatency, 0.25, 4},
		{config.StrategyHealthAware, 0.25, 4},
		{config.StrategyLeastLatency, 0.5, 2},
		{config.StrategyLeastLatency, 0.1, 10},
		{config.StrategyLeastLatency, 0, 0},
		{config.StrategyPriority, 0.25, 0}, // only latency strategies explore
		{config.StrategyLeastCost, 0.5, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%v", tt.strategy, tt.explore), func(t *testing.T) {
			tab, rt := selTable(t, tt.strategy, provs, Options{}, func(cfg *config.Config) { cfg.Routing.Explore = &tt.explore })
			setHealth(tab, nil)
			// a fastest, b stalest (sampled longest ago), c slowest.
			latencies(rt, []float64{10, 20, 30}, []int64{300, 100, 200})
			want := []string{"a", "b", "c"}
			if tt.strategy == config.StrategyLeastCost {
				want = []string{"a", "b", "c"} // unpriced: declared order
			}
			for n := 1; n <= 40; n++ {
				got, _ := walk(rt, chatReq())
				exp := want
				if tt.every > 0 && n%tt.every == 0 {
					exp = []string{"b", "a", "c"}
				}
				if !slices.Equal(got, exp) {
					t.Fatalf("request %d: %v, want %v", n, got, exp)
				}
			}
		})
	}

	// Never measured is the stalest of all.
	explore := 0.5
	_, rt := selTable(t, config.StrategyLeastLatency, provs, Options{}, func(cfg *config.Config) { cfg.Routing.Explore = &explore })
	latencies(rt, []float64{10, 20, -1}, nil)
	rt.Steps[2].Latency.Seed(5000, 0) // seeded from records, never sampled here: explored
	for n := 1; n <= 4; n++ {
		got, _ := walk(rt, chatReq())
		exp := []string{"a", "b", "c"}
		if n%2 == 0 {
			exp = []string{"c", "a", "b"}
		}
		if !slices.Equal(got, exp) {
			t.Fatalf("request %d: %v, want %v", n, got, exp)
		}
	}
}

func priced(entries ...usage.Entry) Options {
	return Options{Prices: usage.NewTable(usage.Defaults(), entries)}
}

// TestLeastCost: cheapest estimated cost first, unpriced last, fail_closed
// rejects unpriced.
func TestLeastCost(t *testing.T) {
	provs := []selProv{
		{name: "local", model: "llama-local"},
		{name: "big", model: "gpt-4o"},
		{name: "mid", model: "gpt-4.1"},
		{name: "mini", model: "gpt-4o-mini"},
		{name: "local2", model: "qwen-local"},
	}
	req := &Request{Op: provider.OpChat, InputTokens: 1000, MaxOutput: 500}
	tests := []struct {
		name    string
		opts    Options
		mod     func(*config.Config)
		want    []string
		reasons map[string]Reason
	}{
		{"bundled prices", priced(), nil, []string{"mini", "mid", "big", "local", "local2"}, map[string]Reason{}},
		{"an override makes gpt-4o cheapest", priced(usage.Entry{Provider: "big", Model: "gpt-4o", Price: usage.Price{Input: 0.01, Output: 0.01}}),
			nil, []string{"big", "mini", "mid", "local", "local2"}, map[string]Reason{}},
		{"an entry prices a local model", priced(usage.Entry{Model: "qwen-local", Price: usage.Price{Input: 1, Output: 1}}),
			nil, []string{"mini", "local2", "mid", "big", "local"}, map[string]Reason{}},
		{"no price table: declared order", Options{}, nil, []string{"local", "big", "mid", "mini", "local2"}, map[string]Reason{}},
		{"fail_closed rejects unpriced", priced(), chainMod(failClosed), []string{"mini", "mid", "big"},
			map[string]Reason{"local": ReasonNoMetadata, "local2": ReasonNoMetadata}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, rt := selTable(t, config.StrategyLeastCost, provs, tt.opts, tt.mod)
			setHealth(tab, nil)
			got, reasons := walk(rt, req)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("order %v, want %v", got, tt.want)
			}
			if !equalReasons(reasons, tt.reasons) {
				t.Fatalf("reasons %v, want %v", reasons, tt.reasons)
			}
		})
	}

	// EstimatedCost: input at the input rate, output at the output rate.
	_, rt := selTable(t, config.StrategyLeastCost, provs, priced(), nil)
	var c Cursor
	rt.Start(&c, req)
	for i, want := range []float64{-1, (1000*2.50 + 500*10.00) / 1e6, (1000*2.00 + 500*8.00) / 1e6, (1000*0.15 + 500*0.60) / 1e6, -1} {
		got, ok := c.EstimatedCost(i)
		if ok != (want >= 0) || (ok && math.Abs(got-want) > 1e-12) {
			t.Errorf("step %d: EstimatedCost = %v, %v; want %v", i, got, ok, want)
		}
	}
}

// TestCostOutputEstimate: the output counted is the request's limit, else
// the model's max_output, else as many tokens as the input.
func TestCostOutputEstimate(t *testing.T) {
	provs := []selProv{
		{name: "x", model: "x-model", maxOut: 100},    // input 1, output 10
		{name: "y", model: "y-model", maxOut: 10_000}, // input 1, output 1
		{name: "z", model: "z-model"},                 // input 3, output 3
	}
	opts := priced(
		usage.Entry{Model: "x-model", Price: usage.Price{Input: 1, Output: 10}},
		usage.Entry{Model: "y-model", Price: usage.Price{Input: 1, Output: 1}},
		usage.Entry{Model: "z-model", Price: usage.Price{Input: 3, Output: 3}},
	)
	tests := []struct {
		name      string
		maxOutput int64
		want      []string
		cost      []float64
	}{
		// x: 1000+100*10=2000, y: 1000+10000=11000, z: 3000+3000=6000.
		{"model max_output", 0, []string{"x", "z", "y"}, []float64{2000e-6, 11000e-6, 6000e-6}},
		// x: 1000+100*10=2000, y: 1000+100=1100, z: 3000+100*3=3300.
		{"request max tokens", 100, []string{"y", "x", "z"}, []float64{2000e-6, 1100e-6, 3300e-6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rt := selTable(t, config.StrategyLeastCost, provs, opts, nil)
			req := &Request{Op: provider.OpChat, InputTokens: 1000, MaxOutput: tt.maxOutput}
			if got, _ := walk(rt, req); !slices.Equal(got, tt.want) {
				t.Fatalf("order %v, want %v", got, tt.want)
			}
			var c Cursor
			rt.Start(&c, req)
			for i, want := range tt.cost {
				if got, ok := c.EstimatedCost(i); !ok || math.Abs(got-want) > 1e-12 {
					t.Errorf("step %d: cost %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestHealthAware(t *testing.T) {
	provs := []selProv{{name: "deg"}, {name: "unk"}, {name: "ok-slow"}, {name: "off"}, {name: "ok-fast"}, {name: "deg-fast"}}
	ms := []float64{50, 10, 500, 1, 100, 5}
	tests := []struct {
		name    string
		health  map[string]Health
		want    []string
		untried []string
		reasons map[string]Reason
	}{
		{"healthy < unknown < degraded, then latency, offline excluded",
			map[string]Health{"deg": HealthDegraded, "unk": HealthUnknown, "off": HealthOffline, "deg-fast": HealthDegraded},
			[]string{"ok-fast", "ok-slow", "unk", "deg-fast", "deg"},
			[]string{"ok-fast", "ok-slow", "unk", "deg-fast", "deg"},
			map[string]Reason{"off": ReasonUnhealthy}},
		{"all healthy: latency",
			map[string]Health{},
			[]string{"off", "deg-fast", "unk", "deg", "ok-fast", "ok-slow"},
			[]string{"off", "deg-fast", "unk", "deg", "ok-fast", "ok-slow"},
			map[string]Reason{}},
		{"only offline left: still candidates",
			map[string]Health{"deg": HealthOffline, "unk": HealthOffline, "ok-slow": HealthOffline, "off": HealthOffline, "ok-fast": HealthOffline, "deg-fast": HealthOffline},
			[]string{"off", "deg-fast", "unk", "deg", "ok-fast", "ok-slow"},
			[]string{"off", "deg-fast", "unk", "deg", "ok-fast", "ok-slow"},
			map[string]Reason{}},
		{"degraded beats offline",
			map[string]Health{"deg": HealthOffline, "unk": HealthOffline, "ok-slow": HealthOffline, "off": HealthOffline, "ok-fast": HealthOffline, "deg-fast": HealthDegraded},
			[]string{"deg-fast"}, []string{"deg-fast"},
			map[string]Reason{"deg": ReasonUnhealthy, "unk": ReasonUnhealthy, "ok-slow": ReasonUnhealthy, "off": ReasonUnhealthy, "ok-fast": ReasonUnhealthy}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, rt := selTable(t, config.StrategyHealthAware, provs, Options{}, nil)
			latencies(rt, ms, nil)
			setHealth(tab, tt.health)
			got, reasons := walk(rt, chatReq())
			if !slices.Equal(got, tt.want) {
				t.Fatalf("order %v, want %v", got, tt.want)
			}
			if !equalReasons(reasons, tt.reasons) {
				t.Fatalf("reasons %v, want %v", reasons, tt.reasons)
			}
			if got := namesOf(orderUntried(rt, chatReq())); !slices.Equal(got, tt.untried) {
				t.Fatalf("nothing tried: %v, want %v", got, tt.untried)
			}
		})
	}

	// fail_closed: unknown health is rejected.
	tab, rt := selTable(t, config.StrategyHealthAware, provs[:3], Options{}, chainMod(failClosed))
	setHealth(tab, map[string]Health{"unk": HealthUnknown})
	got, reasons := walk(rt, chatReq())
	if !slices.Equal(got, []string{"deg", "ok-slow"}) && !slices.Equal(got, []string{"ok-slow", "deg"}) {
		t.Fatalf("fail_closed order %v", got)
	}
	if reasons["unk"] != ReasonHealthUnknown {
		t.Errorf("unknown health under fail_closed: %v", reasons["unk"])
	}
}

// namesOf turns order's provider/model strings into provider names.
func namesOf(pm []string) []string {
	out := make([]string, len(pm))
	for i, s := range pm {
		for j := 0; j < len(s); j++ {
			if s[j] == '/' {
				s = s[:j]
				break
			}
		}
		out[i] = s
	}
	return out
}

// budgets is a BudgetFunc over fixed remainders (absent: not limited).
func budgets(left map[string]float64) BudgetFunc {
	return func(p string) (float64, bool) {
		v, ok := left[p]
		return v, ok
	}
}

func TestBudgetAware(t *testing.T) {
	provs := []selProv{
		{name: "local", model: "llama-local"},
		{name: "big", model: "gpt-4o"},       // 1000 in, 1000 out: 0.0125
		{name: "mid", model: "gpt-4.1"},      // 0.010
		{name: "mini", model: "gpt-4o-mini"}, // 0.00075
	}
	tests := []struct {
		name    string
		left    map[string]float64
		mod     func(*config.Config)
		want    []string
		reasons map[string]Reason
	}{
		{"no budgets: cheapest first, unpriced last", nil, nil, []string{"mini", "mid", "big", "local"}, map[string]Reason{}},
		{"cheapest over its budget", map[string]float64{"mini": 0.0007}, nil, []string{"mid", "big", "local"},
			map[string]Reason{"mini": ReasonOverBudget}},
		{"exactly enough left", map[string]float64{"mini": 0.00075, "mid": 0.01}, nil, []string{"mini", "mid", "big", "local"}, map[string]Reason{}},
		{"plenty left everywhere", map[string]float64{"mini": 5, "mid": 5, "big": 5, "local": 5}, nil,
			[]string{"mini", "mid", "big", "local"}, map[string]Reason{}},
		{"several over", map[string]float64{"mini": 0.0001, "mid": 0.005, "big": 1}, nil, []string{"big", "local"},
			map[string]Reason{"mini": ReasonOverBudget, "mid": ReasonOverBudget}},
		{"unpriced with nothing left", map[string]float64{"local": 0}, nil, []string{"mini", "mid", "big"},
			map[string]Reason{"local": ReasonOverBudget}},
		{"unpriced, negative left", map[string]float64{"local": -3}, nil, []string{"mini", "mid", "big"},
			map[string]Reason{"local": ReasonOverBudget}},
		{"fail_closed: unpriced rejected", nil, chainMod(failClosed), []string{"mini", "mid", "big"},
			map[string]Reason{"local": ReasonNoMetadata}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, rt := selTable(t, config.StrategyBudgetAware, provs, priced(), tt.mod)
			setHealth(tab, nil)
			req := &Request{Op: provider.OpChat, InputTokens: 1000, MaxOutput: 1000}
			if tt.left != nil {
				req.Budget = budgets(tt.left)
			}
			got, reasons := walk(rt, req)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("order %v, want %v", got, tt.want)
			}
			if !equalReasons(reasons, tt.reasons) {
				t.Fatalf("reasons %v, want %v", reasons, tt.reasons)
			}
		})
	}
}

// TestExhaustedBudgetEveryStrategy: a provider with nothing left is
// rejected whatever the strategy; one with a little left is rejected only
// by budget_aware (when the estimate exceeds it).
func TestExhaustedBudgetEveryStrategy(t *testing.T) {
	provs := []selProv{{name: "a", model: "gpt-4o", region: "eu", caps: []string{"tools"}}, {name: "b", model: "gpt-4o-mini", region: "eu"}, {name: "c", model: "gpt-4.1", region: "eu"}}
	for _, s := range config.Strategies {
		t.Run(s, func(t *testing.T) {
			tab, rt := selTable(t, s, provs, priced(), nil)
			setHealth(tab, nil)
			req := &Request{Op: provider.OpChat, InputTokens: 1000, MaxOutput: 1000, Hash: 1, Hashed: true,
				Budget: budgets(map[string]float64{"b": 0, "c": 1e-9})}
			got, reasons := walk(rt, req)
			if slices.Contains(got, "b") || reasons["b"] != ReasonOverBudget {
				t.Errorf("b with 0 left: order %v, reason %v", got, reasons["b"])
			}
			cRejected := reasons["c"] == ReasonOverBudget
			if cRejected != (s == config.StrategyBudgetAware) {
				t.Errorf("c with a little left: reason %v", reasons["c"])
			}
			if !slices.Contains(got, "a") {
				t.Errorf("a unlimited, not yielded: %v", got)
			}
		})
	}
}

func TestRegion(t *testing.T) {
	provs := []selProv{{name: "us1", region: "us"}, {name: "eu1", region: "eu"}, {name: "none"}, {name: "eu2", region: "eu"}, {name: "us2", region: "us"}}
	tests := []struct {
		name     string
		strategy string
		chain    string // chain region
		fc       bool
		req      Request
		want     []string
		reasons  map[string]Reason
	}{
		{"chain region first", config.StrategyRegionAffinity, "eu", false, Request{},
			[]string{"eu1", "eu2", "us1", "none", "us2"}, map[string]Reason{}},
		{"no region anywhere: declared order", config.StrategyRegionAffinity, "", false, Request{},
			[]string{"us1", "eu1", "none", "eu2", "us2"}, map[string]Reason{}},
		{"request region beats the chain's", config.StrategyRegionAffinity, "eu", false, Request{Region: "us"},
			[]string{"us1", "us2", "eu1", "none", "eu2"}, map[string]Reason{}},
		{"request region nobody serves", config.StrategyRegionAffinity, "eu", false, Request{Region: "ap"},
			[]string{"us1", "eu1", "none", "eu2", "us2"}, map[string]Reason{}},
		{"region required", config.StrategyRegionAffinity, "", false, Request{Region: "eu", RegionRequired: true},
			[]string{"eu1", "eu2"}, map[string]Reason{"us1": ReasonRegion, "none": ReasonRegion, "us2": ReasonRegion}},
		{"region required, fail_closed: missing region is missing metadata", config.StrategyRegionAffinity, "", true,
			Request{Region: "eu", RegionRequired: true},
			[]string{"eu1", "eu2"}, map[string]Reason{"us1": ReasonRegion, "none": ReasonNoMetadata, "us2": ReasonRegion}},
		{"chain region required (request names none)", config.StrategyRegionAffinity, "us", false, Request{RegionRequired: true},
			[]string{"us1", "us2"}, map[string]Reason{"eu1": ReasonRegion, "none": ReasonRegion, "eu2": ReasonRegion}},
		{"priority ignores the chain region", config.StrategyPriority, "eu", false, Request{},
			[]string{"us1", "eu1", "none", "eu2", "us2"}, map[string]Reason{}},
		{"a request region is preferred under any strategy", config.StrategyPriority, "", false, Request{Region: "eu"},
			[]string{"eu1", "eu2", "us1", "none", "us2"}, map[string]Reason{}},
		{"region required under priority", config.StrategyPriority, "", false, Request{Region: "us", RegionRequired: true},
			[]string{"us1", "us2"}, map[string]Reason{"eu1": ReasonRegion, "none": ReasonRegion, "eu2": ReasonRegion}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, rt := selTable(t, tt.strategy, provs, Options{}, chainMod(func(c *config.Chain) {
				c.Region = tt.chain
				c.FailClosed = ptr(tt.fc)
			}))
			setHealth(tab, nil)
			req := tt.req
			req.Op = provider.OpChat
			got, reasons := walk(rt, &req)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("order %v, want %v", got, tt.want)
			}
			if !equalReasons(reasons, tt.reasons) {
				t.Fatalf("reasons %v, want %v", reasons, tt.reasons)
			}
		})
	}

	// Least latency within the preferred region, then among the others.
	tab, rt := selTable(t, config.StrategyLeastLatency, provs, Options{}, nil)
	setHealth(tab, nil)
	latencies(rt, []float64{5, 50, 1, 40, 10}, nil)
	if got, _ := walk(rt, &Request{Op: provider.OpChat, Region: "eu"}); !slices.Equal(got, []string{"eu2", "eu1", "none", "us1", "us2"}) {
		t.Errorf("least_latency, region eu: %v", got)
	}
}

func TestCapabilityAware(t *testing.T) {
	provs := []selProv{
		{name: "undeclared"},
		{name: "text", caps: []string{"tools"}},
		{name: "vision", caps: []string{"vision", "tools"}, ctx: 128_000, maxOut: 4096},
		{name: "small", caps: []string{"vision", "tools", "json_schema"}, ctx: 8000, maxOut: 1024},
		{name: "none", caps: []string{}},
	}
	tests := []struct {
		name     string
		strategy string
		fc       bool
		req      Request
		want     []string
		reasons  map[string]Reason
	}{
		{"declared first, then undeclared", config.StrategyCapabilityAware, false, Request{},
			[]string{"text", "vision", "small", "none", "undeclared"}, map[string]Reason{}},
		{"vision: never a step declared without it", config.StrategyCapabilityAware, false, Request{Needs: CapVision},
			[]string{"vision", "small", "undeclared"}, map[string]Reason{"text": ReasonCapability, "none": ReasonCapability}},
		{"vision, fail_closed: undeclared is missing metadata", config.StrategyCapabilityAware, true, Request{Needs: CapVision},
			[]string{"vision", "small"}, map[string]Reason{"text": ReasonCapability, "none": ReasonCapability, "undeclared": ReasonNoMetadata}},
		{"no needs, fail_closed: undeclared stays", config.StrategyCapabilityAware, true, Request{},
			[]string{"text", "vision", "small", "none", "undeclared"}, map[string]Reason{}},
		{"vision and json_schema", config.StrategyCapabilityAware, false, Request{Needs: CapVision | CapJSONSchema},
			[]string{"small", "undeclared"}, map[string]Reason{"text": ReasonCapability, "vision": ReasonCapability, "none": ReasonCapability}},
		{"prompt above a context window", config.StrategyCapabilityAware, false, Request{InputTokens: 9000},
			[]string{"text", "vision", "none", "undeclared"}, map[string]Reason{"small": ReasonContext}},
		{"prompt equal to the window fits", config.StrategyCapabilityAware, false, Request{InputTokens: 8000},
			[]string{"text", "vision", "small", "none", "undeclared"}, map[string]Reason{}},
		{"output above max_output", config.StrategyCapabilityAware, false, Request{MaxOutput: 2048},
			[]string{"text", "vision", "none", "undeclared"}, map[string]Reason{"small": ReasonContext}},
		{"output above both", config.StrategyCapabilityAware, false, Request{Needs: CapTools, MaxOutput: 8192},
			[]string{"text", "undeclared"}, map[string]Reason{"small": ReasonContext, "vision": ReasonContext, "none": ReasonCapability}},
		{"capability filter under priority too", config.StrategyPriority, false, Request{Needs: CapVision},
			[]string{"undeclared", "vision", "small"}, map[string]Reason{"text": ReasonCapability, "none": ReasonCapability}},
		{"context filter under least_latency too", config.StrategyLeastLatency, false, Request{InputTokens: 200_000},
			[]string{"undeclared", "text", "none"}, map[string]Reason{"vision": ReasonContext, "small": ReasonContext}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab, rt := selTable(t, tt.strategy, provs, Options{}, chainMod(func(c *config.Chain) { c.FailClosed = ptr(tt.fc) }))
			setHealth(tab, nil)
			req := tt.req
			req.Op = provider.OpChat
			got, reasons := walk(rt, &req)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("order %v, want %v", got, tt.want)
			}
			if !equalReasons(reasons, tt.reasons) {
				t.Fatalf("reasons %v, want %v", reasons, tt.reasons)
			}
		})
	}
}

// TestVirtualRouteHealth: an offline provider is skipped while a healthy
// step exists, and tried only when no step made progress.
func TestVirtualRouteHealth(t *testing.T) {
	provs := []selProv{{name: "a"}, {name: "b"}, {name: "c"}}
	for _, s := range []string{config.StrategyPriority, config.StrategyWeighted, config.StrategyLeastLatency, config.StrategyLeastCost,
		config.StrategyBudgetAware, config.StrategyRegionAffinity, config.StrategyCapabilityAware} {
		t.Run(s, func(t *testing.T) {
			tab, rt := selTable(t, s, provs, Options{}, nil)
			setHealth(tab, map[string]Health{"a": HealthOffline, "c": HealthDegraded})
			req := chatReq()

			// Every step tried: the offline one never is.
			got, reasons := walk(rt, req)
			if slices.Contains(got, "a") || len(got) != 2 {
				t.Fatalf("tried %v, want b and c only", got)
			}
			if reasons["a"] != ReasonFallback || ReasonFallback.String() != "unhealthy_fallback" {
				t.Fatalf("a: %v", reasons["a"])
			}

			// Nothing could be tried (keys held): the offline one last.
			untried := namesOf(orderUntried(rt, req))
			if len(untried) != 3 || untried[2] != "a" {
				t.Fatalf("nothing tried: %v, want a last", untried)
			}

			// Progress on the very first step: no fallback.
			var c Cursor
			rt.Start(&c, req)
			c.Next()
			c.Progress()
			n := 1
			for st, _ := c.Next(); st != nil; st, _ = c.Next() {
				if st.Provider.Name == "a" {
					t.Fatal("offline step yielded after progress")
				}
				n++
			}
			if n != 2 {
				t.Fatalf("%d steps yielded", n)
			}

			// Progress after the fallback started: the rest is not yielded.
			setHealth(tab, map[string]Health{"a": HealthOffline, "b": HealthOffline})
			rt.Start(&c, req)
			if st, _ := c.Next(); st == nil || st.Provider.Name != "c" {
				t.Fatalf("first %v, want c", st)
			}
			if st, _ := c.Next(); st == nil || st.Provider.Name != "a" {
				t.Fatalf("second %v, want a (fallback, declared order)", st)
			}
			c.Progress()
			if st, _ := c.Next(); st != nil {
				t.Fatalf("b yielded after progress on the fallback")
			}
		})
	}

	// Every step offline: all are candidates, declared order.
	tab, rt := selTable(t, config.StrategyPriority, provs, Options{}, nil)
	setHealth(tab, map[string]Health{"a": HealthOffline, "b": HealthOffline, "c": HealthOffline})
	if got, reasons := walk(rt, chatReq()); !slices.Equal(got, []string{"a", "b", "c"}) || len(reasons) != 0 {
		t.Errorf("all offline: %v %v", got, reasons)
	}

	// The only other step is inactive: the offline one is the candidate.
	inactive := []selProv{{name: "a"}, {name: "b", off: true}}
	tab, rt = selTable(t, config.StrategyPriority, inactive, Options{}, nil)
	setHealth(tab, map[string]Health{"a": HealthOffline})
	if got, _ := walk(rt, chatReq()); !slices.Equal(got, []string{"a"}) {
		t.Errorf("offline with an inactive alternative: %v", got)
	}

	// Single-step routes yield an offline step.
	tab, err := Build(testConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	setHealth(tab, map[string]Health{"oa": HealthOffline, "an": HealthOffline})
	for _, name := range []string{"oa/gpt-4.1", "gpt-4.1", "fast", "chain:main"} {
		rt, _ := tab.Resolve(name)
		var c Cursor
		rt.Start(&c, chatReq())
		if st, _ := c.Next(); st == nil {
			t.Errorf("%s: offline single step not yielded", name)
		}
	}
	// Unknown health is not offline: a healthy plain-model step does not
	// hide it.
	setHealth(tab, map[string]Health{"oa": HealthUnknown})
	rt2, _ := tab.Resolve("shared")
	if got := namesOf(order(rt2, chatReq())); !slices.Equal(got, []string{"oa", "an"}) {
		t.Errorf("unknown health: %v", got)
	}
}

// TestFailClosedHealthUnknown: fail_closed rejects steps of unknown
// health under every strategy; fail open keeps them.
func TestFailClosedHealthUnknown(t *testing.T) {
	provs := []selProv{{name: "a", model: "gpt-4o", region: "eu", caps: []string{"vision"}}, {name: "b", model: "gpt-4o-mini", region: "eu", caps: []string{"vision"}}}
	for _, s := range config.Strategies {
		t.Run(s, func(t *testing.T) {
			tab, rt := selTable(t, s, provs, priced(), chainMod(failClosed))
			setHealth(tab, map[string]Health{"a": HealthUnknown})
			got, reasons := walk(rt, chatReq())
			if !slices.Equal(got, []string{"b"}) || reasons["a"] != ReasonHealthUnknown {
				t.Errorf("fail_closed: %v %v", got, reasons)
			}
			tab, rt = selTable(t, s, provs, priced(), nil)
			setHealth(tab, map[string]Health{"a": HealthUnknown})
			if got, _ := walk(rt, chatReq()); len(got) != 2 {
				t.Errorf("fail open: %v", got)
			}
		})
	}
	// routing.fail_closed is the default of chains; a chain's own false
	// overrides it.
	tab, rt := selTable(t, config.StrategyPriority, provs, Options{}, func(cfg *config.Config) { cfg.Routing.FailClosed = true })
	setHealth(tab, map[string]Health{"a": HealthUnknown})
	if got, _ := walk(rt, chatReq()); !slices.Equal(got, []string{"b"}) {
		t.Errorf("global fail_closed: %v", got)
	}
	tab, rt = selTable(t, config.StrategyPriority, provs, Options{}, func(cfg *config.Config) {
		cfg.Routing.FailClosed = true
		c := cfg.Chains["c"]
		c.FailClosed = ptr(false)
		cfg.Chains["c"] = c
	})
	setHealth(tab, map[string]Health{"a": HealthUnknown})
	if got, _ := walk(rt, chatReq()); len(got) != 2 {
		t.Errorf("chain fail open over global fail_closed: %v", got)
	}
}

// TestPlainModelStrategy: routing.strategy orders plain model names;
// provider/model routes have one step.
func TestPlainModelStrategy(t *testing.T) {
	cfg := config.Defaults()
	zero := 0.0
	cfg.Routing.Explore = &zero
	cfg.Routing.Strategy = config.StrategyLeastLatency
	for _, n := range []string{"a", "b", "c"} {
		cfg.Providers = append(cfg.Providers, config.Provider{Name: n, Type: "openai",
			Keys: []config.Key{{ID: "k", Weight: 1, Value: config.NewSecret("s")}}, Models: []config.Model{{Name: "m"}}})
	}
	tab, err := Build(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := tab.Resolve("m")
	if rt.Policy.Strategy != LeastLatency || rt.Kind != "plain" {
		t.Fatalf("plain route policy %v kind %s", rt.Policy.Strategy, rt.Kind)
	}
	latencies(rt, []float64{30, 10, 20}, nil)
	if got := namesOf(order(rt, chatReq())); !slices.Equal(got, []string{"b", "c", "a"}) {
		t.Errorf("plain least_latency: %v", got)
	}
	one, _ := tab.Resolve("b/m")
	if one.Policy.Strategy != Priority || len(one.Steps) != 1 {
		t.Errorf("provider/model route: %v, %d steps", one.Policy.Strategy, len(one.Steps))
	}
}

// TestWeightedSmoothIneligibleShares: without a hash, the steps left
// eligible split the first attempts by their own weights.
func TestWeightedSmoothIneligibleShares(t *testing.T) {
	tests := []struct {
		weights []int
		off     int
		want    []int // first-step counts over 600 requests
	}{
		{[]int{1, 1, 1}, 1, []int{300, 0, 300}},
		{[]int{3, 1, 1}, 0, []int{0, 300, 300}},
		{[]int{1, 1, 2}, 2, []int{300, 300, 0}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.weights, " off ", tt.off), func(t *testing.T) {
			provs := weightedProvs(tt.weights...)
			provs[tt.off].off = true
			_, rt := selTable(t, config.StrategyWeighted, provs, Options{}, nil)
			counts := make([]int, len(tt.weights))
			for range 600 {
				counts[first(rt, chatReq())]++
			}
			if !slices.Equal(counts, tt.want) {
				t.Errorf("first-step counts %v, want %v", counts, tt.want)
			}
		})
	}
}
