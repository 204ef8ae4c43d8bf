package hold

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// MemStore is an in-memory Store with the semantics of the NATS KV store:
// create-if-absent, compare-and-set on revisions (one counter for the whole
// store, like a stream sequence), per-record TTL whose expiry reaches
// watchers as a delete, and watches that deliver every record present, then
// every change in revision order. It is safe for concurrent use; several
// engines sharing one MemStore behave like a fleet sharing a bucket.
type MemStore struct {
	clock Clock
	down  atomic.Bool

	mu       sync.Mutex
	rev      uint64
	recs     map[string]*memRec
	watchers map[*memWatcher]struct{}
}

type memRec struct {
	rec   Record
	rev   uint64
	timer Timer
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty store on the wall clock.
func NewMemStore() *MemStore { return NewMemStoreClock(SystemClock{}) }

// NewMemStoreClock returns an empty store whose TTLs run on clock.
func NewMemStoreClock(clock Clock) *MemStore {
	return &MemStore{clock: clock, recs: map[string]*memRec{}, watchers: map[*memWatcher]struct{}{}}
}

// SetDown makes every call fail with ErrUnavailable (true) or work again
// (false), to simulate NATS going away. Watches stay open and deliver the
// changes made after the store is back.
func (m *MemStore) SetDown(down bool) { m.down.Store(down) }

// Len returns the number of live records.
func (m *MemStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.recs)
}

func (m *MemStore) check(ctx context.Context) error {
	if m.down.Load() {
		return ErrUnavailable
	}
	return ctx.Err()
}

// Create stores rec if no record exists for rec.ID.
func (m *MemStore) Create(ctx context.Context, rec Record, ttl time.Duration) (uint64, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	if err := CheckID(rec.ID); err != nil {
		return 0, err // as the KV store refuses it
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.recs[rec.ID]; ok {
		return 0, ErrExists
	}
	return m.putLocked(rec, ttl), nil
}

// Update replaces the record at revision rev.
func (m *MemStore) Update(ctx context.Context, rec Record, rev uint64, ttl time.Duration) (uint64, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	if err := CheckStoredID(rec.ID); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.recs[rec.ID]
	if !ok || cur.rev != rev {
		return 0, ErrConflict
	}
	if cur.timer != nil {
		cur.timer.Stop()
	}
	return m.putLocked(rec, ttl), nil
}

func (m *MemStore) putLocked(rec Record, ttl time.Duration) uint64 {
	m.rev++
	rev := m.rev
	rec.Revision = rev
	r := &memRec{rec: rec, rev: rev}
	if ttl > 0 {
		id := rec.ID
		r.timer = m.clock.AfterFunc(ttl, func() { m.expire(id, rev) })
	}
	m.recs[rec.ID] = r
	m.notifyLocked(Change{ID: rec.ID, Record: rec, Revision: rev})
	return rev
}

func (m *MemStore) expire(id string, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.recs[id]; ok && cur.rev == rev {
		m.deleteLocked(id)
	}
}

func (m *MemStore) deleteLocked(id string) {
	if cur := m.recs[id]; cur != nil && cur.timer != nil {
		cur.timer.Stop()
	}
	delete(m.recs, id)
	m.rev++
	m.notifyLocked(Change{ID: id, Deleted: true, Revision: m.rev})
}

// Delete removes the record if it is still at revision rev (0 = any).
func (m *MemStore) Delete(ctx context.Context, id string, rev uint64) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.recs[id]
	if !ok {
		return ErrNotFound
	}
	if rev != 0 && cur.rev != rev {
		return ErrConflict
	}
	m.deleteLocked(id)
	return nil
}

// Get returns the current record.
func (m *MemStore) Get(ctx context.Context, id string) (Record, error) {
	if err := m.check(ctx); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.recs[id]
	if !ok {
		return Record{}, ErrNotFound
	}
	return cur.rec, nil
}

// Watch delivers every record present (Initial), then every change, until
// ctx ends; it returns ctx.Err().
func (m *MemStore) Watch(ctx context.Context, apply func(Change)) error {
	w := &memWatcher{wake: make(chan struct{}, 1)}
	m.mu.Lock()
	initial := make([]Change, 0, len(m.recs))
	for id, r := range m.recs {
		initial = append(initial, Change{ID: id, Record: r.rec, Revision: r.rev, Initial: true})
	}
	m.watchers[w] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.watchers, w)
		m.mu.Unlock()
	}()
	sort.Slice(initial, func(i, j int) bool { return initial[i].Revision < initial[j].Revision })
	for _, c := range initial {
		apply(c)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.wake:
		}
		for _, c := range w.take() {
			apply(c)
		}
	}
}

type memWatcher struct {
	mu    sync.Mutex
	queue []Change
	wake  chan struct{}
}

func (w *memWatcher) take() []Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queue
	w.queue = nil
	return q
}

func (m *MemStore) notifyLocked(c Change) {
	for w := range m.watchers {
		w.mu.Lock()
		w.queue = append(w.queue, c)
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}
