package holdkv

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
)

// BenchmarkPropagation measures what a proxy sees: a hold reported to
// proxy A's hold.Engine (an upstream refused a key) until it is applied in
// the tables of proxies B and C, each a hold.Engine on its own NATS
// connection, with 10,000 holds already present in the bucket and in every
// table. The clock starts before A's Engine.Report and stops in B's and
// C's OnApply hook (the engine applying the record another instance wrote).
// Loopback, embedded server, R1 file storage.
//
//   - one-at-a-time: the next hold is reported once both engines applied
//     the previous one (holds are rare events);
//   - burst-1000/s: one hold every millisecond (a provider-wide outage
//     holding many keys and models at once).
//
// Reports p50, p99 and max over b.N holds and both engines.
func BenchmarkPropagation(b *testing.B) {
	for _, mode := range []string{"one-at-a-time", "burst-1000/s"} {
		b.Run(mode, func(b *testing.B) { benchPropagation(b, mode != "one-at-a-time") })
	}
}

const presentHolds = 10_000

func benchPropagation(b *testing.B, burst bool) {
	s := startServer(b, "127.0.0.1:0", b.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })

	// The holds already present: written straight to the bucket.
	seed := setup(b, s.ClientURL(), bus.SetupOptions{})
	for i := range presentHolds {
		rec := record(fmt.Sprintf("p%d", i%20), fmt.Sprintf("k%d", (i/20)%64), fmt.Sprintf("model-%d", i/1280))
		rec.ID = rec.Scope.ID()
		if _, err := seed.store.Create(ctx, rec, 0); err != nil {
			b.Fatal(err)
		}
	}

	var (
		mu      sync.Mutex
		started = map[string]time.Time{}
		applied = make(chan time.Duration, 1<<16)
	)
	engine := func(name string, watched bool) *hold.Engine {
		n := setup(b, s.ClientURL(), bus.SetupOptions{})
		opts := hold.EngineOptions{Store: n.store, Instance: name}
		if watched {
			opts.OnApply = func(rec hold.Record) {
				at := time.Now()
				mu.Lock()
				t0, ok := started[rec.ID]
				mu.Unlock()
				if ok {
					applied <- at.Sub(t0)
				}
			}
		}
		e := hold.NewEngine(opts)
		wg.Go(func() { _ = e.Run(ctx) })
		select {
		case <-n.store.Synced():
		case <-time.After(30 * time.Second):
			b.Fatal("engine table not loaded")
		}
		return e
	}
	a := engine("proxy-a", false)
	engine("proxy-b", true)
	engine("proxy-c", true)
	for len(a.Holds()) < presentHolds {
		time.Sleep(time.Millisecond)
	}

	out := hold.Outcome{Result: failure.Result{Class: failure.CredentialRejected, Code: "invalid_api_key"}, Status: 401}
	lat := make([]time.Duration, 0, 2*b.N)
	collect := func(n int) {
		timeout := time.After(30 * time.Second)
		for range n {
			select {
			case d := <-applied:
				lat = append(lat, d)
			case <-timeout:
				b.Fatal("a hold did not reach both engines")
			}
		}
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for i := range b.N {
		key := fmt.Sprintf("fresh-%d", i)
		id := hold.Scope{Kind: hold.ScopeKey, Provider: "bench", Key: key}.ID()
		if burst {
			<-tick.C
		}
		mu.Lock()
		started[id] = time.Now()
		mu.Unlock()
		a.Report("bench", key, "gpt-4.1", false, out)
		if !burst {
			collect(2)
		}
	}
	if burst {
		collect(2 * b.N)
	}
	b.StopTimer()
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	q := func(p float64) float64 { return us(lat[int(p*float64(len(lat)-1))]) }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(us(lat[len(lat)-1]), "max-µs")
}
