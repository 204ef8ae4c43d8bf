package hold

import (
	"context"
	"fmt"
	"testing"
	"time"

	"switchyard.dev/shared/failure"
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
