package route

import (
	"math"
	"sync"
	"sync/atomic"
)

// Latency is an exponentially weighted moving average of a target's
// observed latency (ms): the time from sending an attempt to the
// upstream's response headers (a stream's first byte). Samples come from
// this proxy's attempts as they end and from the other proxies' passive
// reports; a fresh proxy starts from the health records'. Reading and
// updating are atomic: no lock on the request path.
type Latency struct {
	ewma atomic.Uint64 // math.Float64bits of the average; 0: no sample yet
	last atomic.Int64  // unix nanoseconds of the latest sample
}

// MS returns the average and whether there is one.
func (l *Latency) MS() (float64, bool) {
	if l == nil {
		return 0, false
	}
	b := l.ewma.Load()
	return math.Float64frombits(b), b != 0
}

// LastSample is when the latest sample was taken (unix nanoseconds; 0:
// never).
func (l *Latency) LastSample() int64 {
	if l == nil {
		return 0
	}
	return l.last.Load()
}

// Observe folds one sample (ms) in with weight alpha, taken at now (unix
// nanoseconds).
func (l *Latency) Observe(ms, alpha float64, now int64) { l.Fold(ms, 1, alpha, now) }

// Fold folds n samples whose average is ms in, as n single samples would
// (weight 1-(1-alpha)^n).
func (l *Latency) Fold(ms float64, n uint64, alpha float64, now int64) {
	if l == nil || n == 0 || !(ms >= 0) || math.IsInf(ms, 0) {
		return
	}
	ms = max(ms, 0.001) // 0 stands for "no sample"
	w := alpha
	if n > 1 {
		w = 1 - math.Pow(1-alpha, float64(n))
	}
	for {
		old := l.ewma.Load()
		v := ms
		if old != 0 {
			v = math.Float64frombits(old)*(1-w) + ms*w
		}
		if l.ewma.CompareAndSwap(old, math.Float64bits(v)) {
			break
		}
	}
	l.last.Store(now)
}

// Seed sets the average when there is none yet (a fresh proxy reading
// the health records).
func (l *Latency) Seed(ms float64, at int64) {
	if l == nil || !(ms > 0) || math.IsInf(ms, 0) {
		return
	}
	if l.ewma.CompareAndSwap(0, math.Float64bits(ms)) {
		l.last.Store(at)
	}
}

// LatencyBook keeps the latency averages of a process by target, so that
// they outlive a routing configuration: tables built from successive
// versions share them.
type LatencyBook struct {
	mu sync.Mutex
	m  map[latencyID]*Latency
}

type latencyID struct{ provider, key, model string }

// NewLatencyBook returns an empty book.
func NewLatencyBook() *LatencyBook { return &LatencyBook{m: map[latencyID]*Latency{}} }

// Model returns the average of a model on a provider (all keys), creating
// it.
func (b *LatencyBook) Model(provider, model string) *Latency {
	return b.get(latencyID{provider: provider, model: model})
}

// Key returns the average of a provider's key (all models), creating it.
func (b *LatencyBook) Key(provider, keyID string) *Latency {
	return b.get(latencyID{provider: provider, key: keyID})
}

// Lookup returns the average of a model on a provider, or nil when the
// book has none.
func (b *LatencyBook) Lookup(provider, model string) *Latency {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[latencyID{provider: provider, model: model}]
}

// LookupKey returns the average of a key, or nil.
func (b *LatencyBook) LookupKey(provider, keyID string) *Latency {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[latencyID{provider: provider, key: keyID}]
}

func (b *LatencyBook) get(id latencyID) *Latency {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.m[id]
	if l == nil {
		l = &Latency{}
		b.m[id] = l
	}
	return l
}
