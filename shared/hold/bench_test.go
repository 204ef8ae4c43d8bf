package hold

import (
	"fmt"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
)

func benchEngine(holds int) *Engine {
	e := NewEngine(EngineOptions{Store: NewMemStore(), Instance: "bench"})
	now := time.Now()
	e.mu.Lock()
	for i := range holds {
		sc := Scope{Kind: ScopeKeyModel, Provider: "openai", Key: fmt.Sprintf("k%d", i), Model: "gpt-4.1"}
		if i%2 == 0 {
			sc = Scope{Kind: ScopeKey, Provider: fmt.Sprintf("p%d", i%7), Key: fmt.Sprintf("k%d", i)}
		}
		e.installLocked(e.newEntry(Record{ID: sc.ID(), Scope: sc, State: StateHeld, Class: failure.RateLimit, Until: now.Add(time.Hour)}))
	}
	e.mu.Unlock()
	return e
}

func BenchmarkAdmitEmpty(b *testing.B) {
	e := benchEngine(0)
	b.ReportAllocs()
	for b.Loop() {
		if e.Admit("openai", "k1", "gpt-4.1") != Admit {
			b.Fatal("denied")
		}
	}
}

func BenchmarkAdmit1000Holds(b *testing.B) {
	e := benchEngine(1000)
	b.Run("free", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if e.Admit("openai", "k2", "gpt-4.1") != Admit {
				b.Fatal("denied")
			}
		}
	})
	b.Run("held", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if e.Admit("openai", "k1", "gpt-4.1") != Deny {
				b.Fatal("admitted")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				e.Admit("openai", "k3", "gpt-4.1")
			}
		})
	})
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
			{Name: "a", Resilience: config.Resilience{Breaker: config.Breaker{Scope: "model", ConsecutiveFailures: 3, Enabled: &tr}}},
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
