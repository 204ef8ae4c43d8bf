package hold

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// recorder is an Emitter that keeps events.
type recorder struct {
	mu sync.Mutex
	ev []Event
}

func (r *recorder) Emit(e Event) {
	r.mu.Lock()
	r.ev = append(r.ev, e)
	r.mu.Unlock()
}

func (r *recorder) count(kind EventKind, outcome string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.ev {
		if e.Kind == kind && (outcome == "" || e.Outcome == outcome) {
			n++
		}
	}
	return n
}

type fleet struct {
	clock   *FakeClock
	store   *MemStore
	engines []*Engine
	events  *recorder
}

// half is a Rand that makes jitter zero and admits ramp shares above 0.5.
func half() float64 { return 0.5 }

func newFleet(t *testing.T, n int, mod func(*EngineOptions)) *fleet {
	t.Helper()
	f := &fleet{clock: NewFakeClock(t0), events: &recorder{}}
	f.store = NewMemStoreClock(f.clock)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		// Caller requests probe at once here (the prober's first claim
		// has its own test).
		pol := DefaultPolicy()
		pol.Global.CallerGrace = 0
		opts := EngineOptions{Store: f.store, Emitter: f.events, Instance: string(rune('a' + i)), Clock: f.clock, Rand: half, Policy: pol}
		if mod != nil {
			mod(&opts)
		}
		e := NewEngine(opts)
		f.engines = append(f.engines, e)
		wg.Go(func() {
			if err := e.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return f
}

// eventually polls cond (no fixed sleeps: the engines run in goroutines).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func fail(class failure.Class, scope failure.Scope) Outcome {
	return Outcome{Result: failure.Result{Class: class, Scope: scope, Code: class.String(), Reason: "test"}}
}

func (f *fleet) stored(t *testing.T, id string) Record {
	t.Helper()
	var rec Record
	eventually(t, "record "+id+" in the store", func() bool {
		r, err := f.store.Get(context.Background(), id)
		rec = r
		return err == nil
	})
	return rec
}

func TestClassesHoldTheirScope(t *testing.T) {
	tests := []struct {
		name  string
		out   Outcome
		model string
		want  string // scope id, "" for no hold
	}{
		{"rate limit holds the key", fail(failure.RateLimit, failure.ScopeKey), "m", "p.k"},
		{"per-model rate limit", fail(failure.RateLimit, failure.ScopeKeyModel), "gpt-4.1", "p.k.gpt-4=2E1"},
		{"credential holds the key", fail(failure.CredentialRejected, failure.ScopeKey), "m", "p.k"},
		{"quota holds the key", fail(failure.QuotaExhausted, failure.ScopeKey), "m", "p.k"},
		{"no access holds key+model", fail(failure.ModelNotAccessible, failure.ScopeKeyModel), "m", "p.k.m"},
		{"retired holds key+model", fail(failure.ModelRetired, failure.ScopeKeyModel), "m", "p.k.m"},
		{"region holds key+model", fail(failure.RegionBlocked, failure.ScopeKeyModel), "m", "p.k.m"},
		{"scope from class when unset", fail(failure.ModelRetired, failure.ScopeNone), "m", "p.k.m"},
		{"bad request never holds", fail(failure.RequestRejected, failure.ScopeNone), "m", ""},
		{"unrecognised never holds", fail(failure.Unrecognised, failure.ScopeNone), "m", ""},
		{"one transient does not hold", fail(failure.Transient, failure.ScopeNone), "m", ""},
		{"cancelled never holds", Outcome{Cancelled: true, Result: failure.Result{Class: failure.CredentialRejected}}, "m", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, 1, nil)
			e := f.engines[0]
			e.Report("p", "k", tt.model, false, tt.out)
			holds := e.Holds()
			if tt.want == "" {
				if len(holds) != 0 || e.Admit("p", "k", tt.model) != Admit {
					t.Fatalf("held: %+v", holds)
				}
				return
			}
			if len(holds) != 1 || holds[0].ID != tt.want {
				t.Fatalf("holds = %+v, want %s", holds, tt.want)
			}
			if e.Admit("p", "k", tt.model) != Deny {
				t.Error("the held target is still admitted locally")
			}
			if e.Admit("p", "other", tt.model) != Admit {
				t.Error("another key is denied")
			}
			rec := f.stored(t, tt.want)
			if rec.Class != tt.out.Result.Class || rec.State != StateHeld || rec.RecordedBy != "a" {
				t.Errorf("stored %+v", rec)
			}
			if holds[0].Scope.Kind == ScopeKeyModel && e.Admit("p", "k", "other-model") != Admit {
				t.Error("a key+model hold denies the key's other models")
			}
		})
	}
}

func TestLadder(t *testing.T) {
	s := DefaultSettings()
	for _, tt := range []struct {
		class failure.Class
		rung  int
		want  time.Duration
	}{
		{failure.RateLimit, 0, 5 * time.Second},
		{failure.RateLimit, 1, 10 * time.Second},
		{failure.RateLimit, 5, 160 * time.Second},
		{failure.RateLimit, 6, 5 * time.Minute},
		{failure.RateLimit, 60, 5 * time.Minute},
		{failure.CredentialRejected, 0, 5 * time.Minute},
		{failure.QuotaExhausted, 3, 80 * time.Minute},
		{failure.ModelRetired, 20, 7 * 24 * time.Hour},
		{failure.Transient, 0, 30 * time.Second},
		{failure.Transient, 4, 5 * time.Minute},
	} {
		if got := s.LadderWait(tt.class, tt.rung); got != tt.want {
			t.Errorf("LadderWait(%s, %d) = %s, want %s", tt.class, tt.rung, got, tt.want)
		}
	}
	// jitter stays within ±10 % and spreads
	r := rand.New(rand.NewPCG(1, 2))
	lo, hi := time.Hour, time.Duration(0)
	for range 1000 {
		d := s.Wait(failure.CredentialRejected, 0, failure.Result{}, r.Float64)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 270*time.Second || hi > 330*time.Second || hi-lo < 50*time.Second {
		t.Errorf("jittered 5m waits span %s..%s, want within 4m30s..5m30s and spread", lo, hi)
	}
	// stated waits are used as given, with the floor; rule TTLs as given
	if d := s.Wait(failure.RateLimit, 3, failure.Result{HasWait: true, RetryAfter: 20 * time.Second}, half); d != 20*time.Second {
		t.Errorf("stated 20s -> %s", d)
	}
	if d := s.Wait(failure.RateLimit, 0, failure.Result{HasWait: true, RetryAfter: 200 * time.Millisecond}, half); d != time.Second {
		t.Errorf("stated 200ms -> %s, want the 1s floor", d)
	}
	if d := s.Wait(failure.QuotaExhausted, 0, failure.Result{HoldTTL: 6 * time.Hour}, half); d != 6*time.Hour {
		t.Errorf("rule ttl -> %s", d)
	}
}

func TestConcurrentWritersRecordOnce(t *testing.T) {
	f := newFleet(t, 3, nil)
	var wg sync.WaitGroup
	for _, e := range f.engines {
		for range 5 {
			wg.Go(func() { e.Report("p", "k", "m", false, fail(failure.CredentialRejected, failure.ScopeKey)) })
		}
	}
	wg.Wait()
	rec := f.stored(t, "p.k")
	for i, e := range f.engines {
		eventually(t, "every table has the stored record", func() bool {
			h := e.Holds()
			return len(h) == 1 && h[0].Revision == rec.Revision && h[0].RecordedBy == rec.RecordedBy
		})
		if e.Admit("p", "k", "m") != Deny {
			t.Errorf("engine %d admits", i)
		}
	}
	if n := f.store.Len(); n != 1 {
		t.Errorf("store has %d records", n)
	}
	eventually(t, "writers done", func() bool { return pendingWrites(f) == 0 })
	if n := f.events.count(EventHold, ""); n != 1 {
		t.Errorf("%d hold events, want 1", n)
	}
}

func pendingWrites(f *fleet) int {
	n := 0
	for _, e := range f.engines {
		e.wmu.Lock()
		n += len(e.pending)
		e.wmu.Unlock()
	}
	return n
}

// dueHold records a credential hold on p.k through engine 0, waits until
// every engine has it, and moves the clock past its wait.
func dueHold(t *testing.T, f *fleet, class failure.Class) Record {
	t.Helper()
	f.engines[0].Report("p", "k", "m", false, fail(class, class.DefaultScope()))
	id := ScopeFor(failure.Result{Class: class}, "p", "k", "m").ID()
	rec := f.stored(t, id)
	for _, e := range f.engines {
		eventually(t, "hold everywhere", func() bool { h := e.Holds(); return len(h) == 1 && h[0].Revision == rec.Revision })
	}
	f.clock.Advance(rec.Until.Sub(f.clock.Now()) + time.Millisecond)
	return rec
}

func TestExactlyOneProbeFleetWide(t *testing.T) {
	f := newFleet(t, 3, nil)
	dueHold(t, f, failure.CredentialRejected)
	var probes, calls atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, e := range f.engines {
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					calls.Add(1)
					if e.Admit("p", "k", "m") == AdmitProbe {
						probes.Add(1)
					}
				}
			})
		}
	}
	eventually(t, "a probe", func() bool { return probes.Load() > 0 })
	time.Sleep(50 * time.Millisecond) // let everyone keep asking a while
	close(stop)
	wg.Wait()
	if n := probes.Load(); n != 1 {
		t.Fatalf("%d probes over %d Admit calls, want exactly 1", n, calls.Load())
	}
	rec := f.stored(t, "p.k")
	if rec.State != StateProbing || rec.Probe == nil {
		t.Fatalf("record %+v", rec)
	}
	// the lease lapses unused: another lease can be taken, again once
	f.clock.Advance(31 * time.Second)
	got := 0
	eventually(t, "a second probe after the lease lapsed", func() bool {
		for _, e := range f.engines {
			if e.Admit("p", "k", "m") == AdmitProbe {
				got++
			}
		}
		return got > 0
	})
	for range 100 {
		for _, e := range f.engines {
			if e.Admit("p", "k", "m") == AdmitProbe {
				got++
			}
		}
	}
	if got != 1 {
		t.Errorf("%d probes in the second lease", got)
	}
}

