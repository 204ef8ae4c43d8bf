package health

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// View is a process's in-memory copy of the health bucket, fed by Watch.
// Readers get an immutable Snapshot through an atomic pointer: no lock and
// no I/O on a request path.
type View struct {
	mu       sync.Mutex
	recs     map[string]Record
	snap     atomic.Pointer[Snapshot]
	onChange func(*Snapshot)
	synced   chan struct{}
	once     sync.Once
}

// NewView returns an empty view. onChange (may be nil) is called with each
// new snapshot, on the goroutine that applied the change.
func NewView(onChange func(*Snapshot)) *View {
	v := &View{recs: map[string]Record{}, onChange: onChange, synced: make(chan struct{})}
	v.snap.Store(&Snapshot{recs: map[string]Record{}})
	return v
}

// Snapshot returns the current view.
func (v *View) Snapshot() *Snapshot { return v.snap.Load() }

// Synced is closed once the initial values of the bucket are applied.
func (v *View) Synced() <-chan struct{} { return v.synced }

// Apply applies one change (Watch calls it; tests may call it directly).
func (v *View) Apply(c Change) {
	if c.Loaded {
		v.once.Do(func() { close(v.synced) })
		return
	}
	v.mu.Lock()
	if c.Deleted {
		if _, ok := v.recs[c.ID]; !ok {
			v.mu.Unlock()
			return
		}
		delete(v.recs, c.ID)
	} else {
		v.recs[c.ID] = c.Record
	}
	s := &Snapshot{recs: make(map[string]Record, len(v.recs))}
	for id, r := range v.recs {
		s.recs[id] = r
	}
	v.snap.Store(s)
	v.mu.Unlock()
	if v.onChange != nil {
		v.onChange(s)
	}
}

// Run feeds the view from kv until ctx ends.
func (v *View) Run(ctx context.Context, kv jetstream.KeyValue, nc *nats.Conn, log *slog.Logger) error {
	return Watch(ctx, kv, nc, log, v.Apply)
}

// Snapshot is an immutable set of health records.
type Snapshot struct {
	recs map[string]Record
}

// Len is the number of records.
func (s *Snapshot) Len() int { return len(s.recs) }

// Get returns the record of a provider (keyID "") or key.
func (s *Snapshot) Get(provider, keyID string) (Record, bool) {
	r, ok := s.recs[ID(provider, keyID)]
	return r, ok
}

// Offline reports whether the provider's record says it is out
// (Record.Offline). A provider without a record is not offline.
func (s *Snapshot) Offline(provider string) bool {
	r, ok := s.recs[ID(provider, "")]
	return ok && r.Offline()
}

// KeyUnhealthy reports whether a key's own record (per-key checks) says it
// is out.
func (s *Snapshot) KeyUnhealthy(provider, keyID string) bool {
	if keyID == "" {
		return false
	}
	r, ok := s.recs[ID(provider, keyID)]
	return ok && r.Offline()
}

// Records returns every record, sorted by id.
func (s *Snapshot) Records() []Record {
	out := make([]Record, 0, len(s.recs))
	for _, r := range s.recs {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
