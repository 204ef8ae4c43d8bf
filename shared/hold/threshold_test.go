package hold

import (
	"context"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
)

// TestPolicySuccessThreshold: breaker.success_threshold defaults to 1,
// is set globally and overridden per provider (0: inherit).
func TestPolicySuccessThreshold(t *testing.T) {
	if n := DefaultSettings().Breaker.SuccessThreshold; n != 1 {
		t.Fatalf("default %d, want 1", n)
	}
	cfg := &config.Config{
		Resilience: config.Resilience{Breaker: config.Breaker{SuccessThreshold: 2}},
		Providers: []config.Provider{
			{Name: "a", Resilience: config.Resilience{Breaker: config.Breaker{SuccessThreshold: 4}}},
			{Name: "b"},
		},
	}
	p, err := PolicyFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		provider string
		want     int
	}{{"a", 4}, {"b", 2}, {"unknown", 2}} {
		if got := p.For(c.provider).Breaker.SuccessThreshold; got != c.want {
			t.Errorf("%s: success_threshold %d, want %d", c.provider, got, c.want)
		}
	}
}

// TestTripHoldNeedsSuccessThreshold: with success_threshold 3 a tripped
// breaker's hold is released by the third consecutive successful probe
// only. The first two keep it held with probe_successes 1 and 2, due
// again at once (the next probe needs no clock advance), whether the
// probe is a caller's request (Admit/Report) or the prober's
// (TryProbe/ProbeResult); a failed probe resets the count and climbs the
// ladder.
func TestTripHoldNeedsSuccessThreshold(t *testing.T) {
	f := newFleet(t, 2, func(o *EngineOptions) {
		o.Policy = DefaultPolicy()
		o.Policy.Global.CallerGrace = 0
		o.Policy.Global.Breaker.SuccessThreshold = 3
		o.Policy.Providers = map[string]*Settings{"p": &o.Policy.Global}
	})
	a := f.engines[0]
	ctx := context.Background()
	for range 5 {
		a.Report("p", "k", "m", false, Outcome{Status: 503, Result: failure.Result{Class: failure.Transient, Code: "server_error"}})
	}
	trip := f.stored(t, "p._")
	if !isTrip(trip) || trip.State != StateHeld {
		t.Fatalf("trip hold %+v", trip)
	}
	for _, e := range f.engines {
		eventually(t, "the trip everywhere", func() bool { return e.Admit("p", "k", "m") == Deny })
	}
	f.clock.Advance(30*time.Second + time.Millisecond)

	// wantCount waits until the store has the hold held with n successes,
	// due now.
	wantCount := func(n int) Record {
		t.Helper()
		var rec Record
		eventually(t, "the counted probe in the store", func() bool {
			r, err := f.store.Get(ctx, "p._")
			rec = r
			return err == nil && r.State == StateHeld && r.ProbeSuccesses == n && r.Probe == nil
		})
		if !rec.Until.Equal(f.clock.Now()) {
			t.Fatalf("after %d successes the hold is due at %s, want now (%s)", n, rec.Until, f.clock.Now())
		}
		return rec
	}

	// Caller requests: two successes are counted, the hold stays.
	for n := 1; n <= 2; n++ {
		owner := probeOnce(t, f)
		owner.Report("p", "k", "m", true, Outcome{OK: true})
		rec := wantCount(n)
		if rec.Rung != 0 {
			t.Fatalf("rung %d after a success", rec.Rung)
		}
		for _, e := range f.engines {
			eventually(t, "the count everywhere", func() bool {
				h := e.Holds()
				return len(h) == 1 && h[0].ProbeSuccesses == n && h[0].State == StateHeld
			})
		}
	}
	if n := f.events.count(EventProbe, ProbeCounted); n != 2 {
		t.Fatalf("%d counted probe events, want 2", n)
	}
	if f.events.count(EventRelease, "") != 0 {
		t.Fatal("released before the third success")
	}

	// A failed probe resets the count and climbs a rung.
	owner := probeOnce(t, f)
	owner.Report("p", "k", "m", true, Outcome{Status: 502, Result: failure.Result{Class: failure.Transient, Code: "server_error"}})
	var rec Record
	eventually(t, "the failed probe in the store", func() bool {
		r, err := f.store.Get(ctx, "p._")
		rec = r
		return err == nil && r.State == StateHeld && r.Rung == 1 && r.Probe == nil
	})
	if rec.ProbeSuccesses != 0 || rec.Until.Sub(f.clock.Now()) != time.Minute {
		t.Fatalf("after a failed probe: probe_successes %d, wait %s (want 0, 1m)", rec.ProbeSuccesses, rec.Until.Sub(f.clock.Now()))
	}
	for _, e := range f.engines {
		eventually(t, "the reset everywhere", func() bool {
			h := e.Holds()
			return len(h) == 1 && h[0].Rung == 1 && h[0].ProbeSuccesses == 0
		})
	}
	f.clock.Advance(time.Minute + time.Millisecond)

	// The prober's way: TryProbe and ProbeResult, three times.
	b := f.engines[1]
	for n := 1; n <= 3; n++ {
		var got bool
		eventually(t, "the probe lease", func() bool {
			_, ok, err := b.TryProbe(ctx, "p._")
			if err != nil && err != errPending {
				t.Fatalf("TryProbe: %v", err)
			}
			got = ok
			return ok
		})
		if !got {
			t.Fatal("no lease")
		}
		if err := b.ProbeResult(ctx, "p._", Outcome{OK: true}); err != nil {
			t.Fatal(err)
		}
		if n < 3 {
			wantCount(n)
			if f.events.count(EventRelease, "") != 0 {
				t.Fatalf("released after %d successes", n)
			}
		}
	}
	eventually(t, "released by the third success", func() bool {
		r, err := f.store.Get(ctx, "p._")
		return err == nil && r.State == StateReleased && r.ProbeSuccesses == 0 && r.ReleaseSource == "probe"
	})
	eventually(t, "one release", func() bool {
		return f.events.count(EventRelease, "probe") == 1 && f.events.count(EventProbe, ProbeReleased) == 1
	})
	if n := f.events.count(EventProbe, ProbeCounted); n != 4 {
		t.Errorf("%d counted probe events, want 4", n)
	}
	for _, e := range f.engines {
		eventually(t, "closed again everywhere", func() bool { return e.BreakerStates()["p"] == "closed" })
	}
}