// probeOnce waits until some engine hands out the probe and returns it.
func probeOnce(t *testing.T, f *fleet) *Engine {
	t.Helper()
	var owner *Engine
	eventually(t, "the probe", func() bool {
		for _, e := range f.engines {
			if e.Admit("p", "k", "m") == AdmitProbe {
				owner = e
				return true
			}
		}
		return false
	})
	return owner
}

// TestProbeLeaseLeft: only the instance whose probe is out knows how long
// it may run (the proxy ends the attempt there).
func TestProbeLeaseLeft(t *testing.T) {
	f := newFleet(t, 2, nil)
	dueHold(t, f, failure.RateLimit)
	for _, e := range f.engines {
		if _, ok := e.ProbeLeaseLeft("p", "k", "m"); ok {
			t.Fatal("a lease left before any probe was handed out")
		}
	}
	owner := probeOnce(t, f)
	if left, ok := owner.ProbeLeaseLeft("p", "k", "m"); !ok || left != 30*time.Second {
		t.Fatalf("left %s %v, want the 30 s lease", left, ok)
	}
	f.clock.Advance(10 * time.Second)
	if left, ok := owner.ProbeLeaseLeft("p", "k", "m"); !ok || left != 20*time.Second {
		t.Errorf("left %s %v after 10 s", left, ok)
	}
	if _, ok := owner.ProbeLeaseLeft("p", "k2", "m"); ok {
		t.Error("a lease left on another key")
	}
	for _, e := range f.engines {
		if _, ok := e.ProbeLeaseLeft("p", "k", "m"); e != owner && ok {
			t.Error("another instance has the probe's lease")
		}
	}
}

func TestProbeOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		out     Outcome
		state   State
		rung    int
		wait    time.Duration // from now, for held
		outcome string
	}{
		{"serves: released", Outcome{OK: true}, StateReleased, 0, 0, ProbeReleased},
		{"same refusal: rung+1", fail(failure.CredentialRejected, failure.ScopeKey), StateHeld, 1, 10 * time.Minute, ProbeEscalated},
		{"5xx: same rung", fail(failure.Transient, failure.ScopeNone), StateHeld, 0, 5 * time.Minute, ProbeSameRung},
		{"different failure: settled", fail(failure.RequestRejected, failure.ScopeNone), StateReleased, 0, 0, ProbeSettled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, 2, nil)
			dueHold(t, f, failure.CredentialRejected)
			owner := probeOnce(t, f)
			owner.Report("p", "k", "m", true, tt.out)
			eventually(t, "the transition in the store", func() bool {
				r, err := f.store.Get(context.Background(), "p.k")
				return err == nil && r.State == tt.state && r.Probe == nil
			})
			rec := f.stored(t, "p.k")
			if rec.Rung != tt.rung {
				t.Errorf("rung = %d, want %d", rec.Rung, tt.rung)
			}
			if tt.state == StateHeld {
				if got := rec.Until.Sub(f.clock.Now()); got != tt.wait {
					t.Errorf("wait = %s, want %s", got, tt.wait)
				}
				for _, e := range f.engines {
					eventually(t, "held again everywhere", func() bool { return e.Admit("p", "k", "m") == Deny && e.Holds()[0].State == StateHeld })
				}
			} else {
				if !rec.RampUntil.Equal(f.clock.Now().Add(time.Minute)) {
					t.Errorf("ramp until %s", rec.RampUntil)
				}
				if tt.outcome == ProbeReleased && f.events.count(EventRelease, "probe") != 1 {
					t.Error("no release event")
				}
			}
			eventually(t, "one probe event", func() bool { return f.events.count(EventProbe, tt.outcome) == 1 })
		})
	}
}

// TestCancelledProbeGivesTheLeaseBack: a probe whose caller went away (or
// whose deadline passed) says nothing about the target, and its lease is
// given back: the hold is due again at once, for the next request to
// probe, rather than denied fleet-wide until the lease lapses.
func TestCancelledProbeGivesTheLeaseBack(t *testing.T) {
	f := newFleet(t, 2, nil)
	due := dueHold(t, f, failure.CredentialRejected)
	owner := probeOnce(t, f)
	owner.Report("p", "k", "m", true, Outcome{Cancelled: true, Result: failure.Result{Class: failure.Transient}})
	eventually(t, "the lease given back in the store", func() bool {
		r, err := f.store.Get(context.Background(), "p.k")
		return err == nil && r.State == StateHeld && r.Probe == nil
	})
	if rec := f.stored(t, "p.k"); rec.Rung != 0 || !rec.Until.Equal(due.Until) {
		t.Errorf("record %+v: want rung 0 and the same due time", rec)
	}
	probeOnce(t, f) // the clock has not moved: a new probe at once
	if n := f.events.count(EventProbe, ""); n != 0 {
		t.Errorf("%d probe events for a cancelled probe", n)
	}
}

