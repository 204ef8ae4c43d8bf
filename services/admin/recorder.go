package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/lease"
	"switchyard.dev/shared/usage"
	"switchyard.dev/shared/usage/rollup"
)

// The usage recorder folds every record of SWITCHYARD_USAGE exactly once
// into the rollups (switchyard_usage_rollups), which GET /admin/usage
// reads instead of the raw stream.
//
// Exactly once, across admin instances and restarts:
//
//   - One recorder at a time: the one holding the lease usage-recorder in
//     switchyard_leases, a key created only if absent with a per-key TTL
//     (metering.rollups.lease) and renewed by compare-and-set every third
//     of it. When its owner stops renewing (it died, or lost NATS) the key
//     expires and another instance creates it. A stopping owner deletes
//     it, so the next one starts at once.
//   - The recorder reads the stream in order from its checkpoint (an
//     ordered consumer by start sequence), folds each message's records
//     into its sinks in memory, and every flush_interval writes what
//     changed, then the checkpoint (the last sequence folded).
//   - Each rollup cell stores through, the sequence of the last message
//     folded into it; a message at or below a cell's through is not folded
//     into it again (rollup.Folder). A recorder that dies between writing
//     values and writing the checkpoint, or in the middle of a flush,
//     leaves values ahead of the checkpoint: the next one replays from the
//     checkpoint and folds only what each cell lacks.
//   - Every write is a compare-and-set against the revision read: a
//     recorder that lost its lease without knowing it (a pause longer than
//     the TTL) cannot overwrite what the new one wrote; it gets a conflict,
//     drops its memory and starts again.
//
// A message the stream discarded before the recorder read it
// (metering.max_bytes, metering.retention) is counted in the checkpoint's
// lost gaps and logged: reports say how many messages they could not read.

// usageSink is what the recorder folds records into: the rollups
// (rollup.Folder) and, with metering.store, PostgreSQL (usageStore). A
// sink holds what Add gave it until Flush makes it
// durable; Reset drops what was not flushed (the recorder starts again
// from its checkpoint, so a sink must tolerate records it already has:
// the Folder by each cell's through, a store of every record by its
// request id).
type usageSink interface {
	Add(ctx context.Context, seq uint64, recs []usage.Record) error
	Flush(ctx context.Context) error
	Reset()
}

var _ usageSink = (*rollup.Folder)(nil)

// recorderLeaseKey is the recorder's lease in switchyard_leases.
const recorderLeaseKey = "usage-recorder"

// recorderMaxBatch flushes after this many messages even before
// flush_interval, so that a backlog is written in bounded steps.
const recorderMaxBatch = 5000

// recorderRetryMax is the longest wait between two attempts at a flush
// that failed (PostgreSQL or NATS down): the wait doubles from 100ms.
const recorderRetryMax = 10 * time.Second

// errNotRecorder: another instance holds the lease.
var errNotRecorder = errors.New("another admin instance records usage")

// recorder is one admin instance's part in recording: it waits for the
// lease, and records while it holds it.
type recorder struct {
	log      *slog.Logger
	inst     string
	flush    time.Duration
	leaseTTL time.Duration
	res      []rollup.Resolution
	// resources returns the bound buckets and streams (nil before).
	resources func() *bus.Resources
	nc        *nats.Conn
	// store is metering.store's sink, nil without one.
	store *usageStore
	// retryMax bounds the wait between attempts at a failed flush
	// (recorderRetryMax when 0).
	retryMax time.Duration
	// active is true while this instance holds the lease; checkpoint is
	// the last checkpoint it wrote (for tests and metrics).
	active     atomic.Bool
	checkpoint atomic.Uint64
	// flushFailures counts the failed attempts at a flush.
	flushFailures atomic.Int64
}

// Run records whenever this instance holds the lease, until ctx ends.
func (r *recorder) Run(ctx context.Context) {
	if r.store != nil {
		if err := r.store.Open(); err != nil {
			r.log.Error("admin: usage recorder not started", "err", err)
			return
		}
		defer r.store.Close()
	}
	retry := time.NewTicker(max(r.leaseTTL/3, 100*time.Millisecond))
	defer retry.Stop()
	for {
		err := r.lead(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !errors.Is(err, errNotRecorder):
			r.log.Warn("admin: usage recorder stopped; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
		}
	}
}

// lead takes the lease and records until it is lost, an error, or the end
// of ctx.
func (r *recorder) lead(ctx context.Context) error {
	res := r.resources()
	if res == nil || res.UsageRollups == nil || res.Leases == nil || res.Usage == nil {
		return errNotRecorder // not bound yet
	}
	js, err := jetstream.New(r.nc)
	if err != nil {
		return err
	}
	l := &lease.Lease{JS: js, KV: res.Leases, Key: recorderLeaseKey, Owner: r.inst, TTL: r.leaseTTL}
	if _, err := l.Acquire(ctx); err != nil {
		if errors.Is(err, lease.ErrLost) {
			return errNotRecorder
		}
		return fmt.Errorf("take the usage recorder lease: %w", err)
	}
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer cancel()
		t := time.NewTicker(r.leaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
				// NATS not answering leaves the lease ours until it lapses
				// (the next renewal tells); another owner ends it at once
				if _, err := l.Acquire(lctx); err != nil && lctx.Err() == nil &&
					(errors.Is(err, lease.ErrLost) || !time.Now().Before(l.Until)) {
					r.log.Warn("admin: usage recorder lease lost", "err", err)
					return
				}
			}
		}
	})
	r.active.Store(true)
	r.log.Info("admin: recording usage rollups", "instance", r.inst)
	defer func() {
		r.active.Store(false)
		cancel()
		wg.Wait()
		l.Release(context.WithoutCancel(ctx))
	}()
	st := rollup.NewStore(js, res.UsageRollups, r.res)
	sinks := []usageSink{rollup.NewFolder(st)}
	if r.store != nil {
		sinks = append(sinks, r.store)
	}
	return r.record(lctx, res.Usage, st, sinks)
}

