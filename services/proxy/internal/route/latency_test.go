package route

import (
	"math"
	"sync"
	"testing"
)

func TestLatencyObserve(t *testing.T) {
	var l Latency
	if ms, ok := l.MS(); ok || ms != 0 || l.LastSample() != 0 {
		t.Fatalf("zero Latency: %v %v %d", ms, ok, l.LastSample())
	}
	l.Observe(100, 0.2, 10)
	if ms, ok := l.MS(); !ok || ms != 100 || l.LastSample() != 10 {
		t.Fatalf("first sample: %v %v %d, want 100 (taken as is)", ms, ok, l.LastSample())
	}
	l.Observe(200, 0.2, 20)
	if ms, _ := l.MS(); math.Abs(ms-120) > 1e-9 || l.LastSample() != 20 {
		t.Fatalf("second sample: %v at %d, want 120 at 20", ms, l.LastSample())
	}
	l.Observe(50, 1, 30) // alpha 1: the sample replaces the average
	if ms, _ := l.MS(); ms != 50 {
		t.Fatalf("alpha 1: %v", ms)
	}

	// Samples that are not latencies are ignored, including their time.
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		l.Observe(bad, 0.5, 99)
		if ms, _ := l.MS(); ms != 50 || l.LastSample() != 30 {
			t.Fatalf("Observe(%v) changed the average to %v at %d", bad, ms, l.LastSample())
		}
	}
	// 0 ms is a sample (0 stands for none, so it is stored as a tiny one).
	var z Latency
	z.Observe(0, 0.2, 5)
	if ms, ok := z.MS(); !ok || ms <= 0 || ms > 0.01 || z.LastSample() != 5 {
		t.Fatalf("0 ms sample: %v %v %d", ms, ok, z.LastSample())
	}

	// A nil Latency (a step without provider) reads as unmeasured.
	var nl *Latency
	nl.Observe(10, 0.2, 1)
	nl.Fold(10, 3, 0.2, 1)
	nl.Seed(10, 1)
	if ms, ok := nl.MS(); ok || ms != 0 || nl.LastSample() != 0 {
		t.Fatal("nil Latency is not empty")
	}
}

// TestLatencyFold: folding n samples of mean ms is n Observes of ms.
func TestLatencyFold(t *testing.T) {
	tests := []struct {
		name  string
		start float64 // 0: no sample yet
		ms    float64
		n     uint64
		alpha float64
	}{
		{"one", 100, 300, 1, 0.2},
		{"three", 100, 300, 3, 0.2},
		{"many", 80, 20, 50, 0.2},
		{"from empty", 0, 42, 7, 0.2},
		{"small alpha", 1000, 10, 10, 0.01},
		{"alpha 1", 5, 9, 4, 1},
		{"large n", 500, 1, 10_000, 0.2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var folded, observed Latency
			if tt.start > 0 {
				folded.Observe(tt.start, tt.alpha, 1)
				observed.Observe(tt.start, tt.alpha, 1)
			}
			folded.Fold(tt.ms, tt.n, tt.alpha, 77)
			for range tt.n {
				observed.Observe(tt.ms, tt.alpha, 77)
			}
			a, _ := folded.MS()
			b, _ := observed.MS()
			if math.Abs(a-b) > 1e-9 {
				t.Errorf("Fold = %.12f, %d Observes = %.12f", a, tt.n, b)
			}
			if folded.LastSample() != 77 {
				t.Errorf("Fold sample time %d", folded.LastSample())
			}
		})
	}
	var l Latency
	l.Observe(100, 0.2, 1)
	l.Fold(999, 0, 0.2, 2) // no samples: nothing changes
	if ms, _ := l.MS(); ms != 100 || l.LastSample() != 1 {
		t.Errorf("Fold of 0 samples changed %v at %d", ms, l.LastSample())
	}
}

