package holdkv

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/hold"
)

// Watch calls apply for every record in the bucket (Change.Initial), then
// for every change, until ctx ends; it returns nil then. Deleted, purged
// and expired records arrive as Change{Deleted: true}. apply runs on the
// Watch goroutine, one change at a time, in revision order.
//
// The watcher is re-created, resuming after the last applied revision,
// whenever the connection reconnects, the watcher closes or it falls
// behind the bucket: after a NATS restart changes flow again within
// about a second instead of the ~20 s a stale consumer takes to notice.
// Revisions already applied are skipped. While NATS is unreachable Watch
// keeps retrying; it never gives up on its own.
func (s *Store) Watch(ctx context.Context, apply func(hold.Change)) error {
	w := &watch{s: s, apply: apply, live: make(map[string]uint64)}
	return w.run(ctx)
}

// watch is the state of one Watch call; only its goroutine touches it.
type watch struct {
	s     *Store
	apply func(hold.Change)

	kw      jetstream.KeyWatcher
	last    uint64            // highest revision applied
	live    map[string]uint64 // keys with a live record -> revision
	loading bool              // before the current watcher's end-of-initial-values marker
	initial bool              // the very first load: changes are Initial
	reload  bool              // the current watcher reloads everything (no resume)
	seen    map[string]bool   // keys seen during a reload
	contact time.Time         // last time the watcher was known to be current

	// stall detection
	caughtUp     uint64 // a bucket revision no watcher delivers, accounted as seen
	wasBehind    bool   // the previous check found the watcher behind
	behindAt     uint64 // w.last at that check
	restartedFor uint64 // bucket revision of the last stall restart
	retryDelay   time.Duration
}

func (w *watch) run(ctx context.Context) error {
	s := w.s
	var status chan nats.Status
	if s.nc != nil {
		status = s.nc.StatusChanged(nats.CONNECTED, nats.DISCONNECTED, nats.RECONNECTING)
		defer s.nc.RemoveStatusListener(status)
	}
	defer w.stop()

	var stallC <-chan time.Time
	if s.stallCheck > 0 {
		t := time.NewTicker(s.stallCheck)
		defer t.Stop()
		stallC = t.C
	}
	loadTimer := time.NewTimer(time.Hour)
	loadTimer.Stop()
	defer loadTimer.Stop()
	retry := time.NewTimer(0) // fires at once: start the first watcher
	defer retry.Stop()

	w.initial = true
	w.contact = time.Now()
	for {
		var updates <-chan jetstream.KeyValueEntry
		if w.kw != nil {
			updates = w.kw.Updates()
		}
		select {
		case <-ctx.Done():
			return nil

		case <-retry.C:
			if w.kw != nil {
				continue
			}
			if err := w.start(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				w.backoff(retry, err)
				continue
			}
			w.retryDelay = 0
			loadTimer.Reset(s.loadTimeout)

		case st, ok := <-status:
			if !ok {
				status = nil
				continue
			}
			if st != nats.CONNECTED {
				continue
			}
			// Reconnected: the server-side consumer behind the watcher may be
			// gone (server restart, node lost). Start over from the last
			// applied revision now rather than wait for heartbeats to fail.
			s.log.Info("NATS reconnected: restarting hold watcher", "after_revision", w.last)
			w.restart(retry)

		case e, ok := <-updates:
			if !ok {
				s.log.Warn("hold watcher closed: restarting", "after_revision", w.last)
				w.kw = nil
				w.restart(retry)
				continue
			}
			if e == nil {
				loadTimer.Stop()
				w.loaded()
				continue
			}
			w.entry(e)

		case <-loadTimer.C:
			if w.loading {
				s.log.Warn("hold watcher: no end of initial values; carrying on with what arrived",
					"timeout", s.loadTimeout, "after_revision", w.last)
				w.reload = false // without the marker a reload cannot tell what vanished
				w.loaded()
			}

		case <-stallC:
			if w.stalled(ctx) {
				s.log.Warn("hold watcher behind the bucket: restarting", "after_revision", w.last)
				w.restart(retry)
			}
		}
	}
}

