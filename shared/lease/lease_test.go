package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/lease"
	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/shared/testkit"
)

// TestLease: one owner at a time: a second is told ErrLost and when the
// first's lease lapses at the latest; the owner renews; a release lets the
// other take it at once; a lease whose owner stopped renewing lapses by
// itself (its per-key TTL).
func TestLease(t *testing.T) {
	ns := natstest.Start(t, "127.0.0.1:0", t.TempDir())
	_, js := testkit.ConnectNATS(t, ns.ClientURL())
	ctx := context.Background()
	res, err := bus.Setup(ctx, js, bus.SetupOptions{Storage: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(owner string) *lease.Lease {
		return &lease.Lease{JS: js, KV: res.Leases, Key: "work-1", Owner: owner, TTL: time.Second}
	}
	a, b := mk("a"), mk("b")
	if _, err := a.Acquire(ctx); err != nil {
		t.Fatalf("a: %v", err)
	}
	if a.Until.Before(time.Now()) {
		t.Errorf("a's lease ends %v, before now", a.Until)
	}
	lapse, err := b.Acquire(ctx)
	if !errors.Is(err, lease.ErrLost) || lapse.IsZero() || lapse.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("b while a holds it: %v, lapse %v", err, lapse)
	}
	if _, err := a.Acquire(ctx); err != nil { // a renewal
		t.Fatalf("a renews: %v", err)
	}
	a.Release(ctx)
	if _, err := b.Acquire(ctx); err != nil {
		t.Fatalf("b after a's release: %v", err)
	}
	// b stops renewing: its key expires, and a takes it
	testkit.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		_, err := a.Acquire(ctx)
		return err
	})
	if _, err := b.Acquire(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("b after its lease lapsed and a took it: %v", err)
	}
}
