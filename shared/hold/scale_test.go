package hold

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"switchyard.dev/shared/failure"
)

// groupsOf counts recs the way HoldCounts does.
func groupsOf(recs []Record) map[Group]int {
	out := map[Group]int{}
	for _, r := range recs {
		out[Group{Class: r.Class, Kind: r.Scope.Kind, State: r.State}]++
	}
	return out
}

// TestHoldCountsFollowTheTable: the counts HoldCounts keeps as records
// come and go (new holds, pins, a release, the end of a ramp, a record
// replaced) equal a count over the whole table, on the engine that wrote
// and on one that applied the changes from the store; Hold finds each
// record Holds lists.
func TestHoldCountsFollowTheTable(t *testing.T) {
	f := newFleet(t, 2, nil)
	a, b := f.engines[0], f.engines[1]
	ctx := context.Background()
	same := func(what string, want int) {
		t.Helper()
		for _, e := range f.engines {
			// Polled as a whole: a write landing between Holds and Hold
			// changes a record's revision (a .ci/run saw 0 then 1).
			eventually(t, what, func() bool {
				h := e.Holds()
				if len(h) != want || !maps.Equal(e.HoldCounts(), groupsOf(h)) {
					return false
				}
				for _, r := range h {
					if got, ok := e.Hold(r.ID); !ok || got.Revision != r.Revision || got.State != r.State {
						return false
					}
				}
				return true
			})
		}
	}
	for i := range 5 {
		a.Report("p", fmt.Sprintf("k%d", i), fmt.Sprintf("m%d", i), false, fail(failure.ModelRetired, failure.ScopeKeyModel))
	}
	a.Report("p", "k9", "", false, fail(failure.CredentialRejected, failure.ScopeKey))
	same("six holds", 6)
	if err := b.Pin(ctx, Scope{Kind: ScopeProviderModel, Provider: "p", Model: "m"}, t0.Add(time.Hour), "drain"); err != nil {
		t.Fatal(err)
	}
	// A pin over an existing hold replaces its record (another group).
	if err := b.Pin(ctx, Scope{Kind: ScopeKey, Provider: "p", Key: "k9"}, t0.Add(time.Hour), "drain"); err != nil {
		t.Fatal(err)
	}
	same("a pin added, one replacing a hold", 7)
	if err := a.Release(ctx, "p.k0.m0", SourceAdmin); err != nil {
		t.Fatal(err)
	}
	same("one released", 7)
	if c := a.HoldCounts()[Group{Class: failure.ModelRetired, Kind: ScopeKeyModel, State: StateReleased}]; c != 1 {
		t.Errorf("released model_retired key+model holds: %d, want 1", c)
	}
	// The ramp ends: the released record leaves the table.
	f.clock.Advance(DefaultSettings().RampDuration + time.Second)
	same("the ramp over", 6)
	if _, ok := a.Hold("p.k0.m0"); ok {
		t.Error("Hold finds a record whose ramp is over")
	}
	if _, ok := a.Hold("p.nope"); ok {
		t.Error("Hold finds a record that never was")
	}
}

// pinEngine is an engine (not running) whose table has n pins of
// provider+model scopes held until until.
func pinEngine(n int, until time.Time) *Engine {
	e := NewEngine(EngineOptions{Store: NewMemStore(), Instance: "scale", Clock: NewFakeClock(t0)})
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range n {
		sc := Scope{Kind: ScopeProviderModel, Provider: "p", Model: fmt.Sprintf("m-%06d", i)}
		e.installLocked(e.newEntry(Record{ID: sc.ID(), Scope: sc, State: StateHeld, Class: failure.Unrecognised,
			Pinned: true, Source: SourceAdmin, Since: t0, Until: until, Revision: uint64(i + 1)}))
	}
	return e
}

// TestSweepLooksAtWhatCameUp: the sweep (every second, under the table's
// lock) looks at the pins and ramps whose time came, not at every pin
// present: with 10,000 pins held for an hour and 10 ending now, a sweep
// looks at 10 deadlines, the next one at none, and the 10 pins are
// released.
func TestSweepLooksAtWhatCameUp(t *testing.T) {
	e := pinEngine(10_000, t0.Add(time.Hour))
	e.mu.Lock()
	for i := range 10 {
		sc := Scope{Kind: ScopeProviderModel, Provider: "p", Model: fmt.Sprintf("ending-%d", i)}
		e.installLocked(e.newEntry(Record{ID: sc.ID(), Scope: sc, State: StateHeld, Pinned: true,
			Source: SourceAdmin, Since: t0, Until: t0.Add(time.Second), Revision: 1}))
	}
	e.mu.Unlock()
	e.sweep(t0.Add(2 * time.Second))
	if e.swept != 10 {
		t.Errorf("the sweep looked at %d deadlines, want the 10 that came up", e.swept)
	}
	e.sweep(t0.Add(3 * time.Second))
	if e.swept != 10 {
		t.Errorf("a second sweep looked at %d more deadlines, want 0", e.swept-10)
	}
	for i := range 10 {
		id := Scope{Kind: ScopeProviderModel, Provider: "p", Model: fmt.Sprintf("ending-%d", i)}.ID()
		if r, ok := e.Hold(id); !ok || r.State != StateReleased || r.ReleaseSource != SourceExpired {
			t.Errorf("pin %s after its end: %+v %v, want released (expired)", id, r, ok)
		}
	}
	if r, _ := e.Hold(Scope{Kind: ScopeProviderModel, Provider: "p", Model: "m-000000"}.ID()); r.State != StateHeld {
		t.Errorf("a pin held for an hour is %s after 3 s", r.State)
	}
}