func TestSettledRecordsTheNewFailure(t *testing.T) {
	f := newFleet(t, 1, nil)
	dueHold(t, f, failure.ModelNotAccessible)
	owner := probeOnce(t, f)
	// the model is reachable now but the key is out of quota: the
	// key+model hold is settled and the key itself is held
	owner.Report("p", "k", "m", true, fail(failure.QuotaExhausted, failure.ScopeKey))
	eventually(t, "settled and the quota hold recorded", func() bool {
		a, err1 := f.store.Get(context.Background(), "p.k.m")
		b, err2 := f.store.Get(context.Background(), "p.k")
		return err1 == nil && err2 == nil && a.State == StateReleased && b.State == StateHeld && b.Class == failure.QuotaExhausted
	})
	if owner.Admit("p", "k", "m") != Deny {
		t.Error("the key is out of quota but admitted")
	}
}

func TestRampShareGrows(t *testing.T) {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(7, 7))
	rnd := func() float64 { mu.Lock(); defer mu.Unlock(); return r.Float64() }
	f := newFleet(t, 1, func(o *EngineOptions) { o.Rand = rnd })
	e := f.engines[0]
	dueHold(t, f, failure.CredentialRejected)
	probeOnce(t, f)
	e.Report("p", "k", "m", true, Outcome{OK: true})
	eventually(t, "released", func() bool { h := e.Holds(); return len(h) == 1 && h[0].State == StateReleased && h[0].Revision > 0 })
	share := func() float64 {
		n := 0
		for range 20000 {
			if e.Admit("p", "k", "m") == Admit {
				n++
			}
		}
		return float64(n) / 20000
	}
	for _, tt := range []struct {
		after time.Duration
		want  float64
	}{{0, 0.1}, {30 * time.Second, 0.55}, {27 * time.Second, 0.955}} {
		f.clock.Advance(tt.after)
		if got := share(); got < tt.want-0.02 || got > tt.want+0.02 {
			t.Errorf("share after +%s = %.3f, want %.3f", tt.after, got, tt.want)
		}
	}
	f.clock.Advance(4 * time.Second)
	if got := share(); got != 1 {
		t.Errorf("share after the ramp = %.3f", got)
	}
	eventually(t, "the released record expires", func() bool {
		f.clock.Advance(time.Second) // the sweep runs on the engine clock
		return f.store.Len() == 0 && len(e.Holds()) == 0
	})
}

func TestManualRelease(t *testing.T) {
	f := newFleet(t, 2, nil)
	a, b := f.engines[0], f.engines[1]
	ctx := context.Background()
	if err := a.Release(ctx, "p.nope", SourceAdmin); err == nil {
		t.Error("Release of an unknown id succeeded")
	}
	a.Report("p", "k", "m1", false, fail(failure.ModelRetired, failure.ScopeKeyModel))
	a.Report("p", "k", "m2", false, fail(failure.RegionBlocked, failure.ScopeKeyModel))
	a.Report("p", "k", "m", false, fail(failure.RateLimit, failure.ScopeKey))
	a.Report("p", "k2", "m", false, fail(failure.RateLimit, failure.ScopeKey))
	eventually(t, "4 holds on b", func() bool { return len(b.Holds()) == 4 })
	if err := b.Release(ctx, "p.k2", SourceAdmin); err != nil {
		t.Fatalf("Release: %v", err)
	}
	eventually(t, "released everywhere", func() bool {
		for _, e := range f.engines {
			for _, h := range e.Holds() {
				if h.ID == "p.k2" && h.State != StateReleased {
					return false
				}
			}
		}
		return true
	})
	if r := f.stored(t, "p.k2"); r.ReleasedBy != b.Instance() || r.ReleaseSource != SourceAdmin {
		t.Errorf("released record says released_by %q source %q", r.ReleasedBy, r.ReleaseSource)
	}
	n, err := b.CredentialChanged(ctx, "p", "k")
	if err != nil || n != 3 {
		t.Fatalf("CredentialChanged = %d, %v", n, err)
	}
	eventually(t, "the key's holds released in the store", func() bool {
		for _, id := range []string{"p.k", "p.k.m1", "p.k.m2"} {
			if r, err := f.store.Get(ctx, id); err != nil || r.State != StateReleased {
				return false
			}
		}
		return true
	})
	if f.events.count(EventRelease, SourceCredential) != 3 || f.events.count(EventRelease, SourceAdmin) != 1 {
		t.Errorf("events: %+v", f.events.ev)
	}
}

func TestPin(t *testing.T) {
	f := newFleet(t, 2, nil)
	e := f.engines[0]
	sc := Scope{Kind: ScopeProvider, Provider: "p"}
	if err := e.Pin(context.Background(), sc, t0.Add(time.Hour), "drain"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pin applied by both engines", func() bool {
		return f.engines[1].Admit("p", "any", "m") == Deny
	})
	if e.Admit("p", "any", "m") != Deny {
		t.Error("pinned provider admitted")
	}
	if _, ok, err := e.TryProbe(context.Background(), sc.ID()); ok || err != nil {
		t.Errorf("probe before until: %v %v", ok, err)
	}
	// At its until the drain ends by itself: released (no probe), once
	// fleet-wide although both engines see it end.
	f.clock.Advance(time.Hour)
	eventually(t, "the pin released at its end", func() bool {
		r, err := f.store.Get(context.Background(), sc.ID())
		return err == nil && r.State == StateReleased && !r.Pinned && r.ReleaseSource == SourceExpired && r.ReleasedBy != ""
	})
	eventually(t, "both engines applied the release", func() bool {
		for _, en := range f.engines {
			if h := en.Holds(); len(h) != 1 || h[0].State != StateReleased {
				return false
			}
		}
		return true
	})
	if n := f.events.count(EventRelease, SourceExpired); n != 1 {
		t.Errorf("%d release events with outcome expired, want 1", n)
	}
	if n := f.events.count(EventProbe, ""); n != 0 {
		t.Errorf("%d probe events: an ended pin is not probed", n)
	}
}

// TestBreakerFollowsPolicyChange: a runtime change of
// consecutive_failures applies to a breaker already counting, both ways.
func TestBreakerFollowsPolicyChange(t *testing.T) {
	f := newFleet(t, 1, func(o *EngineOptions) { o.Policy = DefaultPolicy() })
	e := f.engines[0]
	transient := fail(failure.Transient, failure.ScopeNone)
	transient.Status = 503
	withThreshold := func(n int) {
		p := DefaultPolicy()
		p.Global.Breaker.ConsecutiveFailures = n
		e.SetPolicy(p)
	}
	e.Report("p", "k", "", false, transient) // the breaker exists from here
	e.Report("p", "k", "", false, Outcome{OK: true})
	withThreshold(50)
	for range 10 {
		e.Report("p", "k", "", false, transient)
	}
	if len(e.Holds()) != 0 {
		t.Fatalf("tripped after 10 failures with consecutive_failures 50: %+v", e.Holds())
	}
	withThreshold(12)
	e.Report("p", "k", "", false, transient)
	if len(e.Holds()) != 0 {
		t.Fatal("tripped after 11 failures with consecutive_failures 12")
	}
	e.Report("p", "k", "", false, transient)
	hs := e.Holds()
	if len(hs) != 1 || hs[0].ID != "p._" || !strings.Contains(hs[0].Reason, "12 consecutive") {
		t.Fatalf("after 12 failures with consecutive_failures 12: %+v", hs)
	}
}

