package hold

import (
	"fmt"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
)

// benchScope is the i-th scope of a large fleet's holds: key+model scopes
// spread over 20 providers of 64 keys, as a provider-wide outage of many
// models holds them.
func benchScope(i int) Scope {
	return Scope{Kind: ScopeKeyModel, Provider: fmt.Sprintf("p%d", i%20), Key: fmt.Sprintf("k%d", (i/20)%64),
		Model: fmt.Sprintf("model-%d.%d", i/(20*64), i%3)}
}

func benchEngine(holds int) *Engine {
	e := NewEngine(EngineOptions{Store: NewMemStore(), Instance: "bench"})
	now := time.Now()
	e.mu.Lock()
	for i := range holds {
		sc := benchScope(i)
		e.installLocked(e.newEntry(Record{ID: sc.ID(), Scope: sc, State: StateHeld, Class: failure.RateLimit, Until: now.Add(time.Hour), Revision: 1}))
	}
	e.mu.Unlock()
	return e
}

var benchSizes = []int{100, 10_000, 100_000}

func BenchmarkAdmitEmpty(b *testing.B) {
	e := benchEngine(0)
	b.ReportAllocs()
	for b.Loop() {
		if e.Admit("openai", "k1", "gpt-4.1") != Admit {
			b.Fatal("denied")
		}
	}
}

// BenchmarkAdmit: a free target on a provider with holds (the common case
// on the request path), a held one, and free targets from every core, with
// 100, 10,000 and 100,000 holds in the table.
func BenchmarkAdmit(b *testing.B) {
	for _, n := range benchSizes {
		e := benchEngine(n)
		held := benchScope(n - 1)
		b.Run(fmt.Sprintf("holds=%d/free", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if e.Admit("p1", "k1", "gpt-4.1") != Admit {
					b.Fatal("denied")
				}
			}
		})
		b.Run(fmt.Sprintf("holds=%d/held", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if e.Admit(held.Provider, held.Key, held.Model) != Deny {
					b.Fatal("admitted")
				}
			}
		})
		b.Run(fmt.Sprintf("holds=%d/parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					e.Admit("p3", "k3", "gpt-4.1")
				}
			})
		})
	}
}

// BenchmarkApply: the cost of one change to the local table with 100,
// 10,000 and 100,000 holds present. watch: a record another instance
// wrote, as the store watcher applies it (a held record moves on, the
// count stays). report: a failure reported on this instance that holds a
// new scope (the table entry and the queued write), then the removal of
// that scope, so the count stays: two changes per op.
func BenchmarkApply(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("holds=%d/watch", n), func(b *testing.B) {
			e := benchEngine(n)
			until := time.Now().Add(time.Hour)
			recs := make([]Record, min(n, 4096))
			for i := range recs {
				sc := benchScope(i)
				recs[i] = Record{ID: sc.ID(), Scope: sc, State: StateHeld, Class: failure.RateLimit, Until: until, RecordedBy: "other"}
			}
			rev := uint64(1)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				rev++
				e.applyChange(Change{ID: recs[i%len(recs)].ID, Record: recs[i%len(recs)], Revision: rev})
			}
		})
		b.Run(fmt.Sprintf("holds=%d/report+remove", n), func(b *testing.B) {
			e := benchEngine(n)
			out := Outcome{Result: failure.Result{Class: failure.QuotaExhausted, Scope: failure.ScopeKey}, Status: 429}
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = fmt.Sprintf("fresh-%d", i)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				key := keys[i%len(keys)]
				e.Report("p7", key, "gpt-4.1", false, out)
				e.mu.Lock()
				e.removeLocked(Scope{Kind: ScopeKey, Provider: "p7", Key: key}.ID())
				e.mu.Unlock()
				e.next() // the queued write, which no writer takes here
			}
		})
	}
}

func TestAdmitDoesNotAllocate(t *testing.T) {
	e := benchEngine(1000)
	for _, target := range [][3]string{{"openai", "k1", "gpt-4.1"}, {"openai", "k2", "gpt-4.1"}, {"none", "k", "m"}} {
		if n := testing.AllocsPerRun(1000, func() { e.Admit(target[0], target[1], target[2]) }); n != 0 {
			t.Errorf("Admit%v: %v allocs", target, n)
		}
	}
	// a ramping target too
	now := time.Now()
	sc := Scope{Kind: ScopeKey, Provider: "r", Key: "k"}
	e.mu.Lock()
	e.installLocked(e.newEntry(Record{ID: sc.ID(), Scope: sc, State: StateReleased, RecordedAt: now, RampUntil: now.Add(time.Hour)}))
	e.mu.Unlock()
	if n := testing.AllocsPerRun(1000, func() { e.Admit("r", "k", "m") }); n != 0 {
		t.Errorf("Admit on a ramp: %v allocs", n)
	}
}

func TestPolicyFromConfig(t *testing.T) {
	f, tr := 0.0, true
	cfg := &config.Config{
		File: "gw.yaml",
		Resilience: config.Resilience{
			Ladder:  config.Ladders{RateLimit: config.Ladder{Base: 2 * time.Second}},
			Jitter:  &f,
			Breaker: config.Breaker{FailureOnStatuses: []string{"5xx", "429"}},
		},
		Providers: []config.Provider{
			{Name: "a", Resilience: config.Resilience{Breaker: config.Breaker{Scope: "model", ConsecutiveFailures: new(3), Enabled: &tr}}},
			{Name: "b", Resilience: config.Resilience{Ladder: config.Ladders{ModelRetired: config.Ladder{Base: 30 * 24 * time.Hour}}}},
		},
	}
	_, err := PolicyFromConfig(cfg)
	if err == nil || err.Error() != "gw.yaml: providers[1].resilience.ladder.model_retired: ceiling 168h0m0s is below base 720h0m0s (after defaults and global values)" {
		t.Fatalf("err = %v", err)
	}
	cfg.Providers = cfg.Providers[:1]
	p, err := PolicyFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.Global.Jitter != 0 || p.Global.LadderWait(failure.RateLimit, 0) != 2*time.Second || len(p.Global.Breaker.FailureOnStatuses) != 2 {
		t.Errorf("global %+v", p.Global)
	}
	a := p.For("a")
	if !a.Breaker.PerModel || a.Breaker.ConsecutiveFailures != 3 || a.Jitter != 0 || a.LadderWait(failure.RateLimit, 0) != 2*time.Second {
		t.Errorf("a %+v", a)
	}
	if !a.Breaker.countsForBreaker(429) || a.Breaker.countsForBreaker(404) || !a.Breaker.countsForBreaker(0) {
		t.Error("failure_on_statuses")
	}
}