// start creates a watcher: resuming after the last applied revision, or
// loading the whole bucket the first time and after a long absence (the
// markers of keys that expired meanwhile may be gone).
func (w *watch) start(ctx context.Context) error {
	s := w.s
	if err := s.ready("watch", "*"); err != nil {
		return err
	}
	var opts []jetstream.WatchOpt
	w.reload = w.last == 0 || time.Since(w.contact) > s.markerTTL/2
	if !w.reload {
		opts = append(opts, jetstream.ResumeFromRevision(w.last+1))
	}
	cctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	kw, err := s.kv.WatchAll(cctx, opts...)
	if err != nil {
		return s.fail(ctx, "watch", "*", err)
	}
	w.kw = kw
	w.loading = true
	if w.reload {
		w.seen = make(map[string]bool, len(w.live))
	}
	return nil
}

// stop ends the current watcher, if any.
func (w *watch) stop() {
	if w.kw != nil {
		_ = w.kw.Stop()
		w.kw = nil
	}
}

// restart drops the current watcher and starts a new one at once.
func (w *watch) restart(retry *time.Timer) {
	if w.kw != nil && !w.loading {
		w.contact = time.Now()
	}
	w.stop()
	w.loading = false
	w.wasBehind = false
	retry.Reset(0)
}

// backoff schedules the next attempt to start a watcher.
func (w *watch) backoff(retry *time.Timer, err error) {
	switch {
	case w.retryDelay == 0:
		w.retryDelay = 50 * time.Millisecond
		w.s.log.Warn("hold watcher: cannot start; retrying", "err", err)
	case w.retryDelay < time.Second:
		w.retryDelay *= 2
	default:
		w.retryDelay = time.Second
	}
	retry.Reset(w.retryDelay)
}

// entry applies one KV entry unless its revision was applied already.
func (w *watch) entry(e jetstream.KeyValueEntry) {
	key, rev := e.Key(), e.Revision()
	if w.loading && w.reload {
		w.seen[key] = true
	}
	if rev <= w.last {
		return
	}
	w.last = rev
	w.contact = time.Now()
	ch := hold.Change{ID: key, Revision: rev, Initial: w.initial && w.loading}
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		if _, ok := w.live[key]; !ok && ch.Initial {
			return // a marker for a record this watcher never had
		}
		delete(w.live, key)
		ch.Deleted = true
	default:
		rec, err := decode(key, rev, e.Value())
		if err != nil {
			w.s.log.Error("hold watcher: skipping a record", "err", err)
			return
		}
		w.live[key] = rev
		ch.Record = rec
	}
	w.apply(ch)
}

// loaded ends the initial values of the current watcher. After a full
// reload, keys that were live but are no longer in the bucket are
// delivered as deleted.
func (w *watch) loaded() {
	if w.reload && w.seen != nil {
		for key := range w.live {
			if !w.seen[key] {
				delete(w.live, key)
				w.apply(hold.Change{ID: key, Deleted: true, Revision: w.last})
			}
		}
	}
	w.seen = nil
	w.loading = false
	w.initial = false
	w.contact = time.Now()
	w.s.syncOnce.Do(func() { close(w.s.synced) })
}

// stalled reports whether the watcher has fallen behind the bucket: the
// bucket's last revision is past what was applied, on two checks in a
// row with no progress in between. A stall is otherwise only noticed by
// the client after missed heartbeats (tens of seconds). A last revision
// that a fresh watcher does not deliver either (an expiry marker that has
// itself expired) is accounted for after one restart.
func (w *watch) stalled(ctx context.Context) bool {
	s := w.s
	if w.kw == nil || w.loading || (s.nc != nil && !s.nc.IsConnected()) {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	st, err := s.kv.Status(cctx)
	if err != nil {
		return false
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return false
	}
	lastSeq := bs.StreamInfo().State.LastSeq
	if lastSeq <= max(w.last, w.caughtUp) {
		w.wasBehind = false
		w.contact = time.Now()
		return false
	}
	if !w.wasBehind || w.behindAt != w.last {
		w.wasBehind, w.behindAt = true, w.last
		return false
	}
	if w.restartedFor == lastSeq {
		w.caughtUp, w.wasBehind = lastSeq, false
		return false
	}
	w.restartedFor = lastSeq
	return true
}
