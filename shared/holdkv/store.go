// Package holdkv keeps Switchyard's hold records in NATS JetStream KV (the
// switchyard_holds bucket made by bus.Setup) and publishes hold events on
// NATS subjects: the NATS implementations of hold.Store and hold.Emitter.
package holdkv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/redact"
)

// DefaultOpTimeout bounds one store operation, so that a caller never
// waits long on a NATS that does not answer.
const DefaultOpTimeout = 2 * time.Second

// Store is a hold.Store on a JetStream KV bucket. Keys are scope ids
// (hold.Scope.ID), values are hold.Record JSON, and the bucket revision is
// the record's revision. Every method is safe for concurrent use.
//
// A Store made by NewUnbound has no bucket yet: until Bind, every
// operation fails with hold.ErrUnavailable and Watch waits. A process
// starts serving before NATS answers this way (package fleet binds the
// bucket once bus.Setup succeeds).
type Store struct {
	nc  *nats.Conn
	log *slog.Logger
	b   bus.Binding[binding]

	opTimeout time.Duration
	markerTTL time.Duration

	syncOnce sync.Once
	synced   chan struct{}
}

// binding is the bucket a Store works on.
type binding struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	prefix string // $KV.<bucket>.
}

var _ hold.Store = (*Store)(nil)

// Option tunes a Store.
type Option func(*Store)

// WithOpTimeout bounds each Create, Update, Delete and Get (default
// DefaultOpTimeout). The caller's context may end it sooner.
func WithOpTimeout(d time.Duration) Option { return func(s *Store) { s.opTimeout = d } }

// WithMarkerTTL is the bucket's LimitMarkerTTL (default
// bus.LimitMarkerTTL): a watcher out of touch for more than half of it
// reloads the bucket instead of resuming, as expiry markers may be gone.
func WithMarkerTTL(d time.Duration) Option { return func(s *Store) { s.markerTTL = d } }

// NewStore returns a Store bound to kv (bus.Resources.Holds). js is the
// JetStream context kv came from: renewals that keep a TTL are published
// through it, and its connection's reconnects restart watchers at once.
func NewStore(js jetstream.JetStream, kv jetstream.KeyValue, log *slog.Logger, opts ...Option) *Store {
	s := NewUnbound(js.Conn(), log, opts...)
	s.Bind(js, kv)
	return s
}

// NewUnbound returns a Store on nc whose bucket is bound later (Bind).
func NewUnbound(nc *nats.Conn, log *slog.Logger, opts ...Option) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		nc:        nc,
		log:       log.With("component", "holdkv"),
		opTimeout: DefaultOpTimeout,
		markerTTL: bus.LimitMarkerTTL,
		synced:    make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Bind sets the bucket (bus.Resources.Holds) and the JetStream context it
// came from; operations use it from now on and waiting Watch calls start.
// Only the first Bind counts (bus.Binding).
func (s *Store) Bind(js jetstream.JetStream, kv jetstream.KeyValue) {
	s.b.Bind(&binding{js: js, kv: kv, prefix: "$KV." + kv.Bucket() + "."})
}

// Bound is closed once the Store has its bucket.
func (s *Store) Bound() <-chan struct{} { return s.b.Bound() }

// Synced is closed once a Watch on this Store has delivered its initial
// load (or given up waiting for its end marker).
func (s *Store) Synced() <-chan struct{} { return s.synced }

// keyRE is what a KV key may contain.
var keyRE = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

// encode fills in the record's id and schema version and marshals it;
// check bounds the id's length (hold.CheckID for a new record,
// hold.CheckStoredID for one that exists).
func encode(rec hold.Record, check func(string) error) (string, []byte, error) {
	if rec.ID == "" {
		rec.ID = rec.Scope.ID()
	}
	if rec.Version == 0 {
		rec.Version = hold.SchemaVersion
	}
	rec.Reason = redact.String(rec.Reason)
	// Checked here, not left to NATS: a key too long for its protocol
	// line closes the connection for good.
	if err := check(rec.ID); err != nil {
		return "", nil, fmt.Errorf("holdkv: %w", err)
	}
	if !keyRE.MatchString(rec.ID) || rec.ID[0] == '.' || rec.ID[len(rec.ID)-1] == '.' {
		return "", nil, fmt.Errorf("holdkv: %w: %q is not a valid KV key", hold.ErrInvalidID, rec.ID)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return "", nil, fmt.Errorf("holdkv: encode hold %s: %w", rec.ID, err)
	}
	return rec.ID, data, nil
}

// Encode returns the key and value under which a Store keeps a new record
// rec: for tools that write switchyard_holds directly (the bench's
// preload of many holds), in the one record format.
func Encode(rec hold.Record) (key string, value []byte, err error) {
	return encode(rec, hold.CheckID)
}

// decode reads a record stored under key at revision rev.
func decode(key string, rev uint64, data []byte) (hold.Record, error) {
	var rec hold.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return hold.Record{}, fmt.Errorf("holdkv: decode hold %s (revision %d): %w", key, rev, err)
	}
	rec.ID = key
	rec.Revision = rev
	return rec, nil
}