func TestBreakerTripsIntoProviderHold(t *testing.T) {
	f := newFleet(t, 2, func(o *EngineOptions) {
		o.Policy = DefaultPolicy()
		o.Policy.Global.CallerGrace = 0
		o.Policy.Providers = map[string]*Settings{"p": &o.Policy.Global}
	})
	a, b := f.engines[0], f.engines[1]
	transient := func(status int, retrying bool) Outcome {
		o := fail(failure.Transient, failure.ScopeNone)
		o.Status, o.Retrying = status, retrying
		return o
	}
	for range 4 {
		a.Report("p", "k", "m", false, transient(503, true)) // retries: not counted
		a.Report("p", "k", "m", false, transient(503, false))
		a.Report("p", "k", "m", false, Outcome{Cancelled: true})
		a.Report("p", "k", "m", false, transient(0, false)) // a timeout counts
		a.Report("p", "k", "m", false, Outcome{OK: true})   // resets
	}
	a.Report("p", "k", "m", false, transient(404, false)) // not a counted status
	if len(a.Holds()) != 0 {
		t.Fatalf("tripped early: %+v", a.Holds())
	}
	if st := a.BreakerStates()["p"]; st != "closed" {
		t.Errorf("state %q", st)
	}
	for range 4 {
		a.Report("p", "k", "m", false, transient(502, false))
	}
	if len(a.Holds()) != 0 {
		t.Fatal("tripped after 4")
	}
	a.Report("p", "k2", "m", false, transient(500, false))
	if a.Admit("p", "k3", "other") != Deny {
		t.Fatal("provider not held after the trip")
	}
	rec := f.stored(t, "p._")
	if rec.Class != failure.Transient || rec.Source != SourceBreaker || rec.Until.Sub(rec.RecordedAt) != 30*time.Second {
		t.Errorf("trip hold %+v", rec)
	}
	eventually(t, "b sees the trip", func() bool { return b.Admit("p", "k", "m") == Deny })
	if st := b.BreakerStates()["p"]; st != "open" {
		t.Errorf("b state %q", st)
	}
	eventually(t, "one trip event", func() bool { return f.events.count(EventTrip, "") == 1 })
	f.clock.Advance(30*time.Second + time.Millisecond)
	owner := probeOnce(t, f)
	if st := owner.BreakerStates()["p"]; st != "half-open" {
		t.Errorf("state while probing %q", st)
	}
	owner.Report("p", "k", "m", true, Outcome{OK: true})
	eventually(t, "closed again", func() bool { return a.BreakerStates()["p"] == "closed" && b.BreakerStates()["p"] == "closed" })
	// the breaker starts over: 4 more failures do not trip it
	for range 4 {
		a.Report("p", "k", "m", false, transient(500, false))
	}
	if h := a.Holds(); len(h) != 1 || h[0].State != StateReleased {
		t.Errorf("holds after reset: %+v", h)
	}
}

// TestBreakerStartsOverWhenItsScopeComesBack: a breaker that trips while
// its provider scope is already held under another class records nothing
// (the first record stands), and one whose trip hold is pinned over loses
// its hold to the pin; either way it starts over closed when the scope's
// hold ends, and trips again on the next run of failures.
func TestBreakerStartsOverWhenItsScopeComesBack(t *testing.T) {
	ctx := context.Background()
	provider := Scope{Kind: ScopeProvider, Provider: "p"}
	transient := func() Outcome {
		o := fail(failure.Transient, failure.ScopeNone)
		o.Status = 503
		return o
	}
	trip := func(e *Engine, key string) {
		for range 5 {
			e.Report("p", key, "m", false, transient())
		}
	}
	tests := []struct {
		name string
		key  string // "": a keyless provider (its holds are provider scopes)
		// hold holds the provider scope and trips the breaker under it;
		// the scope's hold is released after.
		hold func(t *testing.T, f *fleet, e *Engine)
	}{
		{"tripped under a pin", "k", func(t *testing.T, f *fleet, e *Engine) {
			if err := e.Pin(ctx, provider, f.clock.Now().Add(10*time.Minute), "drain"); err != nil {
				t.Fatal(err)
			}
			trip(e, "k") // requests in flight when the pin landed
			if err := e.Release(ctx, "p._", SourceAdmin); err != nil {
				t.Fatal(err)
			}
		}},
		{"trip hold pinned over", "k", func(t *testing.T, f *fleet, e *Engine) {
			trip(e, "k")
			f.stored(t, "p._")
			if err := e.Pin(ctx, provider, f.clock.Now().Add(10*time.Minute), "drain"); err != nil {
				t.Fatal(err)
			}
			if err := e.Release(ctx, "p._", SourceAdmin); err != nil {
				t.Fatal(err)
			}
		}},
		{"keyless rate limit, released by its probe", "", func(t *testing.T, f *fleet, e *Engine) {
			e.Report("p", "", "m", false, fail(failure.RateLimit, failure.ScopeKey))
			f.stored(t, "p._")
			trip(e, "")
			f.clock.Advance(6 * time.Second)
			eventually(t, "the probe", func() bool { return e.Admit("p", "", "m") == AdmitProbe })
			e.Report("p", "", "m", true, Outcome{OK: true})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, 1, func(o *EngineOptions) {
				o.Policy.Providers = map[string]*Settings{"p": &o.Policy.Global}
			})
			e := f.engines[0]
			tt.hold(t, f, e)
			eventually(t, "released in the store", func() bool {
				r, err := f.store.Get(ctx, "p._")
				return err == nil && r.State == StateReleased
			})
			if st := e.BreakerStates()["p"]; st != "closed" {
				t.Errorf("breaker %q after its scope was released, want closed", st)
			}
			f.clock.Advance(2 * time.Minute) // the ramp is over
			eventually(t, "the ramp over", func() bool { return len(e.Holds()) == 0 })
			trip(e, tt.key)
			if h := e.Holds(); len(h) != 1 || h[0].Source != SourceBreaker || h[0].State != StateHeld {
				t.Fatalf("5 consecutive 503s after the release: holds %+v, breakers %v", h, e.BreakerStates())
			}
		})
	}
}

func TestStoreDownHoldsLocallyThenWrites(t *testing.T) {
	f := newFleet(t, 2, nil)
	a, b := f.engines[0], f.engines[1]
	f.store.SetDown(true)
	a.Report("p", "k", "m", false, fail(failure.CredentialRejected, failure.ScopeKey))
	if a.Admit("p", "k", "m") != Deny {
		t.Fatal("not held locally while the store is down")
	}
	eventually(t, "a write attempt failed", func() bool { return a.storeDown.Load() })
	if f.store.Len() != 0 {
		t.Fatal("written while down")
	}
	// due while down: the instance probes for itself
	f.clock.Advance(6 * time.Minute)
	var got Admission
	eventually(t, "a local probe", func() bool { got = a.Admit("p", "k", "m"); return got == AdmitProbe })
	a.Report("p", "k", "m", true, fail(failure.CredentialRejected, failure.ScopeKey))
	if a.Admit("p", "k", "m") != Deny {
		t.Fatal("not held after the local probe")
	}
	f.store.SetDown(false)
	f.clock.Advance(10 * time.Second) // the retry timer
	rec := f.stored(t, "p.k")
	if rec.Rung != 1 || rec.State != StateHeld {
		t.Errorf("reconciled record %+v", rec)
	}
	eventually(t, "b sees it", func() bool { return b.Admit("p", "k", "m") == Deny })
}

