package holdkv

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
)

// BenchmarkPropagation: a hold written by proxy A (its own connection)
// until it is applied in the tables of proxies B and C (their own
// connections), measured from just before Create to each watcher's apply.
// Loopback, embedded server, R1 file storage.
//
//   - one-at-a-time: the next hold is written once both watchers applied
//     the previous one (holds are rare events: this is the latency a proxy
//     sees).
//   - burst: holds written back to back, as fast as Create returns (a
//     storm of holds: adds the watchers' queueing).
//
// Reports p50, p99 and max over b.N holds and both watchers, and the p50
// and p99 of Create itself.
func BenchmarkPropagation(b *testing.B) {
	for _, mode := range []string{"one-at-a-time", "burst"} {
		b.Run(mode, func(b *testing.B) { benchPropagation(b, mode == "burst") })
	}
}

func benchPropagation(b *testing.B, burst bool) {
	s := startServer(b, "127.0.0.1:0", b.TempDir())
	writer := setup(b, s.ClientURL(), bus.SetupOptions{})

	type stamp struct {
		id string
		at time.Time
	}
	applied := make(chan stamp, 2*b.N+16)
	for range 2 {
		w := setup(b, s.ClientURL(), bus.SetupOptions{})
		tab := newTable()
		tab.notify = func(c hold.Change) {
			if !c.Initial && !c.Deleted {
				applied <- stamp{c.ID, time.Now()}
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = w.store.Watch(ctx, tab.apply) }()
		b.Cleanup(func() { cancel(); <-done })
		select {
		case <-w.store.Synced():
		case <-time.After(10 * time.Second):
			b.Fatal("watcher not synced")
		}
	}

	ctx := context.Background()
	started := make(map[string]time.Time, b.N)
	lat := make([]time.Duration, 0, 2*b.N)
	writes := make([]time.Duration, 0, b.N)
	collect := func(n int) {
		timeout := time.After(30 * time.Second)
		for range n {
			select {
			case st := <-applied:
				lat = append(lat, st.at.Sub(started[st.id]))
			case <-timeout:
				b.Fatal("a hold did not reach both watchers")
			}
		}
	}
	recs := make([]hold.Record, b.N)
	for i := range recs {
		recs[i] = record("bench", fmt.Sprintf("k%d", i), "gpt-4.1")
		recs[i].ID = recs[i].Scope.ID()
	}
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		started[recs[i].ID] = t0
		if _, err := writer.store.Create(ctx, recs[i], 0); err != nil {
			b.Fatal(err)
		}
		writes = append(writes, time.Since(t0))
		if !burst {
			collect(2)
		}
	}
	if burst {
		collect(2 * b.N)
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(writes)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	q := func(xs []time.Duration, p float64) float64 { return us(xs[int(p*float64(len(xs)-1))]) }
	b.ReportMetric(q(lat, 0.50), "p50-µs")
	b.ReportMetric(q(lat, 0.99), "p99-µs")
	b.ReportMetric(us(lat[len(lat)-1]), "max-µs")
	b.ReportMetric(q(writes, 0.50), "create-p50-µs")
	b.ReportMetric(q(writes, 0.99), "create-p99-µs")
}
