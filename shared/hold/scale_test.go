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
			eventually(t, what, func() bool {
				h := e.Holds()
				return len(h) == want && maps.Equal(e.HoldCounts(), groupsOf(h))
			})
			for _, r := range e.Holds() {
				if got, ok := e.Hold(r.ID); !ok || got.Revision != r.Revision || got.State != r.State {
					t.Errorf("%s: Hold(%s) = %+v, %v; Holds has %+v", what, r.ID, got, ok, r)
				}
			}
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