// TestLocalLeaseFallsBackToTheStore: a lease taken locally while the store
// was down (nothing queued writes it) gives way to the stored record: it
// lapses back to it, and a record the store brings (a release by another
// instance, the hold's own write) replaces it.
func TestLocalLeaseFallsBackToTheStore(t *testing.T) {
	// localLease makes the store fail, then lets a's Admit take a local
	// lease of the due hold p.k (written before the outage unless
	// inOutage) and brings the store back.
	localLease := func(t *testing.T, f *fleet, inOutage bool) {
		t.Helper()
		a := f.engines[0]
		if inOutage {
			f.store.SetDown(true)
		}
		a.Report("p", "k", "m", false, fail(failure.RateLimit, failure.ScopeKey))
		if !inOutage {
			rec := f.stored(t, "p.k")
			for _, e := range f.engines {
				eventually(t, "the hold everywhere", func() bool { h := e.Holds(); return len(h) == 1 && h[0].Revision == rec.Revision })
			}
			f.store.SetDown(true)
		} else {
			eventually(t, "a write attempt failed", func() bool { return a.storeDown.Load() })
		}
		f.clock.Advance(time.Minute) // due
		a.Admit("p", "k", "m")       // asks for the lease: the store is down
		eventually(t, "a local lease", func() bool { h := a.Holds(); return len(h) == 1 && h[0].State == StateProbing })
		if f.store.Len() != 0 && inOutage {
			t.Fatal("written while down")
		}
		f.store.SetDown(false)
	}
	probed := func(t *testing.T, a *Engine) {
		t.Helper()
		eventually(t, "a probe of the hold in the store", func() bool { return a.Admit("p", "k", "m") == AdmitProbe })
		rec := f0(t, a)
		if rec.State != StateProbing || rec.Probe == nil || rec.Revision == 0 {
			t.Fatalf("the probe's lease is not the stored one: %+v", rec)
		}
	}
	tests := []struct {
		name string
		run  func(t *testing.T, f *fleet)
	}{
		{"the lease lapses unused", func(t *testing.T, f *fleet) {
			localLease(t, f, false)
			f.clock.Advance(31 * time.Second)
			probed(t, f.engines[0])
		}},
		{"a hold recorded in the outage is written", func(t *testing.T, f *fleet) {
			localLease(t, f, true)
			f.clock.Advance(10 * time.Second) // the write's retry timer
			rec := f.stored(t, "p.k")
			eventually(t, "the written record in place of the lease", func() bool {
				r := f0(t, f.engines[0])
				return r.State == StateHeld && r.Revision == rec.Revision
			})
			probed(t, f.engines[0])
		}},
		{"the hold's write lands while the probe is out", func(t *testing.T, f *fleet) {
			// Before, the written record replaced the lease: a second probe
			// was handed out while the first ran, and the first's outcome
			// settled the second's lease.
			localLease(t, f, true)
			a := f.engines[0]
			eventually(t, "the probe handed out", func() bool { return a.Admit("p", "k", "m") == AdmitProbe })
			f.clock.Advance(10 * time.Second) // the write's retry timer
			rec := f.stored(t, "p.k")
			eventually(t, "the lease takes the written revision", func() bool {
				r := f0(t, a)
				return r.State == StateProbing && r.Revision == rec.Revision
			})
			if got := a.Admit("p", "k", "m"); got == AdmitProbe || got == Admit {
				t.Fatalf("a second probe while the first runs: %v", got)
			}
			a.Report("p", "k", "m", true, Outcome{OK: true})
			eventually(t, "the probe's success released the hold in the store", func() bool {
				r, err := f.store.Get(context.Background(), "p.k")
				return err == nil && r.State == StateReleased
			})
		}},
		{"an operator pins it while the probe is out", func(t *testing.T, f *fleet) {
			// The pin replaces the lease: the probe's success settles
			// nothing (before, it was written over the pin and released
			// the drained key).
			localLease(t, f, false)
			a, admin := f.engines[0], f.engines[1]
			eventually(t, "the probe handed out", func() bool { return a.Admit("p", "k", "m") == AdmitProbe })
			sc := Scope{Kind: ScopeKey, Provider: "p", Key: "k"}
			if err := admin.Pin(context.Background(), sc, f.clock.Now().Add(time.Hour), "drain"); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the pin applied", func() bool { return f0(t, a).Pinned })
			a.Report("p", "k", "m", true, Outcome{OK: true})
			if r := f.stored(t, "p.k"); !r.Pinned || r.State != StateHeld {
				t.Fatalf("the pin was overwritten: %+v", r)
			}
		}},
		{"another instance releases it", func(t *testing.T, f *fleet) {
			localLease(t, f, false)
			a, admin := f.engines[0], f.engines[1]
			if err := admin.Release(context.Background(), "p.k", SourceAdmin); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the release applied", func() bool { return f0(t, a).State == StateReleased })
			f.clock.Advance(2 * time.Minute) // the ramp is over
			eventually(t, "the key admitted", func() bool { return a.Admit("p", "k", "m") == Admit })
		}},
		{"the record is deleted", func(t *testing.T, f *fleet) {
			localLease(t, f, false)
			if err := f.store.Delete(context.Background(), "p.k", 0); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the key admitted", func() bool { return f.engines[0].Admit("p", "k", "m") == Admit })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newFleet(t, 2, nil)) })
	}
}

// f0 is the first record of e's table.
func f0(t *testing.T, e *Engine) Record {
	t.Helper()
	h := e.Holds()
	if len(h) == 0 {
		t.Fatal("no record")
	}
	return h[0]
}

// A hold whose id is longer than MaxIDLen (a caller's model name of a
// few kilobytes) is never recorded, and a write of one (an operator's pin)
// fails once: the store would refuse it for ever, and the KV store's NATS
// connection would not survive the attempt.
func TestLongIDNotRecorded(t *testing.T) {
	f := newFleet(t, 1, nil)
	e := f.engines[0]
	long := strings.Repeat("m.", 1500)
	e.Report("p", "k", long, false, fail(failure.ModelNotAccessible, failure.ScopeKeyModel))
	e.Report("p", "k2", long, false, fail(failure.ModelNotAccessible, failure.ScopeKeyModel))
	if h := e.Holds(); len(h) != 0 {
		t.Fatalf("%d holds recorded, want none: %s", len(h), h[0].ID[:60])
	}
	if e.Admit("p", "k", long) != Admit {
		t.Error("the model is held")
	}
	sc := Scope{Kind: ScopeKeyModel, Provider: "p", Key: "k", Model: long}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Pin(ctx, sc, t0.Add(time.Hour), "drain"); !errors.Is(err, ErrInvalidID) {
		t.Fatalf("Pin: %v, want ErrInvalidID", err)
	}
	eventually(t, "the refused pin dropped", func() bool { return len(e.Holds()) == 0 && pendingWrites(f) == 0 })
	if e.storeDown.Load() {
		t.Error("the refusal counted as the store down")
	}
	// The writer goes on with the next hold.
	e.Report("p", "k", "m", false, fail(failure.CredentialRejected, failure.ScopeKey))
	f.stored(t, "p.k")
}

func TestPolicyWaitUsesProviderOverrides(t *testing.T) {
	p := DefaultPolicy()
	s := p.Global.clone()
	s.Ladders[failure.RateLimit] = Ladder{time.Second, time.Minute}
	p.Providers = map[string]*Settings{"fast": &s}
	if got := p.For("fast").LadderWait(failure.RateLimit, 0); got != time.Second {
		t.Errorf("override %s", got)
	}
	if got := p.For("other").LadderWait(failure.RateLimit, 0); got != 5*time.Second {
		t.Errorf("global %s", got)
	}
}

// Holds from reported failures carry the engine's source: the proxy's by
// default, the prober's for its checks; an operator rule wins.
func TestHoldSource(t *testing.T) {
	tests := []struct {
		name   string
		source string
		rule   string
		want   string
	}{
		{"proxy by default", "", "", SourceProxy},
		{"prober", SourceProber, "", SourceProber},
		{"rule", SourceProber, "my-rule", SourceRule},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, 1, func(o *EngineOptions) { o.Source = tt.source })
			out := fail(failure.CredentialRejected, failure.ScopeKey)
			out.Result.Rule = tt.rule
			f.engines[0].Report("p", "k", "m", false, out)
			if rec := f.stored(t, "p.k"); rec.Source != tt.want {
				t.Errorf("source %q, want %q", rec.Source, tt.want)
			}
		})
	}
}

