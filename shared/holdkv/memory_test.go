package holdkv

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
)

// BenchmarkTableMemory: the heap a hold engine's table takes per hold,
// loaded through Store.Watch from a bucket of 20,000 operator pins (the
// records the admin API writes), and how long the load took. Reported as
// heap-bytes/hold (after a GC, over the heap before the engine started)
// and load-us/hold.
func BenchmarkTableMemory(b *testing.B) {
	const n = 20_000
	s := startServer(b, "127.0.0.1:0", b.TempDir())
	seed := setup(b, s.ClientURL(), bus.SetupOptions{})
	ctx := context.Background()
	now := time.Now()
	for i := range n {
		sc := hold.Scope{Kind: hold.ScopeProviderModel, Provider: "openai-eu", Model: fmt.Sprintf("model-%06d", i)}
		key, data, err := Encode(hold.Record{Scope: sc, State: hold.StateHeld, Pinned: true, Source: hold.SourceAdmin,
			Reason: "drain for the migration (pinned by ops)", Code: "pinned", RecordedBy: "admin-7f3a", RecordedAt: now,
			Since: now, Until: now.Add(time.Hour)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := seed.js.PublishAsync("$KV."+bus.BucketHolds+"."+key, data, jetstream.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	<-seed.js.PublishAsyncComplete()
	for b.Loop() {
		node := setup(b, s.ClientURL(), bus.SetupOptions{})
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		e := hold.NewEngine(hold.EngineOptions{Store: node.store, Instance: "memory"})
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { _ = e.Run(rctx) })
		start := time.Now()
		<-node.store.Synced()
		took := time.Since(start)
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := len(e.Holds()); got != n {
			b.Fatalf("table has %d holds, want %d", got, n)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/hold")
		b.ReportMetric(float64(took.Microseconds())/n, "load-us/hold")
		cancel()
		wg.Wait()
	}
}
