package planlimit

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"
)

// TestChargeAndRemaining: a budget that admits nothing (a provider's) is
// charged without admission; every member sees what is left fleet-wide,
// the exhaustion is recorded once, and Remaining reads 0 from then on.
func TestChargeAndRemaining(t *testing.T) {
	clk := newClock(start)
	var mu sync.Mutex
	var exhs []Exhaustion
	ms := threeMembers(t, clk, memberOpts{onExhausted: func(e Exhaustion) {
		mu.Lock()
		defer mu.Unlock()
		exhs = append(exhs, e)
	}})
	const id = "_provider_openai"
	lim := &Limits{Plan: "provider:openai"}
	lim.Budget.Day, lim.Budget.Month = 1.00, 0.50 // the month is the tightest

	if left, limited := ms[0].Remaining(id, lim); !limited || left != 0.50 {
		t.Fatalf("before any charge: %g %v, want 0.5 true", left, limited)
	}
	if _, limited := ms[0].Remaining(id, &Limits{}); limited {
		t.Fatal("limits without a budget read as limited")
	}
	ms[0].Charge(id, lim, 100, 0.10)
	ms[1].Charge(id, lim, 100, 0.15)
	testkit.CheckFor(t, promptly, 5*time.Millisecond, func() error {
		for _, m := range ms {
			if left, _ := m.Remaining(id, lim); math.Abs(left-0.25) > 1e-9 {
				return fmt.Errorf("%s: $%g left, want $0.25", m.Instance(), left)
			}
		}
		return nil
	})
	if n := ms[2].Snapshot(id).InFlight; n != 0 {
		t.Fatalf("charges left %d in flight", n)
	}
	ms[2].Charge(id, lim, 100, 0.30) // over the month's budget
	testkit.CheckFor(t, promptly, 5*time.Millisecond, func() error {
		for _, m := range ms {
			if left, _ := m.Remaining(id, lim); left != 0 {
				return fmt.Errorf("%s: $%g left after the budget ran out", m.Instance(), left)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(exhs) != 1 || exhs[0].Client != id || exhs[0].Period != "month" {
			return fmt.Errorf("exhaustions %+v, want one of the month", exhs)
		}
		return nil
	})
	// Nothing charged is not a charge; NaN and Inf are ignored.
	ms[0].Charge(id, lim, 0, math.NaN())
	ms[0].Charge(id, lim, 0, math.Inf(1))
	if got := ms[0].Snapshot(id).Day.SpendUSD; math.IsNaN(got) || math.IsInf(got, 0) {
		t.Fatalf("day spend %g", got)
	}
}
