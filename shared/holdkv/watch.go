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
	cancel  context.CancelFunc // ends kw's subscription
	last    uint64             // highest revision applied
	live    map[string]uint64  // keys with a live record -> revision
	loading bool               // before the current watcher's end-of-initial-values marker
	initial bool               // the very first load: changes are Initial
	reload  bool               // the current watcher reloads everything (no resume)
	seen    map[string]bool    // keys seen during a reload
	contact time.Time          // last time the watcher was known to be current

	// stall detection
	caughtUp     uint64 // a bucket revision no watcher delivers, accounted as seen
	behindSeq    uint64 // bucket revision the watcher must reach by recheck (0: none)
	restartedFor uint64 // bucket revision of the last stall restart
	recheck      *time.Timer

	// watcher creation
	gen         int                // generation of the wanted watcher
	pending     context.CancelFunc // creation in flight for gen
	inflight    int                // creation goroutines not yet collected
	results     chan started
	retry       *time.Timer
	retryDelay  time.Duration
	createTimer *time.Timer
	loadTimer   *time.Timer
}

// started is the outcome of one watcher creation.
type started struct {
	gen    int
	kw     jetstream.KeyWatcher
	cancel context.CancelFunc
	err    error
}

func (w *watch) run(ctx context.Context) error {
	s := w.s
	var status chan nats.Status
	if s.nc != nil {
		status = s.nc.StatusChanged(nats.CONNECTED)
		defer s.nc.RemoveStatusListener(status)
	}
	w.results = make(chan started, 4)
	defer w.shutdown()

	var stallC <-chan time.Time
	if s.stallCheck > 0 {
		t := time.NewTicker(s.stallCheck)
		defer t.Stop()
		stallC = t.C
	}
	w.loadTimer = time.NewTimer(time.Hour)
	w.loadTimer.Stop()
	defer w.loadTimer.Stop()
	w.createTimer = time.NewTimer(time.Hour)
	w.createTimer.Stop()
	defer w.createTimer.Stop()
	w.retry = time.NewTimer(0) // fires at once: start the first watcher
	defer w.retry.Stop()
	w.recheck = time.NewTimer(time.Hour)
	w.recheck.Stop()
	defer w.recheck.Stop()

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

		case <-w.retry.C:
			if w.kw == nil && w.pending == nil {
				w.start(ctx)
			}

		case r := <-w.results:
			w.inflight--
			w.created(r)

		case <-w.createTimer.C:
			if w.pending != nil {
				// Creation did not answer in time: give up on it (its result
				// comes back as an error) and try again.
				w.pending()
			}

		case _, ok := <-status: // CONNECTED, the only status asked for
			if !ok {
				status = nil
				continue
			}
			// Reconnected: the server-side consumer behind the watcher may be
			// gone (server restart, node lost). Start over from the last
			// applied revision now rather than wait for heartbeats to fail.
			s.log.Info("NATS reconnected: restarting hold watcher", "after_revision", w.last)
			w.restart(ctx)

		case e, ok := <-updates:
			if !ok {
				s.log.Warn("hold watcher closed: restarting", "after_revision", w.last)
				w.restart(ctx)
				continue
			}
			if e == nil {
				w.loadTimer.Stop()
				w.loaded()
				continue
			}
			w.entry(e)

		case <-w.loadTimer.C:
			if w.loading {
				s.log.Warn("hold watcher: no end of initial values; carrying on with what arrived",
					"timeout", s.loadTimeout, "after_revision", w.last)
				w.reload = false // without the marker a reload cannot tell what vanished
				w.loaded()
			}

		case <-stallC:
			w.checkBehind(ctx)

		case <-w.recheck.C:
			if w.stalled() {
				s.log.Warn("hold watcher behind the bucket: restarting", "after_revision", w.last)
				w.restart(ctx)
			}
		}
	}
}

