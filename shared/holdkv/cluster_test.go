package holdkv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/natsembed/natstest"
)

// TestCluster: three proxies on three nodes of a cluster with R3 buckets
// and stream see each other's holds; when the node leading the holds
// bucket shuts down, a hold written once the bucket has a new leader
// reaches every proxy promptly (the one that was on the lost node
// included), no hold is lost and writes resume from every proxy.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	c := natstest.StartCluster(t, natsembed.ClusterOptions{Size: 3, Name: "switchyard-test", ServerName: "sw"})
	sopts := bus.SetupOptions{Replicas: 3}
	nodes := make([]*node, 3)
	tables := make([]*table, 3)
	for i := range nodes {
		nodes[i] = setupWith(t, c.URLsFrom(i), sopts, []nats.Option{nats.DontRandomize()})
		if got := nodes[i].nc.ConnectedServerName(); got != c.Servers[i].Name() {
			t.Fatalf("proxy %d connected to %s", i, got)
		}
		tables[i] = watchInto(t, nodes[i].store)
	}
	ctx := context.Background()
	st, err := nodes[0].res.Holds.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("holds bucket: replicas %d, cluster %+v", info.Config.Replicas, info.Cluster)
	}
	ev, err := nodes[0].res.Events.Info(ctx)
	if err != nil || ev.Config.Replicas != 3 {
		t.Fatalf("events stream: %+v %v", ev, err)
	}

	// Every proxy writes; every proxy sees every hold.
	revs := map[string]uint64{}
	for i, n := range nodes {
		for j := range 10 {
			rec := record(fmt.Sprintf("p%d", i), fmt.Sprintf("k%d", j), "gpt-4.1")
			rev, err := n.store.Create(ctx, rec, 0)
			if err != nil {
				t.Fatalf("proxy %d create: %v", i, err)
			}
			revs[rec.Scope.ID()] = rev
		}
	}
	for i, tab := range tables {
		for id, rev := range revs {
			testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
				if err := tab.has(id, rev); err != nil {
					return fmt.Errorf("proxy %d: %w", i, err)
				}
				return nil
			})
		}
	}
	// The three race for one scope: one record.
	race := record("shared", "k", "")
	won := 0
	errs := make(chan error, 3)
	for _, n := range nodes {
		go func() { _, err := n.store.Create(ctx, race, time.Minute); errs <- err }()
	}
	for range nodes {
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, hold.ErrExists):
			t.Fatalf("racing create: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d proxies won the race", won)
	}

	// Shut down the node leading the holds bucket.
	leader := c.Index(info.Cluster.Leader)
	if leader < 0 {
		t.Fatalf("leader %q unknown", info.Cluster.Leader)
	}
	t.Logf("shutting down %s, leader of the holds bucket", info.Cluster.Leader)
	down := time.Now()
	natsembed.Stop(c.Servers[leader])

	// Once the bucket has a new leader (and JetStream a meta leader), a
	// hold written from a surviving node reaches every table within
	// promptly: the watchers on the surviving nodes (whose consumers may
	// have lived on the lost node) and the one whose node was lost.
	survivor := nodes[(leader+1)%3]
	testkit.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := survivor.res.Holds.Status(sctx)
		if err != nil {
			return err
		}
		if l := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Cluster.Leader; l == "" || l == info.Cluster.Leader {
			return fmt.Errorf("holds stream leader %q", l)
		}
		for i, s := range c.Servers {
			if i != leader && s.JetStreamIsLeader() {
				return nil
			}
		}
		return errors.New("no JetStream meta leader")
	})
	elected := time.Since(down)
	first := record("elected", "k", "")
	var rev uint64
	written := testkit.Retry(t, 15*time.Second, 10*time.Millisecond, func() error {
		var err error
		rev, err = survivor.store.Create(ctx, first, 0)
		return err
	})
	revs[first.Scope.ID()] = rev
	for i, tab := range tables {
		d := tab.delay(t, rev, written)
		t.Logf("proxy %d (was on %s) applied the first hold after the new leader (%s after the shutdown) %s after its write",
			i, c.Servers[i].Name(), elected.Round(time.Millisecond), d.Round(time.Millisecond))
		if d > promptly {
			t.Errorf("proxy %d applied the hold %s after it was written, want within %s", i, d, promptly)
		}
	}

	// Writes resume: from every proxy (the one on the lost node fails over).
	for i, n := range nodes {
		rec := record("after", fmt.Sprintf("k%d", i), "")
		var rev uint64
		testkit.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
			var err error
			rev, err = n.store.Create(ctx, rec, 0)
			if errors.Is(err, hold.ErrExists) {
				// An earlier attempt was stored but its answer was lost.
				got, gerr := n.store.Get(ctx, rec.Scope.ID())
				rev = got.Revision
				return gerr
			}
			return err
		})
		t.Logf("proxy %d (was on %s) wrote again %s after the shutdown",
			i, c.Servers[i].Name(), time.Since(down).Round(time.Millisecond))
		revs[rec.Scope.ID()] = rev
	}
	// No hold lost: every record is in the bucket and in every table.
	for id, rev := range revs {
		got, err := survivor.store.Get(ctx, id)
		if err != nil || got.Revision < rev {
			t.Fatalf("hold %s after the shutdown: %+v %v", id, got, err)
		}
		for i, tab := range tables {
			testkit.CheckFor(t, 15*time.Second, 5*time.Millisecond, func() error {
				if err := tab.has(id, rev); err != nil {
					return fmt.Errorf("proxy %d: %w", i, err)
				}
				return nil
			})
		}
	}
	t.Logf("every watcher had every hold %s after the shutdown", time.Since(down).Round(time.Millisecond))
}
