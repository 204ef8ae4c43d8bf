package prober

import (
	"context"
	"fmt"
	"testing"
	"time"

	"switchyard.dev/shared/lease"
	"switchyard.dev/shared/testkit"

	"switchyard.dev/tools/fakeprovider"
)

// TestTwoReplicasNeverDoubleCheck: two replicas share one provider's
// checks through its lease: consecutive checks are one interval apart,
// never two in one interval. When the replica holding the lease dies
// (its NATS connection gone, the lease not released) the other takes the
// checks over once the lease expires.
func TestTwoReplicasNeverDoubleCheck(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	f.fake.AddRule(fakeprovider.Rule{Path: "/v1/ping", Status: 200})
	cfg := f.config(t, `
prober:
  check_interval: 250ms
  jitter: 0
  lease_ttl: 1s
  check_timeout: 900ms
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
    health_check: {path: /ping}
`)
	a := f.startProber(t, cfg)
	b := f.startProber(t, cfg)
	pings := func() []fakeprovider.Call {
		return f.fake.CallsMatching(func(c fakeprovider.Call) bool { return c.Path == "/v1/ping" })
	}
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := len(pings()); n < 8 {
			return fmt.Errorf("%d checks so far", n)
		}
		return nil
	})
	assertSpaced := func(calls []fakeprovider.Call) {
		t.Helper()
		for i := 1; i < len(calls); i++ {
			if gap := calls[i].At.Sub(calls[i-1].At); gap < 200*time.Millisecond {
				t.Fatalf("checks %d and %d only %s apart: a double check", i-1, i, gap)
			}
		}
	}
	assertSpaced(pings())

	// Which replica holds the lease?
	e, err := f.res.Leases.Get(context.Background(), "check.p1")
	if err != nil {
		t.Fatal(err)
	}
	owner, other := a, b
	if string(e.Value()) == b.svc.Instance() {
		owner, other = b, a
	}
	if string(e.Value()) != owner.svc.Instance() {
		t.Fatalf("lease held by %q, neither replica", e.Value())
	}
	owner.nc.Close() // dies as far as the fleet can tell: no renewal, no release
	died := time.Now()
	before := len(pings())
	// A correctness deadline, not a latency target: with the lease TTL
	// 1s, NATS's own expiry timer and -race on a busy machine, 10 s.
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		e, err := f.res.Leases.Get(context.Background(), "check.p1")
		if err != nil || string(e.Value()) != other.svc.Instance() {
			return fmt.Errorf("lease not taken over yet")
		}
		return nil
	})
	t.Logf("taken over %s after the owner died (lease TTL 1s)", time.Since(died).Round(time.Millisecond))
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := len(pings()); n < before+3 {
			return fmt.Errorf("%d checks after the takeover", n-before)
		}
		return nil
	})
	assertSpaced(pings()[before:])
	owner.stop()
}

// TestWorkEndsWithTheLease: a unit's check or discovery runs with a
// context that ends when the lease it runs under lapses (another replica
// may take the unit over from then on), or sooner with its parent.
func TestWorkEndsWithTheLease(t *testing.T) {
	var s Service
	until := time.Now().Add(time.Hour)
	u := &unit{lease: &lease.Lease{Until: until}}
	var got time.Time
	s.underLease(context.Background(), u, func(ctx context.Context, _ *unit) { got, _ = ctx.Deadline() })
	if !got.Equal(until) {
		t.Fatalf("work's deadline %v, want the lease's end %v", got, until)
	}
	parent, cancel := context.WithCancel(context.Background())
	cancel()
	s.underLease(parent, u, func(ctx context.Context, _ *unit) {
		if ctx.Err() == nil {
			t.Fatal("work under a lease outlives its parent context")
		}
	})
}
