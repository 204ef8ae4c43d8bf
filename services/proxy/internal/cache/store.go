package cache

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/answercache"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/kvwatch"
)

// Store is a proxy's cache: its Memory in front of the fleet's bucket.
// A lookup reads the memory, then (on a miss, within the lookup timeout)
// the bucket; an answer stored goes into the memory at once and into the
// bucket from a goroutine of its own, never on the request path; a
// watcher of the bucket feeds the memory with what the other proxies
// store. Safe for concurrent use.
type Store struct {
	mem      *Memory
	maxEntry int
	timeout  time.Duration
	log      *slog.Logger
	b        bus.Binding[bucket]
	writes   chan write
	flights  flights
	sem      semIndex // the entries with an embedding (semantic caches)
}

type bucket struct {
	kv jetstream.KeyValue
	nc *nats.Conn
}

type write struct {
	key  string
	data []byte
	ttl  time.Duration
}

// Result is what a lookup found.
type Result int

// Lookup results.
const (
	Miss   Result = iota // not cached (or expired)
	Hit                  // cached and live
	Bypass               // the bucket could not be read (not bound, NATS down, late): served without the cache
)

// writeQueue bounds the answers waiting for the bucket: beyond it an
// answer is kept in memory only (and counted dropped).
const writeQueue = 256

// NewStore returns an unbound Store whose memory holds memBytes, that
// keeps answers of at most maxEntry bytes; lookups that miss the memory
// wait at most timeout for the bucket.
func NewStore(memBytes int64, maxEntry int, timeout time.Duration, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{mem: NewMemory(memBytes), maxEntry: maxEntry, timeout: timeout, log: log, writes: make(chan write, writeQueue)}
}

// MaxEntry is the largest answer the store keeps.
func (s *Store) MaxEntry() int { return s.maxEntry }

// Bind gives the store its bucket (bus.Resources.Cache) and connection.
func (s *Store) Bind(kv jetstream.KeyValue, nc *nats.Conn) {
	if kv != nil {
		s.b.Bind(&bucket{kv: kv, nc: nc})
	}
}

// Memory is the store's memory.
func (s *Store) Memory() *Memory { return s.mem }

// Lookup returns the live entry of key: from memory, else from the
// bucket (bounded by the lookup timeout and ctx).
func (s *Store) Lookup(ctx context.Context, key string) (*Entry, Result) {
	now := time.Now()
	if e, ok := s.mem.Get(key, now); ok {
		return e, Hit
	}
	b := s.b.Load()
	if b == nil || (b.nc != nil && !b.nc.IsConnected()) {
		return nil, Bypass
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	kve, err := b.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, Miss
	case err != nil:
		return nil, Bypass
	}
	e, err := decode(kve.Value())
	if err != nil || !e.Live(now) {
		return nil, Miss
	}
	s.mem.Put(key, e)
	return e, Hit
}

// InMemory is Lookup of the proxy's memory alone: no bucket read.
func (s *Store) InMemory(key string) (*Entry, bool) {
	return s.mem.Get(key, time.Now())
}

// Put keeps e under key for ttl: in memory at once, in the bucket soon
// (false: the bucket's queue is full, the entry is in memory only).
func (s *Store) Put(key string, e *Entry, ttl time.Duration) bool {
	data, err := json.Marshal(e)
	if err != nil {
		s.log.Warn("cache: entry not encoded, not kept", "err", err)
		return false
	}
	s.mem.Put(key, e)
	s.sem.add(key, e.Endpoint, e.Embedding)
	select {
	case s.writes <- write{key: key, data: data, ttl: ttl}:
		return true
	default:
		return false
	}
}

// Run writes the queued entries to the bucket and follows it (the other
// proxies' entries into memory, purged and expired ones out) until ctx
// ends. It waits for the store to be bound.
func (s *Store) Run(ctx context.Context) {
	select {
	case <-s.b.Bound():
	case <-ctx.Done():
		return
	}
	b := s.b.Load()
	var wg sync.WaitGroup
	wg.Go(func() {
		o := kvwatch.Options{KV: b.kv, Conn: b.nc, Log: s.log, MarkerTTL: bus.LimitMarkerTTL}
		_ = kvwatch.Run(ctx, o, func(ev kvwatch.Event) {
			switch ev.Op {
			case kvwatch.OpPut:
				if e, err := decode(ev.Value); err == nil && e.Live(time.Now()) {
					s.mem.Put(ev.Key, e)
					s.sem.add(ev.Key, e.Endpoint, e.Embedding)
				}
			case kvwatch.OpDelete:
				s.mem.Remove(ev.Key)
				s.sem.remove(ev.Key)
			}
		})
	})
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case w := <-s.writes:
			s.write(ctx, b, w)
		}
	}
}

// write stores one entry with its TTL; a key present already (another
// proxy stored the same answer first) is left as it is.
func (s *Store) write(ctx context.Context, b *bucket, w write) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := b.kv.Create(ctx, w.key, w.data, jetstream.KeyTTL(w.ttl))
	var apiErr *jetstream.APIError
	switch {
	case err == nil, errors.Is(err, jetstream.ErrKeyExists):
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == 10071 || apiErr.ErrorCode == 10164):
		// a replicated bucket's way of saying the key exists
	default:
		s.log.Warn("cache: entry not stored in the bucket (kept in memory)", "err", err)
	}
}

func decode(b []byte) (*Entry, error) { return answercache.Decode(b) }
