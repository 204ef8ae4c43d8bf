package hold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/testkit"
)

// gatedStore is a MemStore whose writes wait for open to close (or their
// context to end): the store is slow exactly when the engine shuts down.
type gatedStore struct {
	*MemStore
	open chan struct{}
}

func (g *gatedStore) gate(ctx context.Context) error {
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedStore) Create(ctx context.Context, rec Record, ttl time.Duration) (uint64, error) {
	if err := g.gate(ctx); err != nil {
		return 0, err
	}
	return g.MemStore.Create(ctx, rec, ttl)
}

func (g *gatedStore) Update(ctx context.Context, rec Record, rev uint64, ttl time.Duration) (uint64, error) {
	if err := g.gate(ctx); err != nil {
		return 0, err
	}
	return g.MemStore.Update(ctx, rec, rev, ttl)
}

// TestShutdownDrainsQueuedWrites: holds reported by the last requests
// before a graceful shutdown reach the store although the engine's
// context ended while they were queued, within DrainTimeout.
func TestShutdownDrainsQueuedWrites(t *testing.T) {
	store := &gatedStore{MemStore: NewMemStore(), open: make(chan struct{})}
	e := NewEngine(EngineOptions{Store: store, Instance: "proxy-a", DrainTimeout: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()

	const holds = 20
	for i := range holds {
		e.Report("p", fmt.Sprintf("k%d", i), "m", false, Outcome{Result: failure.Result{Class: failure.QuotaExhausted}, Status: 429})
	}
	cancel() // shutdown: the writer is blocked on the first write
	close(store.open)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := store.Len(); n != holds {
		t.Fatalf("%d of %d holds reached the store after shutdown", n, holds)
	}
}

// TestShutdownDrainIsBounded: a store that never answers does not keep a
// shutting-down engine for longer than DrainTimeout.
func TestShutdownDrainIsBounded(t *testing.T) {
	store := &gatedStore{MemStore: NewMemStore(), open: make(chan struct{})}
	e := NewEngine(EngineOptions{Store: store, Instance: "proxy-a", DrainTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	e.Report("p", "k", "m", false, Outcome{Result: failure.Result{Class: failure.QuotaExhausted}, Status: 429})
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return with a store that never answers")
	}
	if store.Len() != 0 {
		t.Fatal("a write landed through a closed gate")
	}
}

// TestWriteAfterStopAnswers: a write asked for after the engine stopped
// (a prober giving a probe lease back as it shuts down) is answered at
// once with the reason, instead of waiting for a writer that is gone; a
// later run writes again.
func TestWriteAfterStopAnswers(t *testing.T) {
	store := NewMemStore()
	e := NewEngine(EngineOptions{Store: store, Instance: "prober-a"})
	run := func() (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		return cancel, done
	}
	cancel, done := run()
	e.Report("p", "k", "m", false, Outcome{Result: failure.Result{Class: failure.QuotaExhausted}, Status: 429})
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if store.Len() != 1 {
			return errors.New("the hold is not written yet")
		}
		return nil
	})
	id := e.Holds()[0].ID
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- e.Release(context.Background(), id, SourceAdmin) }()
	select {
	case err := <-released:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("release after stop: %v, want the engine's stop (context canceled)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a release after the engine stopped is still waiting")
	}

	cancel, done = run()
	defer func() { cancel(); <-done }()
	testkit.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		e.wmu.Lock()
		defer e.wmu.Unlock()
		if e.stopped != nil {
			return errors.New("the new run has not started")
		}
		return nil
	})
	if err := e.Release(context.Background(), id, SourceAdmin); err != nil {
		t.Fatalf("release in a new run: %v", err)
	}
}

// lagStore is a MemStore whose watch can be held back (gate): the
// engine's table lags the store.
type lagStore struct {
	*MemStore
	mu   sync.Mutex
	gate chan struct{}
}

func (g *lagStore) Watch(ctx context.Context, apply func(Change)) error {
	return g.MemStore.Watch(ctx, func(c Change) {
		g.mu.Lock()
		gate := g.gate
		g.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return
			}
		}
		apply(c)
	})
}