// record reads the stream from the checkpoint and folds it into sinks
// until ctx ends or an error.
func (r *recorder) record(ctx context.Context, stream jetstream.Stream, st *rollup.Store, sinks []usageSink) error {
	octx, ocancel := context.WithTimeout(ctx, opTimeout)
	ck, rev, err := st.Checkpoint(octx)
	ocancel()
	if err != nil {
		return err
	}
	for _, s := range sinks {
		s.Reset()
	}
	start := ck.Seq + 1
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("usage recorder consumer: %w", err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return fmt.Errorf("usage recorder consumer: %w", err)
	}
	defer iter.Stop()

	last, lastAt := ck.Seq, ck.StoredAt
	pending := 0 // messages folded since the last flush
	flushAt := time.Now().Add(r.flush)
	var rec usage.Record
	var recs []usage.Record
	flush := func() error {
		for _, s := range sinks {
			if err := r.flushSink(ctx, s); err != nil {
				return err
			}
		}
		ck.Seq, ck.StoredAt, ck.Instance = last, lastAt, r.inst
		octx, ocancel := context.WithTimeout(ctx, opTimeout)
		defer ocancel()
		n, err := st.PutCheckpoint(octx, ck, rev)
		if err != nil {
			return err
		}
		rev, pending = n, 0
		r.checkpoint.Store(last)
		return nil
	}
	for {
		wait := time.Until(flushAt)
		if pending == 0 {
			wait = time.Hour // nothing to write: wait for a record
		}
		nctx, ncancel := context.WithTimeout(ctx, max(wait, time.Millisecond))
		m, err := iter.Next(jetstream.NextContext(nctx))
		ncancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil // lease lost or stopping: what is not flushed is replayed by the next one
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("usage recorder consumer: %w", err)
			}
		} else {
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("usage record metadata: %w", err)
			}
			seq := md.Sequence.Stream
			if seq <= last {
				continue
			}
			recs = recs[:0]
			for line := range bytes.Lines(m.Data()) {
				if decodeRecord(bytes.TrimSuffix(line, []byte("\n")), &rec) == nil && rec.V == usage.SchemaVersion {
					recs = append(recs, rec)
				}
			}
			switch {
			case ck.StartSeq == 0:
				ck.StartSeq, ck.StartAt = seq, md.Timestamp
				for _, x := range recs {
					if x.At.Before(ck.StartAt) {
						ck.StartAt = x.At
					}
				}
			case seq > last+1:
				g := rollup.Gap{After: last, Messages: seq - last - 1, From: lastAt, To: md.Timestamp}
				r.log.Warn("admin: usage records lost before the recorder read them (the stream discarded them: see metering.max_bytes)",
					"messages", g.Messages, "after_seq", g.After, "from", g.From, "to", g.To)
				ck.Lost = append(ck.Lost, g)
				if len(ck.Lost) > rollup.MaxGaps {
					ck.Lost = ck.Lost[len(ck.Lost)-rollup.MaxGaps:]
				}
			}
			for _, s := range sinks {
				if err := s.Add(ctx, seq, recs); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
			}
			last, lastAt = seq, md.Timestamp
			if pending == 0 {
				flushAt = time.Now().Add(r.flush)
			}
			pending++
			if pending < recorderMaxBatch && time.Now().Before(flushAt) {
				continue
			}
		}
		if pending > 0 {
			if err := flush(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
}

// flushSink flushes s, and while that fails (PostgreSQL down, NATS slow)
// tries again, the wait doubling from 100ms to retryMax: the records wait
// in the sink and the backlog in the stream, the checkpoint stays where it
// is, and the lease is kept. Values a failed Folder flush wrote are
// written (not dirty any more); the next attempt writes the rest. Only a
// conflict (another recorder wrote: start again from the checkpoint) or
// the end of ctx ends it early.
func (r *recorder) flushSink(ctx context.Context, s usageSink) error {
	wait, most := 100*time.Millisecond, r.retryMax
	if most <= 0 {
		most = recorderRetryMax
	}
	for failed := 0; ; failed++ {
		err := s.Flush(ctx)
		if err == nil {
			if failed > 0 {
				r.log.Info("admin: usage recorder writes again", "failed_attempts", failed)
			}
			return nil
		}
		r.flushFailures.Add(1)
		switch {
		case ctx.Err() != nil || errors.Is(err, rollup.ErrConflict):
			return err
		case failed == 0:
			r.log.Warn("admin: usage recorder cannot write; retrying (the stream keeps the records)", "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, most)
	}
}