// TTL rounds d up to whole seconds, at least one: the resolution of
// JetStream per-message TTLs.
func TTL(d time.Duration) time.Duration {
	if d <= time.Second {
		return time.Second
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// ready returns the bucket, failing fast when there is none yet or the
// connection is down: a request would otherwise sit in the reconnect buffer
// until its timeout.
func (s *Store) ready(op, key string) (*binding, error) {
	b := s.b.Load()
	if b == nil {
		return nil, fmt.Errorf("%w: %s %s: NATS buckets not bound yet", hold.ErrUnavailable, op, key)
	}
	if s.nc != nil && !s.nc.IsConnected() {
		return nil, fmt.Errorf("%w: %s %s: NATS %s", hold.ErrUnavailable, op, key, s.nc.Status())
	}
	return b, nil
}

// Create stores rec under rec.ID (rec.Scope.ID() when empty) if no live
// record is there; ttl > 0 makes the record expire by itself.
func (s *Store) Create(ctx context.Context, rec hold.Record, ttl time.Duration) (uint64, error) {
	key, data, err := encode(rec, hold.CheckID)
	if err != nil {
		return 0, err
	}
	b, err := s.ready("create", key)
	if err != nil {
		return 0, err
	}
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	var opts []jetstream.KVCreateOpt
	if ttl > 0 {
		opts = append(opts, jetstream.KeyTTL(TTL(ttl)))
	}
	rev, err := b.kv.Create(octx, key, data, opts...)
	switch {
	case err == nil:
		return rev, nil
	case errors.Is(err, jetstream.ErrKeyExists) || bus.WrongLastSequence(err):
		return 0, fmt.Errorf("%w: %s", hold.ErrExists, key)
	}
	return 0, s.fail(ctx, "create", key, err)
}

// Update replaces the record at revision rev. With ttl > 0 the new value
// expires by itself, with ttl 0 it stays until deleted (kv.Update would drop a per-key TTL, nats.go #1994,
// so the value is published with its TTL and the expected revision).
func (s *Store) Update(ctx context.Context, rec hold.Record, rev uint64, ttl time.Duration) (uint64, error) {
	key, data, err := encode(rec, hold.CheckStoredID)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		return 0, fmt.Errorf("holdkv: update %s: no revision to compare with", key)
	}
	b, err := s.ready("update", key)
	if err != nil {
		return 0, err
	}
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	var newRev uint64
	if ttl > 0 {
		msg := &nats.Msg{Subject: b.prefix + key, Data: data}
		var ack *jetstream.PubAck
		ack, err = b.js.PublishMsg(octx, msg,
			jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(TTL(ttl)))
		if err == nil {
			newRev = ack.Sequence
		}
	} else {
		newRev, err = b.kv.Update(octx, key, data, rev)
	}
	switch {
	case err == nil:
		return newRev, nil
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || bus.WrongLastSequence(err):
		return 0, fmt.Errorf("%w: update %s at revision %d", hold.ErrConflict, key, rev)
	}
	return 0, s.fail(ctx, "update", key, err)
}

// Delete removes the record if it is still at revision rev (0: whatever
// its revision). It returns hold.ErrNotFound when there is no live record
// and hold.ErrConflict when the record moved on.
func (s *Store) Delete(ctx context.Context, id string, rev uint64) error {
	if hold.CheckStoredID(id) != nil {
		return fmt.Errorf("%w: delete: no record has an id of %d bytes", hold.ErrNotFound, len(id)) // never sent: see encode
	}
	b, err := s.ready("delete", id)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	var opts []jetstream.KVDeleteOpt
	if rev == 0 {
		if _, err := b.kv.Get(octx, id); err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				return fmt.Errorf("%w: delete %s", hold.ErrNotFound, id)
			}
			return s.fail(ctx, "delete", id, err)
		}
	} else {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	err = b.kv.Delete(octx, id, opts...)
	if err == nil {
		return nil
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || bus.WrongLastSequence(err) {
		if _, gerr := b.kv.Get(octx, id); errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("%w: delete %s", hold.ErrNotFound, id)
		}
		return fmt.Errorf("%w: delete %s at revision %d", hold.ErrConflict, id, rev)
	}
	return s.fail(ctx, "delete", id, err)
}

// Get returns the live record stored under id.
func (s *Store) Get(ctx context.Context, id string) (hold.Record, error) {
	if hold.CheckStoredID(id) != nil {
		return hold.Record{}, fmt.Errorf("%w: get: no record has an id of %d bytes", hold.ErrNotFound, len(id)) // never sent: see encode
	}
	b, err := s.ready("get", id)
	if err != nil {
		return hold.Record{}, err
	}
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	e, err := b.kv.Get(octx, id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return hold.Record{}, fmt.Errorf("%w: %s", hold.ErrNotFound, id)
		}
		return hold.Record{}, s.fail(ctx, "get", id, err)
	}
	return decode(id, e.Revision(), e.Value())
}

// fail wraps an error that is not an answer about the record: the
// caller's own cancellation stays itself, anything that says NATS or
// JetStream could not be reached becomes hold.ErrUnavailable.
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("holdkv: %s %s: %w", op, key, ctx.Err())
	}
	if bus.Unavailable(err) {
		return fmt.Errorf("%w: %s %s: %w", hold.ErrUnavailable, op, key, err)
	}
	return fmt.Errorf("holdkv: %s %s: %w", op, key, err)
}
