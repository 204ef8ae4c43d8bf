package holdkv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
)

func TestStoreContract(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	n := setup(t, s.ClientURL(), bus.SetupOptions{})
	st := n.store
	ctx := context.Background()

	rec := record("openai-eu", "k1", "gpt-4.1")
	id := rec.Scope.ID()
	if id != "openai-eu.k1.gpt-4=2E1" {
		t.Fatalf("scope id = %q", id)
	}
	rev, err := st.Create(ctx, rec, 0)
	if err != nil || rev == 0 {
		t.Fatalf("Create: %d %v", rev, err)
	}
	if _, err := st.Create(ctx, rec, 0); !errors.Is(err, hold.ErrExists) {
		t.Fatalf("second Create: %v, want ErrExists", err)
	}
	got, err := st.Get(ctx, id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.Revision != rev || got.ID != id || got.Version != hold.SchemaVersion || got.Scope != rec.Scope ||
		got.Class != rec.Class || !got.Until.Equal(rec.Until) || got.Reason != rec.Reason {
		t.Fatalf("Get = %+v, want %+v at revision %d", got, rec, rev)
	}

	// Compare-and-set.
	esc := got
	esc.Rung = 1
	rev2, err := st.Update(ctx, esc, rev, 0)
	if err != nil || rev2 <= rev {
		t.Fatalf("Update: %d %v", rev2, err)
	}
	if _, err := st.Update(ctx, esc, rev, 0); !errors.Is(err, hold.ErrConflict) {
		t.Fatalf("stale Update: %v, want ErrConflict", err)
	}
	if _, err := st.Update(ctx, esc, rev, time.Minute); !errors.Is(err, hold.ErrConflict) {
		t.Fatalf("stale Update with TTL: %v, want ErrConflict", err)
	}
	if err := st.Delete(ctx, id, rev); !errors.Is(err, hold.ErrConflict) {
		t.Fatalf("stale Delete: %v, want ErrConflict", err)
	}
	if got, _ := st.Get(ctx, id); got.Rung != 1 || got.Revision != rev2 {
		t.Fatalf("after Update: rung %d revision %d", got.Rung, got.Revision)
	}
	if err := st.Delete(ctx, id, rev2); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := st.Get(ctx, id); !errors.Is(err, hold.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := st.Delete(ctx, id, 0); !errors.Is(err, hold.ErrNotFound) {
		t.Fatalf("Delete of nothing: %v, want ErrNotFound", err)
	}
	if err := st.Delete(ctx, id, rev2); !errors.Is(err, hold.ErrNotFound) {
		t.Fatalf("Delete of a deleted record: %v, want ErrNotFound", err)
	}
	if _, err := st.Update(ctx, esc, rev2, 0); !errors.Is(err, hold.ErrConflict) {
		t.Fatalf("Update of a deleted record: %v, want ErrConflict", err)
	}
	// A deleted scope can be held again.
	rev3, err := st.Create(ctx, rec, 0)
	if err != nil {
		t.Fatalf("Create after Delete: %v", err)
	}
	if err := st.Delete(ctx, id, 0); err != nil {
		t.Fatalf("unconditional Delete: %v", err)
	}
	if rev3 <= rev2 {
		t.Fatalf("revisions not increasing: %d then %d", rev2, rev3)
	}

	// Bad ids never reach NATS.
	bad := rec
	bad.ID = "a:b"
	if _, err := st.Create(ctx, bad, 0); err == nil || errors.Is(err, hold.ErrUnavailable) {
		t.Fatalf("Create with a bad id: %v", err)
	}
}

// An id longer than hold.MaxIDLen is refused before it is sent: NATS
// refuses a protocol line past its max_control_line (4 KB) and closes the
// connection for good, which cut a proxy off from the fleet when a caller
// named a model of a few kilobytes.
func TestLongIDNeverSent(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	n := setup(t, s.ClientURL(), bus.SetupOptions{})
	ctx := context.Background()
	rec := record("openai-eu", "k1", strings.Repeat("m.", 1500)) // 7.5 KB once encoded
	rec.ID = rec.Scope.ID()
	if _, err := n.store.Create(ctx, rec, time.Minute); !errors.Is(err, hold.ErrInvalidID) {
		t.Errorf("Create: %v, want ErrInvalidID", err)
	}
	if _, err := n.store.Update(ctx, rec, 1, 0); !errors.Is(err, hold.ErrInvalidID) {
		t.Errorf("Update: %v, want ErrInvalidID", err)
	}
	if _, err := n.store.Get(ctx, rec.ID); !errors.Is(err, hold.ErrNotFound) {
		t.Errorf("Get: %v, want ErrNotFound", err)
	}
	if err := n.store.Delete(ctx, rec.ID, 0); !errors.Is(err, hold.ErrNotFound) {
		t.Errorf("Delete: %v, want ErrNotFound", err)
	}
	// The connection is still up and the store still works.
	if err := n.nc.FlushTimeout(5 * time.Second); err != nil || !n.nc.IsConnected() {
		t.Fatalf("connection %s after the long id: %v (last error %v)", n.nc.Status(), err, n.nc.LastError())
	}
	if _, err := n.store.Create(ctx, record("openai-eu", "k1", "gpt-4.1"), 0); err != nil {
		t.Fatalf("Create after the long id: %v", err)
	}
}

// A record an earlier version created with an id past hold.MaxIDLen (a
// long unlisted model name) can still be read, released and deleted: only
// new records are bounded by MaxIDLen.
func TestLegacyLongIDStaysReleasable(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	n := setup(t, s.ClientURL(), bus.SetupOptions{})
	ctx := context.Background()
	rec := record("openai-eu", "k1", strings.Repeat("m", 1500))
	rec.ID = rec.Scope.ID()
	if len(rec.ID) <= hold.MaxIDLen || len(rec.ID) > hold.MaxStoredIDLen {
		t.Fatalf("id of %d bytes", len(rec.ID))
	}
	rec.Version = hold.SchemaVersion
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := n.res.Holds.Create(ctx, rec.ID, data) // as an earlier version wrote it
	if err != nil {
		t.Fatal(err)
	}
	got, err := n.store.Get(ctx, rec.ID)
	if err != nil || got.ID != rec.ID {
		t.Fatalf("Get: %+v %v", got, err)
	}
	rec.State, rec.ReleaseSource = hold.StateReleased, hold.SourceAdmin
	if rev, err = n.store.Update(ctx, rec, rev, time.Minute); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := n.store.Delete(ctx, rec.ID, rev); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

func TestTTL(t *testing.T) {
	tests := []struct {
		in, want time.Duration
	}{
		{0, time.Second}, {time.Millisecond, time.Second}, {time.Second, time.Second},
		{1001 * time.Millisecond, 2 * time.Second}, {90 * time.Second, 90 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.in.String(), func(t *testing.T) {
			if got := TTL(tt.in); got != tt.want {
				t.Fatalf("TTL(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// TestExpiry: a record created or renewed with a TTL expires by itself,
// watchers see it go as a delete, and the scope can be held again.
func TestExpiry(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	n := setup(t, s.ClientURL(), bus.SetupOptions{})
	w := setup(t, s.ClientURL(), bus.SetupOptions{})
	tab := watchInto(t, w.store)
	ctx := context.Background()

	created := record("anthropic", "k2", "")
	id := created.Scope.ID()
	rev, err := n.store.Create(ctx, created, 1500*time.Millisecond) // rounds up to 2 s
	if err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error { return tab.has(id, rev) })

	// Renew with a TTL (not kv.Update, which would drop it).
	renewed := created
	renewed.Rung = 2
	start := time.Now()
	rev2, err := n.store.Update(ctx, renewed, rev, time.Second)
	if err != nil {
		t.Fatalf("Update with TTL: %v", err)
	}
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error { return tab.has(id, rev2) })
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error { return tab.lacks(id) })
	took := time.Since(start)
	if took < 900*time.Millisecond || took > 5*time.Second {
		t.Errorf("renewed record (TTL 1 s) left the table after %s", took)
	}
	h := tab.history()
	if last := h[len(h)-1]; !last.Deleted || last.ID != id || last.Revision <= rev2 {
		t.Fatalf("expiry delivered as %+v", last)
	}
	if _, err := n.store.Get(ctx, id); !errors.Is(err, hold.ErrNotFound) {
		t.Fatalf("Get after expiry: %v", err)
	}
	if _, err := n.store.Create(ctx, created, 0); err != nil {
		t.Fatalf("Create after expiry: %v", err)
	}
	t.Logf("renewed record with TTL 1 s left the watcher's table after %s", took.Round(time.Millisecond))
}

func TestWatchInitialLoadAndChanges(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	n := setup(t, s.ClientURL(), bus.SetupOptions{})
	ctx := context.Background()

	const preloaded = 50
	for i := range preloaded {
		if _, err := n.store.Create(ctx, record("groq", fmt.Sprintf("k%d", i), ""), 0); err != nil {
			t.Fatal(err)
		}
	}
	gone := record("groq", "gone", "")
	rev, err := n.store.Create(ctx, gone, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.store.Delete(ctx, gone.Scope.ID(), rev); err != nil {
		t.Fatal(err)
	}

	tab := watchInto(t, n.store)
	select {
	case <-n.store.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("initial load not done")
	}
	h := tab.history()
	if len(h) != preloaded {
		t.Fatalf("initial load delivered %d changes, want %d (no delete marker): %+v", len(h), preloaded, h)
	}
	for _, c := range h {
		if !c.Initial || c.Deleted || c.Record.Revision != c.Revision || c.Record.ID != c.ID {
			t.Fatalf("initial change %+v", c)
		}
	}

	rec := record("groq", "k0", "llama-3.3-70b-versatile")
	rev, err = n.store.Create(ctx, rec, 0)
	if err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error { return tab.has(rec.Scope.ID(), rev) })
	if err := n.store.Delete(ctx, rec.Scope.ID(), rev); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error { return tab.lacks(rec.Scope.ID()) })
	h = tab.history()
	var last uint64
	for _, c := range h {
		if c.Revision <= last {
			t.Fatalf("changes out of revision order: %+v", h)
		}
		last = c.Revision
	}
	if c := h[len(h)-1]; !c.Deleted || c.Initial {
		t.Fatalf("delete delivered as %+v", c)
	}
	if c := h[len(h)-2]; c.Deleted || c.Initial || c.Record.Scope != rec.Scope {
		t.Fatalf("create delivered as %+v", c)
	}
}

// TestCreateRace: three proxies, each on its own connection, race to hold
// the same scope: exactly one record is written, the others learn it exists.
func TestCreateRace(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	nodes := []*node{
		setup(t, s.ClientURL(), bus.SetupOptions{}),
		setup(t, s.ClientURL(), bus.SetupOptions{}),
		setup(t, s.ClientURL(), bus.SetupOptions{}),
	}
	const rounds = 50
	for round := range rounds {
		rec := record("openai", fmt.Sprintf("k%d", round), "gpt-4o")
		var wg sync.WaitGroup
		errs := make([]error, len(nodes))
		revs := make([]uint64, len(nodes))
		start := make(chan struct{})
		for i, n := range nodes {
			wg.Go(func() {
				r := rec
				r.RecordedBy = fmt.Sprintf("proxy-%d", i)
				<-start
				revs[i], errs[i] = n.store.Create(context.Background(), r, time.Minute)
			})
		}
		close(start)
		wg.Wait()
		winners := 0
		for i, err := range errs {
			switch {
			case err == nil:
				winners++
			case !errors.Is(err, hold.ErrExists):
				t.Fatalf("round %d: proxy %d: %v, want nil or ErrExists", round, i, err)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners (%v)", round, winners, errs)
		}
	}
}

// TestUnavailable: with NATS gone, every operation fails fast with
// ErrUnavailable instead of waiting in the reconnect buffer.
func TestUnavailable(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	n := setup(t, s.ClientURL(), bus.SetupOptions{}, WithOpTimeout(500*time.Millisecond))
	ctx := context.Background()
	rec := record("mistral", "k1", "")
	rev, err := n.store.Create(ctx, rec, 0)
	if err != nil {
		t.Fatal(err)
	}
	natsembed.Stop(s)
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if n.nc.IsConnected() {
			return errors.New("still connected")
		}
		return nil
	})
	ops := []struct {
		name string
		op   func() error
	}{
		{"create", func() error { _, err := n.store.Create(ctx, record("mistral", "k2", ""), time.Minute); return err }},
		{"update", func() error { _, err := n.store.Update(ctx, rec, rev, 0); return err }},
		{"update with ttl", func() error { _, err := n.store.Update(ctx, rec, rev, time.Minute); return err }},
		{"delete", func() error { return n.store.Delete(ctx, rec.Scope.ID(), rev) }},
		{"get", func() error { _, err := n.store.Get(ctx, rec.Scope.ID()); return err }},
	}
	for _, tt := range ops {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			err := tt.op()
			if took := time.Since(start); took > 100*time.Millisecond {
				t.Errorf("took %s", took)
			}
			if e := isUnavailable(err); e != nil {
				t.Fatal(e)
			}
		})
	}
}

// TestUnavailableNoJetStream: connected, but JetStream does not answer
// (disabled, or a cluster without quorum): calls still end quickly with
// ErrUnavailable.
func TestUnavailableNoJetStream(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	n := setup(t, s.ClientURL(), bus.SetupOptions{}, WithOpTimeout(300*time.Millisecond))
	rec := record("x", "k", "")
	rev, err := n.store.Create(context.Background(), rec, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DisableJetStream(); err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		op   func() error
	}{
		{"create", func() error { _, err := n.store.Create(context.Background(), record("x", "k2", ""), 0); return err }},
		{"update with ttl", func() error { _, err := n.store.Update(context.Background(), rec, rev, time.Minute); return err }},
		{"get", func() error { _, err := n.store.Get(context.Background(), rec.Scope.ID()); return err }},
	}
	for _, tt := range ops {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			err := tt.op()
			if e := isUnavailable(err); e != nil {
				t.Fatal(e)
			}
			// 10x the op timeout, yet below the 5 s JetStream request
			// timeout that would end the call if the op timeout did not.
			if took := time.Since(start); took > 3*time.Second {
				t.Fatalf("took %s with a 300ms op timeout", took)
			}
		})
	}
}

