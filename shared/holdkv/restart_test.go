package holdkv

import (
	"context"
	"errors"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
)

// TestRestart: NATS stops and a new server starts on the same port and
// store dir. Records survive, and a hold written right after the restart
// reaches the watchers on other connections within promptly of the write
// (a stale watcher would take ~20 s), each change once.
func TestRestart(t *testing.T) {
	addr, dir := testkit.FreeAddr(t), t.TempDir()
	s := startServer(t, addr, dir)
	url := s.ClientURL()
	writer := setup(t, url, bus.SetupOptions{})
	watchers := []*node{setup(t, url, bus.SetupOptions{}), setup(t, url, bus.SetupOptions{})}
	tables := []*table{watchInto(t, watchers[0].store), watchInto(t, watchers[1].store)}
	ctx := context.Background()

	before := record("openai", "k1", "")
	rev, err := writer.store.Create(ctx, before, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tab := range tables {
		testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error { return tab.has(before.Scope.ID(), rev) })
	}

	natsembed.Stop(s)
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		for _, n := range append([]*node{writer}, watchers...) {
			if n.nc.IsConnected() {
				return errors.New("a client is still connected")
			}
		}
		return nil
	})
	s2 := startServer(t, addr, dir)
	ready := time.Now()
	if !s2.JetStreamEnabled() {
		t.Fatal("JetStream off after restart")
	}

	// The writer retries until its connection is back; the delay counts
	// from the start of the attempt that succeeded.
	after := record("openai", "k2", "")
	var rev2 uint64
	written := testkit.Retry(t, 10*time.Second, 5*time.Millisecond, func() error {
		var err error
		rev2, err = writer.store.Create(ctx, after, 0)
		return err
	})
	for i, tab := range tables {
		d := tab.delay(t, rev2, written)
		t.Logf("watcher %d applied the hold written after the restart %s after the write (written %s after the server was ready)",
			i, d.Round(time.Millisecond), written.Sub(ready).Round(time.Millisecond))
		if d > promptly {
			t.Errorf("watcher %d applied a hold %s after it was written, want within %s", i, d, promptly)
		}
		if err := tab.has(before.Scope.ID(), rev); err != nil {
			t.Errorf("watcher %d lost the record from before the restart: %v", i, err)
		}
	}
	if got, err := watchers[0].store.Get(ctx, before.Scope.ID()); err != nil || got.Revision != rev {
		t.Fatalf("record from before the restart: %+v %v", got, err)
	}
	// No change was applied twice.
	for i, tab := range tables {
		var last uint64
		for _, c := range tab.history() {
			if c.Revision <= last {
				t.Fatalf("watcher %d: revision %d applied after %d", i, c.Revision, last)
			}
			last = c.Revision
		}
	}
}

// TestReloadAfterLongAbsence: a watcher out of touch for longer than half
// the marker TTL reloads the bucket instead of resuming, and reports as
// deleted the records that vanished without a trace meanwhile.
func TestReloadAfterLongAbsence(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	writer := setup(t, s.ClientURL(), bus.SetupOptions{})
	// Every restart counts as a long absence.
	w := setup(t, s.ClientURL(), bus.SetupOptions{}, WithMarkerTTL(time.Nanosecond))
	tab := watchInto(t, w.store)
	ctx := context.Background()
	keep, gone := record("groq", "keep", ""), record("groq", "gone", "")
	var revs []uint64
	for _, r := range []hold.Record{keep, gone} {
		rev, err := writer.store.Create(ctx, r, 0)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, rev)
	}
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error { return tab.has(gone.Scope.ID(), revs[1]) })

	// Remove "gone" with no marker at all (a stream purge), then cut the
	// watcher's connection: it reconnects and reloads.
	stream, err := writer.js.Stream(ctx, "KV_"+bus.BucketHolds)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+bus.BucketHolds+"."+gone.Scope.ID())); err != nil {
		t.Fatal(err)
	}
	cid, err := w.nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error { return tab.lacks(gone.Scope.ID()) })
	if err := tab.has(keep.Scope.ID(), revs[0]); err != nil {
		t.Fatal(err)
	}
	// Nothing was applied twice.
	applied := map[uint64]int{}
	for _, c := range tab.history() {
		if !c.Deleted {
			applied[c.Revision]++
		}
	}
	for rev, n := range applied {
		if n > 1 {
			t.Fatalf("revision %d applied %d times", rev, n)
		}
	}
}