// TestTripHoldDefaultThresholdReleasesAtOnce: with the default
// success_threshold (1) the first successful probe releases the trip
// hold, and holds of other classes never count successes.
func TestTripHoldDefaultThresholdReleasesAtOnce(t *testing.T) {
	f := newFleet(t, 1, func(o *EngineOptions) {
		o.Policy = DefaultPolicy()
		o.Policy.Global.CallerGrace = 0
		o.Policy.Global.Breaker.SuccessThreshold = 3
		q := DefaultSettings()
		q.CallerGrace = 0
		o.Policy.Providers = map[string]*Settings{"p": &o.Policy.Global, "q": &q}
	})
	e := f.engines[0]
	// a credential hold on p is not a trip: one success releases it
	dueHold(t, f, failure.CredentialRejected)
	probeOnce(t, f).Report("p", "k", "m", true, Outcome{OK: true})
	eventually(t, "the credential hold released", func() bool {
		r, err := f.store.Get(context.Background(), "p.k")
		return err == nil && r.State == StateReleased
	})
	// q keeps the default threshold
	for range 5 {
		e.Report("q", "k", "m", false, Outcome{Status: 500, Result: failure.Result{Class: failure.Transient}})
	}
	rec := f.stored(t, "q._")
	f.clock.Advance(rec.Until.Sub(f.clock.Now()) + time.Millisecond)
	eventually(t, "the probe of q", func() bool { return e.Admit("q", "k", "m") == AdmitProbe })
	e.Report("q", "k", "m", true, Outcome{OK: true})
	eventually(t, "q released by one success", func() bool {
		r, err := f.store.Get(context.Background(), "q._")
		return err == nil && r.State == StateReleased
	})
	if n := f.events.count(EventProbe, ProbeCounted); n != 0 {
		t.Errorf("%d counted probe events, want 0", n)
	}
}