// TestProberHasFirstClaim: a due hold the prober can settle with a cheap
// check (a revoked key) is left to the prober for resilience.probe.
// caller_grace: a proxy's caller requests do not take its probe lease
// before then; a hold only a caller can settle (a rate limit) is probed
// by a caller at once.
func TestProberHasFirstClaim(t *testing.T) {
	f := newFleet(t, 1, func(o *EngineOptions) { o.Policy.Global.CallerGrace = 3 * time.Second })
	e := f.engines[0]
	rec := dueHold(t, f, failure.CredentialRejected)
	for range 50 {
		if a := e.Admit("p", "k", "m"); a != Deny {
			t.Fatalf("a caller got %v for a hold in the prober's grace", a)
		}
	}
	if r := f.stored(t, rec.ID); r.State != StateHeld {
		t.Fatalf("the proxy took the lease in the grace: %+v", r.Probe)
	}
	f.clock.Advance(3 * time.Second)
	eventually(t, "a caller's probe after the grace", func() bool { return e.Admit("p", "k", "m") == AdmitProbe })

	g := newFleet(t, 1, func(o *EngineOptions) { o.Policy.Global.CallerGrace = time.Hour })
	dueHold(t, g, failure.RateLimit)
	eventually(t, "a caller's probe of a rate limit at once", func() bool { return g.engines[0].Admit("p", "k", "m") == AdmitProbe })
}

// tallyBus delivers every tally to every engine at once, as the fleet's
// NATS subscription does (each engine skips its own).
type tallyBus struct {
	mu      sync.Mutex
	engines []*Engine
	sent    []Tally
}

func (b *tallyBus) SendTally(t Tally) {
	b.mu.Lock()
	b.sent = append(b.sent, t)
	es := b.engines
	b.mu.Unlock()
	for _, e := range es {
		e.ApplyTally(t)
	}
}

// TestStaleTalliesDoNotTripAgain: failures another instance counted
// before an operator released the trip (a provider reset), whose tallies
// arrive after it, and failures of this instance's attempts sent before
// it, do not trip the breaker that started over; failures after the
// release do.
func TestStaleTalliesDoNotTripAgain(t *testing.T) {
	f := newFleet(t, 1, func(o *EngineOptions) { o.Policy.Providers = map[string]*Settings{"p": &o.Policy.Global} })
	e := f.engines[0]
	threshold := e.Policy().For("p").Breaker.ConsecutiveFailures
	tallies := func(at time.Time) {
		for range threshold {
			e.ApplyTally(Tally{Provider: "p", Outcome: TallyFailure, Operation: "chat", TargetModel: "m", Instance: "other", At: at})
		}
	}
	tallies(f.clock.Now())
	eventually(t, "the trip", func() bool { r, ok := e.Hold("p._"); return ok && r.State == StateHeld && r.Revision > 0 })
	before := f.clock.Now()
	f.clock.Advance(time.Second)
	if err := e.Release(context.Background(), "p._", SourceAdmin); err != nil {
		t.Fatal(err)
	}
	tallies(before) // counted before the reset, delivered after it
	if n := e.BreakerCount("p", ""); n != 0 {
		t.Fatalf("stale tallies counted %d", n)
	}
	inFlight := fail(failure.Transient, failure.ScopeNone)
	inFlight.Status, inFlight.Sent = 503, before // sent before the reset, answered after it
	for range threshold {
		e.Report("p", "k", "m", false, inFlight)
	}
	if n := e.BreakerCount("p", ""); n != 0 {
		t.Fatalf("failures of attempts sent before the reset counted %d", n)
	}
	if r, _ := e.Hold("p._"); r.State != StateReleased {
		t.Fatalf("failures from before the reset held the provider again: %+v", r)
	}
	f.clock.Advance(time.Second)
	tallies(f.clock.Now())
	eventually(t, "a new trip", func() bool { r, ok := e.Hold("p._"); return ok && r.State == StateHeld })
}

// TestBreakerCountsTheFleet: consecutive failures spread over three
// engines trip the breaker at the threshold, not at threshold x engines;
// a success anywhere resets every engine's count.
func TestBreakerCountsTheFleet(t *testing.T) {
	bus := &tallyBus{}
	f := newFleet(t, 3, func(o *EngineOptions) {
		o.Policy = DefaultPolicy()
		o.Policy.Global.CallerGrace = 0
		o.Policy.Providers = map[string]*Settings{"p": &o.Policy.Global}
		o.Tallies = bus
	})
	bus.engines = f.engines
	transient := fail(failure.Transient, failure.ScopeNone)
	transient.Status = 503
	transient.Operation = "embeddings"
	report := func(i int, out Outcome) { f.engines[i%3].Report("p", "k", "m", false, out) }

	for i := range 4 {
		report(i, transient)
	}
	for i, e := range f.engines {
		if n := e.BreakerCount("p", ""); n != 4 {
			t.Errorf("engine %d counts %d, want the fleet's 4", i, n)
		}
	}
	report(3, Outcome{OK: true}) // a success at one engine resets all
	for i, e := range f.engines {
		if n := e.BreakerCount("p", ""); n != 0 {
			t.Errorf("engine %d counts %d after a success, want 0", i, n)
		}
	}
	okTallies := 0
	for _, tl := range bus.sent {
		if tl.Outcome == TallySuccess {
			okTallies++
		}
	}
	report(0, Outcome{OK: true}) // nothing to reset: no tally
	if okTallies != 1 || bus.sent[len(bus.sent)-1].Outcome != TallySuccess {
		t.Errorf("success tallies %d (last %+v), want 1: only a success that reset a count is sent", okTallies, bus.sent[len(bus.sent)-1])
	}

	for i := range 4 {
		report(i, transient)
		if len(f.engines[0].Holds()) != 0 {
			t.Fatalf("tripped after %d failures", i+1)
		}
	}
	report(1, transient) // the fifth, at the second engine
	rec := f.stored(t, "p._")
	// what tripped it, whichever engine's trip was written (the others
	// heard the failure as a tally): the provider's breaker, the model
	// that failed
	if rec.Source != SourceBreaker || rec.Tripped == nil || *rec.Tripped != (Tripped{Operation: "embeddings", Model: "m"}) {
		t.Errorf("trip hold %+v, tripped %+v", rec, rec.Tripped)
	}
	eventually(t, "one trip event", func() bool { return f.events.count(EventTrip, "") == 1 })
	for i, e := range f.engines {
		eventually(t, "every engine holds the provider", func() bool { return e.Admit("p", "k", "m") == Deny })
		if st := e.BreakerStates()["p"]; st != "open" {
			t.Errorf("engine %d state %q", i, st)
		}
	}
	if f.events.count(EventTrip, "") != 1 {
		t.Errorf("%d trip events, want 1", f.events.count(EventTrip, ""))
	}
}

// TestTallyScope: a tally applies to the breaker of its scope only, and
// the engine's own tallies are not counted twice.
func TestTallyScope(t *testing.T) {
	f := newFleet(t, 1, func(o *EngineOptions) {
		o.Policy = DefaultPolicy()
		perModel := o.Policy.Global
		perModel.Breaker.PerModel = true
		o.Policy.Providers = map[string]*Settings{"p": &o.Policy.Global, "q": &perModel}
	})
	e := f.engines[0]
	for _, tl := range []Tally{
		{Provider: "p", Outcome: TallyFailure, Instance: "other"},
		{Provider: "p", Model: "m", Outcome: TallyFailure, Instance: "other"}, // p's breaker is not per model
		{Provider: "p", Outcome: TallyFailure, Instance: e.Instance()},        // its own
		{Provider: "q", Model: "m", Outcome: TallyFailure, Instance: "other"},
		{Provider: "q", Outcome: TallyFailure, Instance: "other"}, // q's breaker is per model
		{Provider: "unknown", Outcome: TallyFailure, Instance: "other"},
	} {
		e.ApplyTally(tl)
	}
	if n := e.BreakerCount("p", ""); n != 1 {
		t.Errorf("p counts %d, want 1", n)
	}
	if n := e.BreakerCount("q", "m"); n != 1 {
		t.Errorf("q/m counts %d, want 1", n)
	}
	if n := e.BreakerCount("q", ""); n != 0 {
		t.Errorf("q counts %d provider-wide, want 0", n)
	}
}