// TestUnbound: a Store made before its bucket exists answers
// ErrUnavailable at once and its Watch waits; once bound, both work.
func TestUnbound(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	n := connect(t, s.ClientURL())
	store := NewUnbound(n.nc, testLog())
	ctx := context.Background()
	rec := record("cohere", "k1", "")
	if _, err := store.Create(ctx, rec, 0); isUnavailable(err) != nil {
		t.Fatalf("Create before Bind: %v", err)
	}
	if _, err := store.Get(ctx, rec.Scope.ID()); isUnavailable(err) != nil {
		t.Fatalf("Get before Bind: %v", err)
	}
	tab := watchInto(t, store)
	select {
	case <-store.Synced():
		t.Fatal("an unbound Watch delivered its initial load")
	case <-store.Bound():
		t.Fatal("bound before Bind")
	default:
	}

	res, err := bus.Setup(ctx, n.js, bus.SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store.Bind(n.js, res.Holds)
	store.Bind(n.js, res.Health) // only the first Bind counts
	rev, err := store.Create(ctx, rec, 0)
	if err != nil {
		t.Fatalf("Create after Bind: %v", err)
	}
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error { return tab.has(rec.Scope.ID(), rev) })
	if got, err := res.Holds.Get(ctx, rec.Scope.ID()); err != nil || got.Revision() != rev {
		t.Fatalf("record not in the holds bucket: %v %v", got, err)
	}
}