// BenchmarkSweep: one sweep with 100, 10,000 and 100,000 pins present,
// none ending (the engine's writer runs it every second, under the
// table's lock: the watch's applies wait for it).
func BenchmarkSweep(b *testing.B) {
	benchWithPins(b, func(e *Engine) { e.sweep(t0.Add(time.Second)) })
}

// benchWithPins runs f as a benchmark on engines with 100, 10,000 and
// 100,000 pins held for an hour, after one call of f outside the timing.
func benchWithPins(b *testing.B, f func(e *Engine)) {
	for _, n := range benchSizes {
		e := pinEngine(n, t0.Add(time.Hour))
		f(e)
		b.Run(fmt.Sprintf("pins=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f(e)
			}
		})
	}
}

// TestDue: Due lists the live records that may be probed now (held past
// their until, probing with a lapsed lease), and follows the table: a
// record that changed after it came due is listed as it is now.
func TestDue(t *testing.T) {
	e := pinEngine(1_000, t0.Add(time.Hour))
	ids := func(recs []Record) map[string]bool {
		out := map[string]bool{}
		for _, r := range recs {
			out[r.ID] = true
		}
		return out
	}
	if d := e.Due(t0); len(d) != 0 {
		t.Fatalf("due at t0: %d records", len(d))
	}
	e.mu.Lock()
	for i := range 5 {
		sc := Scope{Kind: ScopeKey, Provider: "p", Key: fmt.Sprintf("k%d", i)}
		e.installLocked(e.newEntry(Record{ID: sc.ID(), Scope: sc, State: StateHeld, Class: failure.RateLimit,
			Until: t0.Add(time.Second), Revision: 1}))
	}
	sc := Scope{Kind: ScopeKey, Provider: "p", Key: "probed"}
	e.installLocked(e.newEntry(Record{ID: sc.ID(), Scope: sc, State: StateProbing, Class: failure.RateLimit,
		Until: t0, Probe: &Probe{Owner: "other", LeaseUntil: t0.Add(2 * time.Second)}, Revision: 1}))
	e.mu.Unlock()
	if d := e.Due(t0.Add(1500 * time.Millisecond)); len(d) != 5 || ids(d)["p.probed"] {
		t.Fatalf("due at 1.5 s: %v, want the 5 held until 1 s", ids(d))
	}
	if d := e.Due(t0.Add(3 * time.Second)); len(d) != 6 || !ids(d)["p.probed"] {
		t.Fatalf("due at 3 s: %v, want 6 with the lapsed lease", ids(d))
	}
	// One is probed now (a new lease), one released: neither is due.
	e.mu.Lock()
	e.installLocked(e.newEntry(Record{ID: "p.k0", Scope: Scope{Kind: ScopeKey, Provider: "p", Key: "k0"}, State: StateProbing,
		Class: failure.RateLimit, Probe: &Probe{Owner: "other", LeaseUntil: t0.Add(time.Minute)}, Revision: 2}))
	e.installLocked(e.newEntry(Record{ID: "p.k1", Scope: Scope{Kind: ScopeKey, Provider: "p", Key: "k1"}, State: StateReleased,
		Class: failure.RateLimit, RampUntil: t0.Add(time.Minute), Revision: 2}))
	e.mu.Unlock()
	if d := ids(e.Due(t0.Add(4 * time.Second))); len(d) != 4 || d["p.k0"] || d["p.k1"] {
		t.Fatalf("due after a new lease and a release: %v", d)
	}
	// Its lease lapses: due again.
	if d := ids(e.Due(t0.Add(2 * time.Minute))); !d["p.k0"] || d["p.k1"] {
		t.Fatalf("due after the new lease lapsed: %v", d)
	}
}

// BenchmarkDue: the prober's look for due holds (every second) with 100,
// 10,000 and 100,000 pins present, none due.
func BenchmarkDue(b *testing.B) {
	benchWithPins(b, func(e *Engine) { e.Due(t0.Add(time.Second)) })
}

// TestBreakerStatesWithManyHolds: a tripped breaker's hold shows among
// 10,000 pins, and goes with its record.
func TestBreakerStatesWithManyHolds(t *testing.T) {
	e := pinEngine(10_000, t0.Add(time.Hour))
	sc := Scope{Kind: ScopeProviderModel, Provider: "p", Model: "tripped"}
	e.mu.Lock()
	e.installLocked(e.newEntry(Record{ID: sc.ID(), Scope: sc, State: StateHeld, Class: failure.Transient,
		Source: SourceBreaker, Since: t0, Until: t0.Add(time.Minute), Revision: 1}))
	e.mu.Unlock()
	if st := e.BreakerStates(); st["p/tripped"] != "open" || len(st) != 1 {
		t.Fatalf("breaker states %v, want p/tripped open alone", st)
	}
	e.mu.Lock()
	e.removeLocked(sc.ID())
	e.mu.Unlock()
	if st := e.BreakerStates(); len(st) != 0 {
		t.Fatalf("breaker states after the trip's record went: %v", st)
	}
}

// BenchmarkBreakerStates: what a metrics scrape asks of the breakers with
// 100, 10,000 and 100,000 pins present.
func BenchmarkBreakerStates(b *testing.B) {
	benchWithPins(b, func(e *Engine) { e.BreakerStates() })
}
