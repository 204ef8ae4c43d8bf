package proxy

import (
	"testing"
	"time"

	"switchyard.dev/tools/fakeprovider"
)

// BenchmarkFleetWastedCalls: three proxies on one NATS server at a steady
// closed-loop load (`workers` requests in flight); key a1 starts rejecting.
// It reports the upstream calls a1 received after its first rejection
// (wasted/op), the requests in flight at that moment, the rate a1 was
// taking, and what polling the hold table every second would have cost at
// that rate (each of the other proxies keeps sending for half a poll
// interval on average). Run: go test -run '^$' -bench FleetWasted -benchtime 5x
func BenchmarkFleetWastedCalls(b *testing.B) {
	const workers = 12
	var wasted, rate float64
	for i := 0; i < b.N; i++ {
		w, r := fleetWastedOnce(b, workers)
		wasted += float64(w)
		rate += r
	}
	n := float64(b.N)
	b.ReportMetric(wasted/n, "wasted/op")
	b.ReportMetric(workers, "in-flight")
	b.ReportMetric(rate/n, "key-req/s")
	b.ReportMetric(rate/n*2/3*0.5, "wasted-if-polling-1s")
}

func fleetWastedOnce(b *testing.B, workers int) (int, float64) {
	b.StopTimer()
	ff := newFleet(b, 3)
	stop := ff.load(b, workers, directBody)
	// Measure the rate key a1 takes under this load.
	start := time.Now()
	c0 := callsWith(ff.openai, "key-a1")
	time.Sleep(500 * time.Millisecond) // a measurement window, not synchronisation
	rate := float64(callsWith(ff.openai, "key-a1")-c0) / time.Since(start).Seconds()
	b.StartTimer()
	before := callsWith(ff.openai, "key-a1")
	ff.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key"})
	time.Sleep(500 * time.Millisecond) // let the fleet run on after the key starts rejecting
	b.StopTimer()
	stop()
	return callsWith(ff.openai, "key-a1") - before, rate
}