// admitSoft asks e.AdmitSoft until it answers without asking for a lease
// (the test's stand-in for the proxy's bounded wait).
func admitSoft(t *testing.T, e *Engine, key string) Admission {
	t.Helper()
	for range 100 {
		a, leasing := e.AdmitSoft("p", key, "m")
		if leasing == nil {
			return a
		}
		select {
		case <-leasing:
		case <-time.After(5 * time.Second):
			t.Fatal("the lease loop never tried the lease")
		}
	}
	t.Fatal("AdmitSoft kept asking for a lease")
	return Deny
}

// softFleet is a fleet of two engines whose rate_limit ladder waits an
// hour on rung 0 and two from rung 1 (its ceiling): an early probe is
// long before the hold is due, and its interval is six minutes.
func softFleet(t *testing.T) *fleet {
	return newFleet(t, 2, func(o *EngineOptions) {
		o.Policy.Global.Ladders[failure.RateLimit] = Ladder{time.Hour, 2 * time.Hour}
	})
}

// recordOf is e's local record of id (zero when it has none).
func recordOf(e *Engine, id string) Record {
	for _, r := range e.Holds() {
		if r.ID == id {
			return r
		}
	}
	return Record{}
}

// TestAdmitSoft: when every target is held, a soft hold takes one request
// at a time fleet-wide as an early probe, long before it is due; a hard
// hold takes none, nor a wait the provider stated; an early lease that
// lapses unused leaves the hold held until its due time.
func TestAdmitSoft(t *testing.T) {
	f := softFleet(t)
	a, b := f.engines[0], f.engines[1]
	rl := fail(failure.RateLimit, failure.ScopeKey)
	stated := rl
	stated.Result.RetryAfter, stated.Result.HasWait = time.Hour, true
	a.Report("p", "k", "m", false, rl)
	a.Report("p", "hard", "m", false, fail(failure.CredentialRejected, failure.ScopeKey))
	a.Report("p", "said", "m", false, stated)
	f.stored(t, "p.k")
	f.stored(t, "p.hard")
	if r := f.stored(t, "p.said"); !r.WaitStated {
		t.Errorf("a hold of a stated wait: %+v, want wait_stated", r)
	}
	eventually(t, "b applies the holds", func() bool {
		return b.Admit("p", "k", "m") == Deny && b.Admit("p", "hard", "m") == Deny && b.Admit("p", "said", "m") == Deny
	})

	if got := admitSoft(t, a, "hard"); got != Deny {
		t.Errorf("a credential hold: %v, want Deny", got)
	}
	if got := admitSoft(t, a, "said"); got != Deny {
		t.Errorf("a rate limit with a stated wait of an hour: %v, want Deny (a stated wait is never cut short)", got)
	}
	if got := admitSoft(t, a, "k"); got != AdmitProbe {
		t.Fatalf("a rate-limited key an hour before it is due: %v, want AdmitProbe (an early probe)", got)
	}
	if got := admitSoft(t, a, "k"); got != Deny {
		t.Errorf("a second request while the probe is out: %v, want Deny", got)
	}
	eventually(t, "b sees the lease", func() bool {
		r, err := f.store.Get(context.Background(), "p.k")
		return err == nil && r.State == StateProbing
	})
	eventually(t, "b applies the lease", func() bool { return admitSoft(t, b, "k") == Deny })

	// The early probe fails the same way: the rung and the due time stay
	// (only a due probe climbs), and the next early probe waits the
	// interval, fleet-wide.
	until := recordOf(a, "p.k").Until
	a.Report("p", "k", "m", true, rl)
	var rec Record
	eventually(t, "the probe's outcome is written", func() bool {
		r, err := f.store.Get(context.Background(), "p.k")
		rec = r
		return err == nil && r.State == StateHeld
	})
	set := DefaultSettings()
	set.Ladders[failure.RateLimit] = Ladder{time.Hour, 2 * time.Hour}
	interval := set.EarlyProbeInterval(failure.RateLimit, 0)
	if rec.Rung != 0 || !rec.Until.Equal(until) || !rec.EarlyProbeAfter.Equal(f.clock.Now().Add(interval)) {
		t.Errorf("after a failed early probe: rung %d until %v early_probe_after %v; want rung 0, until %v, early_probe_after %v",
			rec.Rung, rec.Until, rec.EarlyProbeAfter, until, f.clock.Now().Add(interval))
	}
	eventually(t, "b applies the outcome", func() bool { return recordOf(b, "p.k").Revision == rec.Revision })
	for _, e := range f.engines {
		if got, leasing := e.AdmitSoft("p", "k", "m"); got != Deny || leasing != nil {
			t.Errorf("%s within the early-probe interval: %v (asks for a lease: %v), want Deny at once", e.Instance(), got, leasing != nil)
		}
	}
	f.clock.Advance(interval)
	if got := admitSoft(t, b, "k"); got != AdmitProbe {
		t.Fatalf("b once the interval is over: %v, want AdmitProbe", got)
	}

	// b's early lease lapses unused: the hold is held until it is due,
	// nobody's normal traffic or prober takes it for a due probe
	eventually(t, "a applies b's lease", func() bool {
		r := recordOf(a, "p.k")
		return r.State == StateProbing && r.Probe != nil && r.Probe.Owner == b.Instance()
	})
	f.clock.Advance(DefaultSettings().ProbeLease + time.Second)
	if got := a.Admit("p", "k", "m"); got != Deny {
		t.Errorf("after the early lease lapsed: %v, want Deny", got)
	}
	if _, ok, err := a.TryProbe(context.Background(), "p.k"); ok || err != nil {
		t.Errorf("a due probe of a hold not due: ok %v, err %v", ok, err)
	}
	f.clock.Advance(interval)
	if got := admitSoft(t, a, "k"); got != AdmitProbe {
		t.Errorf("a soft request after the lease lapsed: %v, want AdmitProbe", got)
	}
}

// TestEarlyProbeLeaseGivenBack: an early probe whose request sent nothing
// (it stopped first) gives its lease back with the interval as it was:
// the next request may probe at once. One that was sent and cancelled
// gives the lease back, and the interval stands.
func TestEarlyProbeLeaseGivenBack(t *testing.T) {
	f := softFleet(t)
	a, b := f.engines[0], f.engines[1]
	a.Report("p", "k", "m", false, fail(failure.RateLimit, failure.ScopeKey))
	f.stored(t, "p.k")
	if got := admitSoft(t, a, "k"); got != AdmitProbe {
		t.Fatalf("the first early probe: %v", got)
	}
	a.Report("p", "k", "m", true, Outcome{Cancelled: true, Unsent: true})
	eventually(t, "b may probe at once", func() bool { return admitSoft(t, b, "k") == AdmitProbe })
	b.Report("p", "k", "m", true, Outcome{Cancelled: true})
	eventually(t, "the lease is given back", func() bool {
		r, err := f.store.Get(context.Background(), "p.k")
		return err == nil && r.State == StateHeld && r.Probe == nil
	})
	eventually(t, "a applies it", func() bool {
		return recordOf(a, "p.k").State == StateHeld && !recordOf(a, "p.k").EarlyProbeAfter.IsZero()
	})
	if got, leasing := a.AdmitSoft("p", "k", "m"); got != Deny || leasing != nil {
		t.Errorf("after a sent, cancelled early probe: %v (asks for a lease: %v), want Deny within the interval", got, leasing != nil)
	}
}