// TestReleaseAtKeepsALaterWrite: an automatic release (ReleaseAt, the
// prober's after a passing check) of the hold as it was read leaves an
// operator's pin written since in place, whether this instance's table
// has seen the pin (ErrConflict) or only the store has it (the
// compare-and-set loses and the pin is adopted); Release overwrites it.
func TestReleaseAtKeepsALaterWrite(t *testing.T) {
	ms := NewMemStore()
	lag := &lagStore{MemStore: ms}
	prober := NewEngine(EngineOptions{Store: lag, Instance: "prober-a", Source: SourceProber, Policy: DefaultPolicy()})
	admin := NewEngine(EngineOptions{Store: ms, Instance: "admin-b", Policy: DefaultPolicy()})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { _ = prober.Run(ctx) })
	wg.Go(func() { _ = admin.Run(ctx) })
	for range 5 { // the breaker trips
		prober.Report("p", "", "", false, Outcome{Status: 503, Result: failure.Result{Class: failure.Transient, Reason: "503"}})
	}
	tripped := func(e *Engine) func() error {
		return func() error {
			for _, h := range e.Holds() {
				if h.ID == "p._" && h.State == StateHeld && h.Source == SourceBreaker && h.Revision != 0 {
					return nil
				}
			}
			return errors.New("no written trip hold")
		}
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, tripped(prober))
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, tripped(admin))
	read := prober.Holds()[0] // the trip, as the prober read it

	lag.mu.Lock()
	lag.gate = make(chan struct{}) // the prober's table lags from here
	lag.mu.Unlock()
	pin := func() {
		if err := admin.Pin(ctx, Scope{Kind: ScopeProvider, Provider: "p"}, time.Now().Add(time.Hour), "maintenance"); err != nil {
			t.Fatal(err)
		}
	}
	pin()
	if err := prober.ReleaseAt(ctx, "p._", SourceProber, read.Revision); err != nil {
		t.Fatalf("release of a hold changed only in the store: %v", err)
	}
	if r, _ := ms.Get(ctx, "p._"); !r.Pinned || r.State != StateHeld {
		t.Fatalf("after the release at the revision read, the store holds %+v, want the pin", r)
	}
	lag.mu.Lock()
	close(lag.gate)
	lag.gate = nil
	lag.mu.Unlock()
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if h := prober.Holds(); len(h) != 1 || !h[0].Pinned {
			return fmt.Errorf("the prober's table: %+v", h)
		}
		return nil
	})
	if err := prober.ReleaseAt(ctx, "p._", SourceProber, read.Revision); !errors.Is(err, ErrConflict) {
		t.Fatalf("release at an old revision of a pin in the table: %v, want ErrConflict", err)
	}
	if err := prober.Release(ctx, "p._", SourceAdmin); err != nil {
		t.Fatal(err)
	}
	if r, _ := ms.Get(ctx, "p._"); r.Pinned || r.State != StateReleased {
		t.Fatalf("an operator's release left %+v", r)
	}
}

// TestReleaseAtOfAnUnwrittenHold: an automatic release of a hold this
// instance has not written yet (its write waits on the store) is a
// conflict, not a forced write over whatever the store holds meanwhile.
func TestReleaseAtOfAnUnwrittenHold(t *testing.T) {
	store := &gatedStore{MemStore: NewMemStore(), open: make(chan struct{})}
	e := NewEngine(EngineOptions{Store: store, Instance: "prober-a", Source: SourceProber, Policy: DefaultPolicy(), DrainTimeout: -1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); close(store.open); <-done }()
	for range 5 { // the breaker trips; its write waits at the gate
		e.Report("p", "", "", false, Outcome{Status: 503, Result: failure.Result{Class: failure.Transient, Reason: "503"}})
	}
	h := e.Holds()
	if len(h) != 1 || h[0].Revision != 0 {
		t.Fatalf("holds %+v, want the trip, not written yet", h)
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second) // a forced write would wait at the gate
	defer rcancel()
	if err := e.ReleaseAt(rctx, h[0].ID, SourceProber, h[0].Revision); !errors.Is(err, ErrConflict) {
		t.Fatalf("release at revision 0 of an unwritten hold: %v, want ErrConflict", err)
	}
}
