package rollup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrConflict: a compare-and-set write lost, so another recorder wrote
// the value (or the checkpoint) since it was read. The writer's memory is
// stale: it must drop it and start again from the checkpoint.
var ErrConflict = errors.New("rollup: written by another recorder")

// CheckpointKey is the key of the recorder's Checkpoint.
const CheckpointKey = "recorder.checkpoint"

// Checkpoint says how far the recorder has read SWITCHYARD_USAGE: every
// record of every message up to Seq is in the rollups (values may hold
// later ones too: each cell's through says which).
type Checkpoint struct {
	V int `json:"v"`
	// Seq is the stream sequence of the last message folded; StoredAt the
	// time the stream stored it.
	Seq      uint64    `json:"seq"`
	StoredAt time.Time `json:"stored_at"`
	// StartSeq is the first message the recorder ever read, StartAt the
	// earliest record time in it: when StartSeq > 1 the stream had
	// discarded older records before the recorder began, and the rollups
	// cover nothing before StartAt.
	StartSeq uint64    `json:"start_seq"`
	StartAt  time.Time `json:"start_at"`
	// Lost lists the latest stretches of messages the stream discarded
	// before the recorder read them (at most MaxGaps).
	Lost []Gap `json:"lost"`
	// Instance is the admin instance that wrote it.
	Instance string `json:"instance"`
}

// Gap is a stretch of messages lost before the recorder read them: those
// after stream sequence After, Messages of them, with records from about
// From (the time of message After) to To (the time of the next message
// read).
type Gap struct {
	After    uint64    `json:"after"`
	Messages uint64    `json:"messages"`
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
}

// MaxGaps bounds Checkpoint.Lost.
const MaxGaps = 100

