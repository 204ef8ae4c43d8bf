package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/shared/testkit"
)

func wantState(r *Readiness, ready bool, nats, js string) func() error {
	return func() error {
		st := r.State()
		if st.Ready != ready || st.NATS != nats || st.JetStream != js || (st.Reason == "") != ready {
			return fmt.Errorf("state %+v, want ready %v nats %q jetstream %q", st, ready, nats, js)
		}
		return nil
	}
}

// run runs r until the test ends.
func run(t *testing.T, r *Readiness) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

func TestReadiness(t *testing.T) {
	dir, addr := t.TempDir(), testkit.FreeAddr(t)
	s, err := natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { natsembed.Stop(s) }()
	nc, js := testkit.ConnectNATS(t, s.ClientURL())
	var bound atomic.Pointer[Resources]
	r := NewReadiness(nc, bound.Load, ReadinessOptions{Interval: 50 * time.Millisecond, Retry: 20 * time.Millisecond, Timeout: 300 * time.Millisecond})
	if st := r.State(); st.Ready || st.Reason == "" {
		t.Fatalf("ready before Run: %+v", st)
	}
	run(t, r)

	// connected, buckets not set up yet: not ready
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, wantState(r, false, NATSConnected, JetStreamDown))
	res, err := Setup(context.Background(), js, SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound.Store(res)
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, wantState(r, true, NATSConnected, JetStreamOK))

	// the hold bucket goes away, the connection stays up: not ready until
	// it is back
	if err := js.DeleteKeyValue(context.Background(), BucketHolds); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, wantState(r, false, NATSConnected, JetStreamDown))
	if st := r.State(); st.Reason != "the switchyard_holds bucket does not exist" {
		t.Errorf("reason %q", st.Reason)
	}
	if _, err := Setup(context.Background(), js, SetupOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, wantState(r, true, NATSConnected, JetStreamOK))

	// the server goes away and comes back on the same address and store
	natsembed.Stop(s)
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, wantState(r, false, NATSDisconnected, ""))
	s, err = natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, wantState(r, true, NATSConnected, JetStreamOK))
}

func TestReadinessWithoutNATS(t *testing.T) {
	r := NewReadiness(nil, func() *Resources { return nil }, ReadinessOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Run(ctx) // returns at once
	if st := r.State(); st.Ready || st.NATS != NATSDisconnected || st.Reason == "" {
		t.Fatalf("state %+v", st)
	}
}

func TestProbeReason(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{context.DeadlineExceeded, "JetStream did not answer within 2s"},
		{fmt.Errorf("info: %w", nats.ErrNoResponders), "JetStream does not answer (no responders)"},
		{jetstream.ErrStreamNotFound, "the switchyard_holds bucket does not exist"},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "nats://user:secret@host JetStream system temporarily unavailable"}, "JetStream answered error 10008"},
		{errors.New("nats://user:secret@10.0.0.1:4222 something"), "JetStream unavailable"},
	} {
		if got := probeReason(tt.err, 2*time.Second); got != tt.want {
			t.Errorf("probeReason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestReadinessNoQuorum: on a 3-node cluster with R3 buckets, the node the
// client is connected to loses both peers: the connection stays up, but the
// hold bucket's stream has no leader and JetStream does not answer for it.
// Not ready until the peers are back.
func TestReadinessNoQuorum(t *testing.T) {
	const size = 3
	c := natstest.StartCluster(t, natsembed.ClusterOptions{Size: size, Name: "ready-test", ServerName: "ready", LeaderTimeout: 30 * time.Second})
	nc, js := testkit.ConnectNATS(t, c.Servers[0].ClientURL())
	var res *Resources
	testkit.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		res, err = Setup(ctx, js, SetupOptions{Replicas: size})
		return err
	})
	r := NewReadiness(nc, func() *Resources { return res }, ReadinessOptions{Interval: 50 * time.Millisecond, Retry: 20 * time.Millisecond, Timeout: 500 * time.Millisecond})
	run(t, r)
	testkit.CheckFor(t, 30*time.Second, 10*time.Millisecond, wantState(r, true, NATSConnected, JetStreamOK))

	natsembed.Stop(c.Servers[1])
	natsembed.Stop(c.Servers[2])
	// a leader that was on node 0 steps down once it misses its quorum
	// (nats-server takes up to about 20 s to decide)
	testkit.CheckFor(t, 60*time.Second, 10*time.Millisecond, wantState(r, false, NATSConnected, JetStreamDown))
	t.Logf("no quorum: %s", r.State().Reason)

	for i := 1; i < size; i++ {
		c.Restart(t, i)
	}
	testkit.CheckFor(t, 30*time.Second, 10*time.Millisecond, wantState(r, true, NATSConnected, JetStreamOK))
}