// TestLatencySeed: a seed sets the average only when there is none.
func TestLatencySeed(t *testing.T) {
	var l Latency
	l.Seed(0, 5) // no seed from a record without latency
	l.Seed(-3, 5)
	l.Seed(math.Inf(1), 5)
	l.Seed(math.NaN(), 5)
	if _, ok := l.MS(); ok {
		t.Fatal("a seed that is not a latency was kept")
	}
	l.Seed(250, 5)
	if ms, ok := l.MS(); !ok || ms != 250 || l.LastSample() != 5 {
		t.Fatalf("seed: %v %v %d", ms, ok, l.LastSample())
	}
	l.Seed(999, 6)
	if ms, _ := l.MS(); ms != 250 || l.LastSample() != 5 {
		t.Fatalf("a second seed overwrote: %v at %d", ms, l.LastSample())
	}
	l.Observe(50, 0.5, 7)
	if ms, _ := l.MS(); ms != 150 {
		t.Fatalf("observe after seed: %v, want 150", ms)
	}
	l.Seed(1, 8)
	if ms, _ := l.MS(); ms != 150 || l.LastSample() != 7 {
		t.Fatalf("a seed overwrote a measured average: %v at %d", ms, l.LastSample())
	}
}

// TestLatencyConcurrent: concurrent Observes lose no update (run with
// -race).
func TestLatencyConcurrent(t *testing.T) {
	var same, mixed Latency
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				same.Observe(40, 0.2, int64(w*each+i+1))
				mixed.Observe(float64(10+w), 0.05, 1)
				same.MS()
				same.LastSample()
			}
		}()
	}
	wg.Wait()
	if ms, _ := same.MS(); ms != 40 {
		t.Errorf("same samples averaged to %v", ms)
	}
	if last := same.LastSample(); last < 1 || last > workers*each {
		t.Errorf("last sample time %d", last)
	}
	// A moving average of samples in [10, 17] stays in [10, 17].
	if ms, _ := mixed.MS(); ms < 10 || ms > 17 {
		t.Errorf("mixed samples averaged to %v", ms)
	}
}

func TestLatencyBook(t *testing.T) {
	b := NewLatencyBook()
	if b.Lookup("p", "m") != nil || b.LookupKey("p", "k") != nil {
		t.Fatal("empty book has entries")
	}
	m := b.Model("p", "m")
	if m == nil || b.Model("p", "m") != m || b.Lookup("p", "m") != m {
		t.Fatal("Model is not one average per provider and model")
	}
	k := b.Key("p", "m") // a key named like a model is another average
	if k == m || b.LookupKey("p", "m") != k || b.Key("p", "m") != k {
		t.Fatal("Key and Model share an average")
	}
	if b.Model("q", "m") == m || b.Model("p", "n") == m {
		t.Fatal("distinct targets share an average")
	}
	var nb *LatencyBook
	if nb.Model("p", "m") != nil || nb.Key("p", "k") != nil {
		t.Fatal("nil book returned an average")
	}

	// Concurrent first use returns one average.
	var wg sync.WaitGroup
	got := make([]*Latency, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = b.Model("new", "m")
		}()
	}
	wg.Wait()
	for _, l := range got {
		if l != got[0] {
			t.Fatal("concurrent Model calls created two averages")
		}
	}

	// A table's steps and keys read the book's averages.
	tab, err := Build(testConfig(), Options{Latency: b})
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := tab.Resolve("oa/gpt-4.1")
	if rt.Steps[0].Latency != b.Lookup("oa", "gpt-4.1") || rt.Steps[0].Latency == nil {
		t.Error("step latency is not the book's")
	}
	if tab.Key("oa", "hi1").Latency != b.LookupKey("oa", "hi1") {
		t.Error("key latency is not the book's")
	}
	// The same model in a chain, a plain name and provider/model: one
	// average.
	plain, _ := tab.Resolve("shared")
	one, _ := tab.Resolve("oa/shared")
	if plain.Steps[0].Latency != one.Steps[0].Latency {
		t.Error("plain and provider/model routes keep separate averages")
	}
}
