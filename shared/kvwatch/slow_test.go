package kvwatch

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"
)

// slowApply delays each put by d (a consumer slower than the bucket: a
// large load on a busy machine), then records it.
func slowApply(r *recorder, d time.Duration) func(Event) {
	return func(e Event) {
		if e.Op == OpPut {
			time.Sleep(d) // the consumer's own work, not a wait for a condition
		}
		r.apply(e)
	}
}

// TestSlowLoadIsNotCutShort: a load that takes longer than LoadTimeout
// but keeps delivering is one load: every value arrives before OpLoaded,
// flagged Initial (the proxy waits for it before it serves).
func TestSlowLoadIsNotCutShort(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	c := connect(t, s.ClientURL(), 1)
	const n = 100
	for i := range n {
		put(t, c.kv, fmt.Sprintf("k%03d", i), "v")
	}
	r := newRecorder()
	o := Options{KV: c.kv, Conn: c.nc, Log: testLog(), LoadTimeout: 50 * time.Millisecond}
	runWith(t, o, slowApply(r, 2*time.Millisecond)) // 200 ms of work, 4 load timeouts
	waitLoaded(t, r)
	h := r.history()
	if len(h) != n+1 || h[n].Op != OpLoaded {
		t.Fatalf("%d events before the end of the load (want %d), last %+v", len(h)-1, n, h[len(h)-1])
	}
	for _, e := range h[:n] {
		if !e.Initial {
			t.Fatalf("event %+v of the load not flagged initial", e)
		}
	}
}

// TestSlowWatcherIsNotRestarted: a watcher behind the bucket that keeps
// delivering (a burst of writes it applies slowly) is not taken for a
// stalled one: a second watcher beside it would deliver the same
// revisions again, doubling the work of the one that is behind.
func TestSlowWatcherIsNotRestarted(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	writer := connect(t, s.ClientURL(), 1)
	c := connect(t, s.ClientURL(), 1)
	logs := &testkit.SyncBuffer{}
	r := newRecorder()
	o := Options{KV: c.kv, Conn: c.nc, Log: slog.New(slog.NewTextHandler(logs, nil)), StallCheck: 50 * time.Millisecond}
	runWith(t, o, slowApply(r, 3*time.Millisecond))
	waitLoaded(t, r)
	const n = 150 // 450 ms of work: stall checks see the watcher behind several times
	for i := range n {
		put(t, writer.kv, fmt.Sprintf("k%03d", i), "v")
	}
	for i := range n {
		key := fmt.Sprintf("k%03d", i)
		testkit.CheckFor(t, 20*time.Second, time.Millisecond, func() error { return r.has(key, "v") })
	}
	if l := logs.String(); strings.Contains(l, "behind the bucket") {
		t.Errorf("a watcher that was delivering was restarted:\n%s", l)
	}
	if err := r.inOrder(); err != nil {
		t.Fatal(err)
	}
}