// start begins creating a watcher in the background: resuming after the
// last applied revision, or loading the whole bucket the first time and
// after a long absence (the markers of keys that expired meanwhile may be
// gone). The watcher lives as long as the context it was created with, so
// creation runs under its own cancellable context, bounded by createTimer.
func (w *watch) start(ctx context.Context) {
	s := w.s
	if err := s.ready("watch", "*"); err != nil {
		w.backoff(err) // a reconnect starts one at once anyway
		return
	}
	var opts []jetstream.WatchOpt
	reload := w.last == 0 || time.Since(w.contact) > s.markerTTL/2
	if !reload {
		opts = append(opts, jetstream.ResumeFromRevision(w.last+1))
	}
	w.gen++
	w.reload = reload
	gen := w.gen
	wctx, cancel := context.WithCancel(ctx)
	w.pending = cancel
	w.inflight++
	w.createTimer.Reset(s.opTimeout)
	go func() {
		kw, err := s.kv.WatchAll(wctx, opts...)
		w.results <- started{gen: gen, kw: kw, cancel: cancel, err: err}
	}()
}

// created takes the result of a watcher creation.
func (w *watch) created(r started) {
	if r.gen != w.gen || r.err != nil {
		r.cancel()
		if r.kw != nil {
			_ = r.kw.Stop()
		}
		if r.gen == w.gen {
			w.pending = nil
			w.createTimer.Stop()
			w.backoff(w.s.fail(context.Background(), "watch", "*", r.err))
		}
		return
	}
	w.pending = nil
	w.createTimer.Stop()
	w.kw, w.cancel = r.kw, r.cancel
	w.retryDelay = 0
	w.loading = true
	if w.reload {
		w.seen = make(map[string]bool, len(w.live))
	}
	w.loadTimer.Reset(w.s.loadTimeout)
}

// stop ends the current watcher and any creation in flight.
func (w *watch) stop() {
	if w.kw != nil {
		_ = w.kw.Stop()
		w.cancel()
		w.kw, w.cancel = nil, nil
	}
	if w.pending != nil {
		w.pending()
		w.pending = nil
	}
	w.gen++ // results still in flight are stale
}

// shutdown stops everything and waits for creations in flight.
func (w *watch) shutdown() {
	w.stop()
	for ; w.inflight > 0; w.inflight-- {
		w.created(<-w.results)
	}
}

// restart drops the current watcher and starts a new one at once.
func (w *watch) restart(ctx context.Context) {
	if w.kw != nil && !w.loading {
		w.contact = time.Now()
	}
	w.stop()
	w.loading = false
	w.behindSeq = 0
	w.recheck.Stop()
	w.loadTimer.Stop()
	w.start(ctx)
}

// backoff schedules the next attempt to start a watcher.
func (w *watch) backoff(err error) {
	switch {
	case w.retryDelay == 0:
		w.retryDelay = 50 * time.Millisecond
		w.s.log.Warn("hold watcher: cannot start; retrying", "err", err)
	case w.retryDelay < time.Second:
		w.retryDelay *= 2
	default:
		w.retryDelay = time.Second
	}
	w.retry.Reset(w.retryDelay)
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

// checkBehind asks the bucket for its last revision. When the watcher
// has not applied it yet, it arms the recheck timer: a live watcher
// delivers within milliseconds, so one that is still short of that
// revision a moment later has stalled. Without this a stall is only
// noticed by the client after missed heartbeats (tens of seconds).
func (w *watch) checkBehind(ctx context.Context) {
	s := w.s
	if w.kw == nil || w.loading || w.behindSeq != 0 || (s.nc != nil && !s.nc.IsConnected()) {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	st, err := s.kv.Status(cctx)
	if err != nil {
		return
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return
	}
	lastSeq := bs.StreamInfo().State.LastSeq
	if lastSeq <= max(w.last, w.caughtUp) {
		w.contact = time.Now()
		return
	}
	w.behindSeq = lastSeq
	w.recheck.Reset(stallGrace)
}

// stallGrace is how long a watcher may take to deliver a revision the
// bucket already has.
const stallGrace = 200 * time.Millisecond

// stalled reports whether the watcher is still short of the revision
// checkBehind saw. A revision that a fresh watcher does not deliver either
// (an expiry marker that has itself expired) is accounted for after one
// restart.
func (w *watch) stalled() bool {
	seq := w.behindSeq
	w.behindSeq = 0
	if seq == 0 || w.kw == nil || w.loading || w.last >= seq {
		return false
	}
	if w.restartedFor == seq {
		w.caughtUp = seq
		return false
	}
	w.restartedFor = seq
	return true
}
