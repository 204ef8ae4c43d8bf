package hold

import (
	"context"
	"errors"
	"fmt"
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
