package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/kvwatch"
	"switchyard.dev/shared/redact"
)

// ErrNotFound: no record for that id.
var ErrNotFound = errors.New("health: not found")

// opTimeout bounds one bucket operation.
const opTimeout = 2 * time.Second

// Store reads and writes health records in the switchyard_health bucket
// (bus.Resources.Health). Only the prober replica holding a target's check
// lease writes its record, so writes are plain puts.
type Store struct {
	kv jetstream.KeyValue
}

// NewStore returns a Store on kv.
func NewStore(kv jetstream.KeyValue) *Store { return &Store{kv: kv} }

// Put writes rec under its id (ID(rec.Provider, rec.Key) when empty),
// stamped with UpdatedAt (now, UTC), and returns the new revision.
func (s *Store) Put(ctx context.Context, rec Record) (uint64, error) {
	if rec.ID == "" {
		rec.ID = ID(rec.Provider, rec.Key)
	}
	rec.Version = SchemaVersion
	rec.UpdatedAt = time.Now().UTC()
	rec.Reason = redact.String(rec.Reason)
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("health: encode %s: %w", rec.ID, err)
	}
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	rev, err := s.kv.Put(octx, rec.ID, data)
	if err != nil {
		return 0, fmt.Errorf("health: put %s: %w", rec.ID, err)
	}
	return rev, nil
}

// Get returns the record stored under id.
func (s *Store) Get(ctx context.Context, id string) (Record, error) {
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	e, err := s.kv.Get(octx, id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return Record{}, fmt.Errorf("health: get %s: %w", id, err)
	}
	return decode(e.Key(), e.Revision(), e.Value())
}

func decode(key string, rev uint64, data []byte) (Record, error) {
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return Record{}, fmt.Errorf("health: decode %s (revision %d): %w", key, rev, err)
	}
	rec.ID = key
	rec.Revision = rev
	return rec, nil
}

// Change is one update seen by Watch.
type Change struct {
	ID      string
	Record  Record // valid unless Deleted
	Deleted bool
	// Loaded marks the end of the initial values (no record).
	Loaded bool
}

// Watch calls apply for every record in the bucket, then Change{Loaded}
// once, then for every change, until ctx ends (it returns nil then).
// apply runs on Watch's goroutine. The watcher is package kvwatch's:
// re-created, resuming after the last revision seen, when nc reconnects,
// when the bucket's stream elects a leader, when it closes or falls behind
// the bucket; revisions seen already are skipped, and after an absence
// longer than half the marker TTL the bucket is reloaded (records that
// expired meanwhile arrive as deleted).
func Watch(ctx context.Context, kv jetstream.KeyValue, nc *nats.Conn, log *slog.Logger, apply func(Change)) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := kvwatch.Options{KV: kv, Conn: nc, Log: log, MarkerTTL: bus.LimitMarkerTTL}
	return kvwatch.Run(ctx, o, func(ev kvwatch.Event) {
		switch ev.Op {
		case kvwatch.OpLoaded:
			apply(Change{Loaded: true})
		case kvwatch.OpDelete:
			apply(Change{ID: ev.Key, Deleted: true})
		case kvwatch.OpPut:
			rec, err := decode(ev.Key, ev.Revision, ev.Value)
			if err != nil {
				log.Error("health watcher: skipping a record", "err", err)
				return
			}
			apply(Change{ID: ev.Key, Record: rec})
		}
	})
}