// TestDueProbesClimbToTheCeiling: a failed due probe climbs one rung, and
// the rung stops where the wait reaches the ladder's ceiling (the issue's
// hold was on rung 476); a hold that fails again while ramping climbs the
// same way.
func TestDueProbesClimbToTheCeiling(t *testing.T) {
	f := softFleet(t) // rate_limit: 1 h, then the 2 h ceiling from rung 1
	a := f.engines[0]
	rl := fail(failure.RateLimit, failure.ScopeKey)
	a.Report("p", "k", "m", false, rl)
	f.stored(t, "p.k")
	for i, want := range []int{1, 1, 1} {
		f.clock.Advance(3 * time.Hour)
		if _, ok, err := a.TryProbe(context.Background(), "p.k"); !ok || err != nil {
			t.Fatalf("due probe %d: ok %v err %v", i, ok, err)
		}
		if err := a.ProbeResult(context.Background(), "p.k", rl); err != nil {
			t.Fatal(err)
		}
		if r := recordOf(a, "p.k"); r.Rung != want || r.Until.Sub(f.clock.Now()) != 2*time.Hour {
			t.Fatalf("after due probe %d: rung %d, wait %s; want rung %d, 2h", i, r.Rung, r.Until.Sub(f.clock.Now()), want)
		}
		eventually(t, "the probe's outcome written", func() bool { r := recordOf(a, "p.k"); return r.State == StateHeld && r.Revision != 0 })
		if got, leasing := a.AdmitSoft("p", "k", "m"); got != Deny || leasing != nil {
			t.Errorf("an early probe right after due probe %d: %v (asks for a lease: %v), want Deny until the interval passed", i, got, leasing != nil)
		}
	}
	f.clock.Advance(3 * time.Hour)
	if _, ok, err := a.TryProbe(context.Background(), "p.k"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := a.ProbeResult(context.Background(), "p.k", Outcome{OK: true}); err != nil {
		t.Fatal(err)
	}
	a.Report("p", "k", "m", false, rl) // ramping: one rung up, capped
	if r := recordOf(a, "p.k"); r.State != StateHeld || r.Rung != 1 {
		t.Errorf("a failure while ramping: %+v, want held on rung 1", r)
	}
}

// TestLeasedHoldIsNotLeasedAgain: a due hold whose probe lease another
// instance holds is not leased again before the lease lapses, by the
// prober's TryProbe or by a soft pass; after it lapses, it is.
func TestLeasedHoldIsNotLeasedAgain(t *testing.T) {
	f := newFleet(t, 2, nil)
	a, b := f.engines[0], f.engines[1]
	a.Report("p", "k", "m", false, fail(failure.RateLimit, failure.ScopeKey))
	f.stored(t, "p.k")
	f.clock.Advance(time.Hour)
	if _, ok, err := a.TryProbe(context.Background(), "p.k"); !ok || err != nil {
		t.Fatalf("a's lease: ok %v err %v", ok, err)
	}
	eventually(t, "b applies a's lease", func() bool { return recordOf(b, "p.k").State == StateProbing })
	if _, ok, err := b.TryProbe(context.Background(), "p.k"); ok || err != nil {
		t.Errorf("b leased a hold whose lease a holds: ok %v err %v", ok, err)
	}
	if got := admitSoft(t, b, "k"); got != Deny {
		t.Errorf("b's soft pass: %v, want Deny", got)
	}
	f.clock.Advance(DefaultSettings().ProbeLease)
	if _, ok, err := b.TryProbe(context.Background(), "p.k"); !ok || err != nil {
		t.Errorf("b after a's lease lapsed: ok %v err %v", ok, err)
	}
}

// TestPerModelBreakersAreForgotten: a per-model breaker reset by a success
// is dropped: models callers name (unlisted ones) do not pile up breakers,
// and state series, each failing once.
func TestPerModelBreakersAreForgotten(t *testing.T) {
	f := newFleet(t, 1, func(o *EngineOptions) {
		o.Policy = DefaultPolicy()
		perModel := o.Policy.Global
		perModel.Breaker.PerModel = true
		o.Policy.Providers = map[string]*Settings{"q": &perModel}
	})
	e := f.engines[0]
	for i := range 100 {
		m := fmt.Sprintf("caller-model-%d", i)
		e.Report("q", "k", m, false, fail(failure.Transient, failure.ScopeNone))
		if n := e.BreakerCount("q", m); n != 1 {
			t.Fatalf("%s counts %d", m, n)
		}
		e.Report("q", "k", m, false, Outcome{OK: true})
	}
	if n := len(e.BreakerStates()); n != 0 {
		t.Errorf("%d breakers after every model's success: %v", n, e.BreakerStates())
	}
	e.ApplyTally(Tally{Provider: "q", Model: "m", Outcome: TallyFailure, Instance: "other"})
	e.ApplyTally(Tally{Provider: "q", Model: "m", Outcome: TallyFailure, Instance: "other"})
	if n := e.BreakerCount("q", "m"); n != 2 {
		t.Errorf("q/m counts %d after two tallies, want 2", n)
	}
}

// An attempt sent before an operator released its hold (a request in
// flight when the operator topped up the account and released the key)
// does not hold the target again when it fails: before, the release was
// undone one rung higher. An attempt sent after the release does, on
// rung 0: an operator's release starts the ladder over.
func TestReleaseNotUndoneByEarlierAttempts(t *testing.T) {
	f := newFleet(t, 2, nil)
	proxy, admin := f.engines[0], f.engines[1]
	proxy.Report("p", "k", "m", false, fail(failure.QuotaExhausted, failure.ScopeKey))
	rec := f.stored(t, "p.k")
	for _, e := range f.engines {
		eventually(t, "the hold everywhere", func() bool { h := e.Holds(); return len(h) == 1 && h[0].Revision == rec.Revision })
	}
	before := f.clock.Now()
	f.clock.Advance(time.Second)
	if err := admin.Release(context.Background(), "p.k", SourceAdmin); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the release applied", func() bool { return f0(t, proxy).State == StateReleased })

	out := fail(failure.QuotaExhausted, failure.ScopeKey)
	out.Sent = before // in flight during the release
	proxy.Report("p", "k", "m", false, out)
	if r := f0(t, proxy); r.State != StateReleased {
		t.Fatalf("an attempt sent before the release held the key again: %+v", r)
	}
	f.clock.Advance(time.Second)
	out.Sent = f.clock.Now()
	proxy.Report("p", "k", "m", false, out)
	if r := f0(t, proxy); r.State != StateHeld || r.Rung != 0 {
		t.Fatalf("an attempt sent after the release (held again, the ladder started over): %+v", r)
	}
}

// TestAdmitSoftFollowsTheProviderPolicy: a provider whose own
// resilience.all_held_policy is fail_fast takes no early probe, whatever
// the global policy says; its Retry-After is the due time.
func TestAdmitSoftFollowsTheProviderPolicy(t *testing.T) {
	f := newFleet(t, 1, func(o *EngineOptions) {
		fast := o.Policy.Global.clone()
		fast.AllHeld = config.AllHeldFailFast
		o.Policy.Providers = map[string]*Settings{"p": &fast}
	})
	e := f.engines[0]
	e.Report("p", "k", "m", false, fail(failure.RateLimit, failure.ScopeKey))
	rec := f.stored(t, "p.k")
	if got := admitSoft(t, e, "k"); got != Deny {
		t.Errorf("a fail_fast provider's soft hold: %v, want Deny", got)
	}
	if u, ok := e.HeldUntil("p", "k", "m"); !ok || !u.Equal(rec.Until) {
		t.Errorf("HeldUntil %v %v, want the due time %v", u, ok, rec.Until)
	}
}