// Store reads and writes the rollups in their KV bucket
// (switchyard_usage_rollups).
type Store struct {
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	Res []Resolution
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Cache, when set, keeps the values Read and ReadAll decode (they
	// hand out shared values: see Cache).
	Cache *Cache
}

// NewStore returns the store of kv, with the resolutions res.
func NewStore(js jetstream.JetStream, kv jetstream.KeyValue, res []Resolution) *Store {
	return &Store{js: js, kv: kv, Res: res, Now: time.Now}
}

func (s *Store) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// Checkpoint returns the recorder's checkpoint and its revision; zero and
// 0 when there is none.
func (s *Store) Checkpoint(ctx context.Context) (Checkpoint, uint64, error) {
	var c Checkpoint
	e, err := s.kv.Get(ctx, CheckpointKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return c, 0, nil
	}
	if err != nil {
		return c, 0, fmt.Errorf("rollup: read checkpoint: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return c, 0, fmt.Errorf("rollup: read checkpoint: %w", err)
	}
	return c, e.Revision(), nil
}

// PutCheckpoint writes c if the checkpoint is still at revision rev (0:
// absent) and returns the new revision; ErrConflict when it is not.
func (s *Store) PutCheckpoint(ctx context.Context, c Checkpoint, rev uint64) (uint64, error) {
	c.V = SchemaVersion
	data, err := json.Marshal(c)
	if err != nil {
		return 0, err
	}
	var n uint64
	if rev == 0 {
		n, err = s.kv.Create(ctx, CheckpointKey, data)
	} else {
		n, err = s.kv.Update(ctx, CheckpointKey, data, rev)
	}
	if err != nil {
		if lostCAS(err) {
			return 0, fmt.Errorf("%w: checkpoint at revision %d", ErrConflict, rev)
		}
		return 0, fmt.Errorf("rollup: write checkpoint: %w", err)
	}
	return n, nil
}

// lostCAS reports a compare-and-set write that lost.
func lostCAS(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// put writes v under its key with the TTL left to its bucket, if the key
// is still at revision rev (0: absent); it returns the new revision. A
// value keeps its TTL across writes (kv.Update would drop it, nats.go
// #1994, so an update is published with the expected revision and the
// TTL).
func (s *Store) put(ctx context.Context, res Resolution, v *Value, rev uint64) (uint64, error) {
	// A write once sent is waited for, whatever ctx does (up to
	// putTimeout): a recorder that stops gives its lease up only after its
	// last write landed, so the next recorder, loading the values, sees
	// it. A write cut at the client could still land at the server after
	// the next one loaded, and a cell it made could then be made again in
	// another part.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), putTimeout)
	defer cancel()
	key := Key(v.Resolution, v.Start, v.Provider, v.Part)
	data, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	ttl := valueTTL(res, v.Start, s.now())
	var n uint64
	if rev == 0 {
		n, err = s.kv.Create(ctx, key, data, jetstream.KeyTTL(ttl))
	} else {
		msg := &nats.Msg{Subject: "$KV." + s.kv.Bucket() + "." + key, Data: data}
		var ack *jetstream.PubAck
		ack, err = s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
		if err == nil {
			n = ack.Sequence
		}
	}
	if err != nil {
		if lostCAS(err) {
			return 0, fmt.Errorf("%w: %s at revision %d", ErrConflict, key, rev)
		}
		return 0, fmt.Errorf("rollup: write %s (%d bytes): %w", key, len(data), err)
	}
	return n, nil
}

// valueTTL is the TTL of a value of the bucket of res starting at start,
// written at now: the time left until the bucket Expires, rounded up to
// whole seconds (NATS keeps a message's TTL in seconds, dropping any
// fraction), at least a second. Never shorter than the time left: a value
// the server expired before its bucket's Expires (rounded to the nearest
// second, up to half a second before) would be missing from a report that
// still reads the bucket as kept (Resolution.Kept, planTiles).
func valueTTL(res Resolution, start, now time.Time) time.Duration {
	left := res.Expires(start).Sub(now)
	ttl := left.Truncate(time.Second)
	if ttl < left {
		ttl += time.Second
	}
	return max(ttl, time.Second)
}

// putTimeout bounds one value write (see put).
const putTimeout = 5 * time.Second

// Tile is one time bucket of one resolution (an index into Store.Res).
type Tile struct {
	Res   int
	Start time.Time
}

// Read calls visit for every stored value of the tiles (tile index, value),
// in no particular order. It reads them with one watcher on the tiles'
// keys. visit must not change the value (it may be the Cache's).
func (s *Store) Read(ctx context.Context, tiles []Tile, visit func(tile int, v *Value)) error {
	if len(tiles) == 0 {
		return nil
	}
	index := make(map[string]int, len(tiles))
	filters := make([]string, len(tiles))
	for i, t := range tiles {
		p := BucketPrefix(s.Res[t.Res].Name, t.Start)
		index[p] = i
		filters[i] = p + ">"
	}
	w, err := s.kv.WatchFiltered(ctx, filters, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("rollup: read %d buckets: %w", len(tiles), err)
	}
	defer stopWatch(w)
	return s.drain(ctx, w, func(key string, v *Value) {
		if i, ok := index[BucketPrefix(v.Resolution, v.Start)]; ok {
			visit(i, v)
		}
	})
}

// drain reads a watcher's initial values (until its nil marker).
func (s *Store) drain(ctx context.Context, w jetstream.KeyWatcher, visit func(key string, v *Value)) error {
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("rollup: read: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("rollup: read: watcher stopped")
			}
			if e == nil {
				return nil // the initial values are all in
			}
			v, ok := s.Cache.get(e.Key(), e.Revision())
			if !ok {
				v = new(Value)
				if err := json.Unmarshal(e.Value(), v); err != nil {
					return fmt.Errorf("rollup: read %s: %w", e.Key(), err)
				}
				if err := v.check(e.Key()); err != nil {
					return err
				}
				s.Cache.put(e.Key(), e.Revision(), v)
			}
			visit(e.Key(), v)
		}
	}
}

// load reads the stored parts of one bucket of one provider, in part
// order, with their revisions. Parts are created in order (0, 1, ...) and
// share their bucket's TTL, so the first absent part ends them.
func (s *Store) load(ctx context.Context, res Resolution, start time.Time, provider string) ([]*part, error) {
	var parts []*part
	for i := 0; ; i++ {
		k := Key(res.Name, start, provider, i)
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return parts, nil
		}
		if err != nil {
			return nil, fmt.Errorf("rollup: read %s: %w", k, err)
		}
		p := &part{rev: e.Revision()}
		if err := json.Unmarshal(e.Value(), &p.v); err != nil {
			return nil, fmt.Errorf("rollup: read %s: %w", k, err)
		}
		if err := p.v.check(k); err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
}

// ReadAll calls visit for every stored value of resolution res.
func (s *Store) ReadAll(ctx context.Context, res int, visit func(v *Value)) error {
	w, err := s.kv.Watch(ctx, s.Res[res].Name+".>", jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("rollup: read %s buckets: %w", s.Res[res].Name, err)
	}
	defer stopWatch(w)
	return s.drain(ctx, w, func(key string, v *Value) { visit(v) })
}

// stopWatch stops w and reads what it still delivers until it closes its
// channel: a watcher's delivery blocks on a full channel, and a stopped
// watcher whose channel nobody reads would keep its goroutine forever.
func stopWatch(w jetstream.KeyWatcher) {
	_ = w.Stop()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return
			}
		case <-t.C:
			return
		}
	}
}
