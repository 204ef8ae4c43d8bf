// Package kvwatch follows a JetStream KV bucket: one watcher that every
// Switchyard bucket consumer uses (hold tables, health views, rotated
// secrets, the admin's rotation status), so that all of them get the same
// robustness against NATS restarts and the loss of cluster nodes.
//
// Run delivers the values present in the bucket (the initial load), then
// an OpLoaded event, then every change, in revision order, one at a time, on
// the caller's goroutine, until its context ends. Underneath, the KV
// watcher (an ordered consumer) is replaced whenever it may have gone
// stale, resuming after the last revision applied so that no change is
// applied twice and none is missed:
//
//   - when the connection reconnects (a restarted server has forgotten the
//     consumer; the client would notice only after missed heartbeats);
//   - when the bucket's stream elects a leader (the consumer may have lived
//     on a node that is gone, and the client, connected elsewhere, hears no
//     reconnect);
//   - when the watcher's channel closes;
//   - when a periodic check finds the bucket ahead of the last revision
//     applied and the watcher does not catch up within a short grace (a
//     stall nothing else announced).
//
// The same periodic check notices a bucket whose last revision is below
// the last one applied: revisions never go back, so the bucket was deleted
// and created again (its storage lost, a memory-stored bucket after a full
// NATS restart), and the watcher loads it whole again from revision 1,
// reporting the keys that are gone as deleted.
//
// A replaced watcher keeps delivering until its successor is running (its
// consumer may well be alive), and the revision check drops what both
// deliver. Nothing slow runs on the watch loop: creating a watcher and
// asking the bucket for its last revision run on their own goroutines,
// bounded by timeouts, and report back over channels, so updates and
// reconnects are handled while the cluster elects a leader. A creation that
// fails is retried after 50 ms, doubling up to 500 ms; one that hangs (a
// request sent in the middle of an election) gets a second attempt beside
// it after 500 ms instead of being waited out.
package kvwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Op says what an Event is.
type Op uint8

// The events.
const (
	// OpPut: Key has the value Value at Revision.
	OpPut Op = iota + 1
	// OpDelete: Key was deleted, purged or expired (Value is empty). Only
	// keys delivered before by an OpPut are reported deleted.
	OpDelete
	// OpLoaded: the initial load is complete (no key). Sent once per Run,
	// also when the end of the initial values never came (after
	// Options.LoadTimeout).
	OpLoaded
)

func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpLoaded:
		return "loaded"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Event is one thing Run delivers.
type Event struct {
	Op       Op
	Key      string
	Value    []byte // OpPut only; owned by the callee
	Revision uint64 // the bucket revision of the change
	// Initial is true for events of the initial load (before OpLoaded).
	Initial bool
}

// Defaults of Options.
const (
	// DefaultLoadTimeout bounds the wait for the end of the initial values
	// once none arrive: the end marker has been seen missing under
	// concurrent writes.
	DefaultLoadTimeout = 5 * time.Second
	// DefaultStallCheck is how often the bucket's last revision is compared
	// with the last one applied.
	DefaultStallCheck = time.Second
	// DefaultOpTimeout bounds one stall check (a stream info request).
	DefaultOpTimeout = 2 * time.Second
)

// Watcher creation and stall detection.
const (
	// retryMin and retryMax bound the pause between failed creations.
	retryMin = 50 * time.Millisecond
	retryMax = 500 * time.Millisecond
	// hedgeAfter is how long a creation may hang before another one is
	// started beside it; at most maxAttempts are in flight.
	hedgeAfter  = 500 * time.Millisecond
	maxAttempts = 3
	// createTimeout abandons one creation attempt.
	createTimeout = 5 * time.Second
	// stallGrace is how long a live watcher may take to deliver a revision
	// the bucket already has.
	stallGrace = 200 * time.Millisecond
)

// Options configure Run.
type Options struct {
	// KV is the bucket. Required.
	KV jetstream.KeyValue
	// Conn is the connection KV uses (nil: no reconnect handling and no
	// leader-election trigger; stalls are still checked).
	Conn *nats.Conn
	// Keys filters the keys watched (wildcards allowed); empty: every key.
	Keys []string
	// Log receives watcher restarts and failures; nil discards them.
	Log *slog.Logger
	// MarkerTTL is the bucket's LimitMarkerTTL, 0 for a bucket without
	// per-key TTLs. A watcher out of touch with the bucket for more than
	// half of it reloads the bucket instead of resuming (the markers of keys
	// that expired meanwhile may be gone) and reports the keys that
	// vanished as deleted.
	MarkerTTL time.Duration
	// LoadTimeout bounds the wait for the end of a full load while
	// nothing arrives (default DefaultLoadTimeout): a load that keeps
	// delivering values (a large bucket, a busy machine) is not cut short.
	LoadTimeout time.Duration
	// StallCheck is the period of the stall check (default
	// DefaultStallCheck; negative turns it off). The check compares with
	// the bucket's last revision; when Keys is set it only looks for a
	// bucket created again (a change to another key would look like a
	// stall).
	StallCheck time.Duration
	// OpTimeout bounds one stall check (default DefaultOpTimeout).
	OpTimeout time.Duration
}

// Run watches o.KV and calls apply for each event until ctx ends; it
// returns nil then, and an error only for invalid options. apply runs on
// Run's goroutine; while it runs no other event is delivered. While NATS is
// unreachable Run keeps trying; it never gives up on its own.
func Run(ctx context.Context, o Options, apply func(Event)) error {
	if o.KV == nil {
		return errors.New("kvwatch: no bucket")
	}
	if apply == nil {
		return errors.New("kvwatch: no apply function")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.LoadTimeout <= 0 {
		o.LoadTimeout = DefaultLoadTimeout
	}
	if o.StallCheck == 0 {
		o.StallCheck = DefaultStallCheck
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	w := &watcher{
		o:        o,
		apply:    apply,
		log:      o.Log.With("bucket", o.KV.Bucket()),
		live:     make(map[string]struct{}),
		attempts: make(map[uint64]context.CancelFunc),
		results:  make(chan attempt, maxAttempts),
		statusC:  make(chan status, 1),
		first:    true,
	}
	return w.run(ctx)
}

// watcher is the state of one Run; only its goroutine touches it.
type watcher struct {
	o     Options
	apply func(Event)
	log   *slog.Logger

	kw        jetstream.KeyWatcher
	cancel    context.CancelFunc // ends kw's subscription
	old       jetstream.KeyWatcher
	oldCancel context.CancelFunc // a watcher being replaced: delivers until its successor runs
	last      uint64             // highest revision applied
	live      map[string]struct{}
	first     bool            // before the first OpLoaded: events are Initial
	reload    bool            // the wanted watcher loads the whole bucket
	loading   bool            // a full load is under way (its end marker not seen)
	loadLast  time.Time       // when the load last delivered a value
	seen      map[string]bool // keys seen by a reload
	contact   time.Time       // last time the watcher was known current
	// recreated: the bucket's revisions went back (it was deleted and
	// created again): the next start loads it whole, from revision 1.
	recreated bool

	// creation
	gen       uint64 // bumped each time the wanted watcher changes
	nextID    uint64
	attempts  map[uint64]context.CancelFunc // in flight for gen
	inflight  int                           // creation goroutines not yet collected
	results   chan attempt
	delay     time.Duration // pause before the next retry after a failure
	failures  int
	next      *time.Timer // next creation attempt: retry or hedge
	loadTimer *time.Timer

	// stall check
	checking     bool
	statusC      chan status
	behindSeq    uint64 // bucket revision the watcher must reach by recheck (0: none)
	behindFrom   uint64 // the last revision applied when behindSeq was set, or at the last recheck
	caughtUp     uint64 // a bucket revision no watcher delivers, accounted as seen
	restartedFor uint64 // bucket revision of the last stall restart
	recheck      *time.Timer

	bg sync.WaitGroup // stall checks and drains of stopped watchers
}

// attempt is the outcome of one watcher creation.
type attempt struct {
	id, gen uint64
	kw      jetstream.KeyWatcher
	cancel  context.CancelFunc
	err     error
}

// status is the outcome of one stall check.
type status struct {
	gen     uint64
	lastSeq uint64
	// applied is the last revision the watcher had applied when the check
	// asked: revisions applied while the answer travelled are newer than
	// the bucket's last one then, and say nothing.
	applied uint64
	err     error
}

func (w *watcher) run(ctx context.Context) error {
	var reconnected chan nats.Status
	elected := make(chan struct{}, 1)
	if nc := w.o.Conn; nc != nil {
		reconnected = nc.StatusChanged(nats.CONNECTED)
		defer nc.RemoveStatusListener(reconnected)
		subj := "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.KV_" + w.o.KV.Bucket()
		sub, err := nc.Subscribe(subj, func(*nats.Msg) {
			select {
			case elected <- struct{}{}:
			default:
			}
		})
		if err != nil {
			w.log.Warn("kv watcher: no leader election advisories; relying on the stall check", "err", err)
		} else {
			defer func() { _ = sub.Unsubscribe() }()
		}
	}
	w.next = stoppedTimer()
	defer w.next.Stop()
	w.loadTimer = stoppedTimer()
	defer w.loadTimer.Stop()
	w.recheck = stoppedTimer()
	defer w.recheck.Stop()
	var stallC <-chan time.Time
	if w.o.StallCheck > 0 {
		t := time.NewTicker(w.o.StallCheck)
		defer t.Stop()
		stallC = t.C
	}
	defer w.shutdown()

	w.contact = time.Now()
	w.restart(ctx)
	for {
		var updates, oldUpdates <-chan jetstream.KeyValueEntry
		if w.kw != nil {
			updates = w.kw.Updates()
		}
		if w.old != nil {
			oldUpdates = w.old.Updates()
		}
		select {
		case <-ctx.Done():
			return nil

		case e, ok := <-oldUpdates:
			switch {
			case !ok:
				w.dropOld()
			case e != nil:
				w.entry(e)
			}

		case e, ok := <-updates:
			switch {
			case !ok:
				w.log.Warn("kv watcher closed: restarting", "after_revision", w.last)
				w.restart(ctx)
			case e == nil:
				if w.loading {
					w.loaded()
				}
			default:
				w.entry(e)
			}

		case r := <-w.results:
			w.created(r)

		case <-w.next.C:
			if w.kw == nil {
				w.attempt(ctx)
			}

		case _, ok := <-reconnected: // CONNECTED, the only status asked for
			if !ok {
				reconnected = nil
				continue
			}
			w.log.Info("NATS reconnected: restarting kv watcher", "after_revision", w.last)
			w.restart(ctx)

		case <-elected:
			w.log.Info("bucket elected a stream leader: restarting kv watcher", "after_revision", w.last)
			w.restart(ctx)

		case <-w.loadTimer.C:
			if w.loading && time.Since(w.loadLast) < w.o.LoadTimeout {
				w.loadTimer.Reset(w.o.LoadTimeout - time.Since(w.loadLast)) // still delivering
				continue
			}
			if w.loading {
				w.log.Warn("kv watcher: no end of initial values; carrying on with what arrived",
					"timeout", w.o.LoadTimeout, "after_revision", w.last)
				w.reload = false // without the marker a reload cannot tell what vanished
				w.loaded()
			}

		case <-stallC:
			w.checkBehind(ctx)

		case st := <-w.statusC:
			if w.checked(st) {
				w.log.Warn("kv watcher: the bucket's revisions went back (it was deleted and created again): reloading it",
					"bucket_revision", st.lastSeq, "after_revision", w.last)
				w.last, w.caughtUp, w.restartedFor = 0, 0, 0
				w.recreated = true
				w.restart(ctx)
			}

		case <-w.recheck.C:
			if w.stalled() {
				w.log.Warn("kv watcher behind the bucket: restarting", "after_revision", w.last)
				w.restart(ctx)
			}
		}
	}
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

func (w *watcher) connected() bool { return w.o.Conn == nil || w.o.Conn.IsConnected() }

// restart abandons creations in flight and starts a new watcher at once:
// resuming after the last applied revision, or loading the whole bucket
// until the first load completed and after a long absence. A resuming
// replacement leaves the current watcher delivering until it runs.
//
// contact is when the watcher was last known current (an entry, the end of
// a load, a stall check that found it level with the bucket), not when it
// is restarted: a watcher restarted on a reconnect was stuck on the dead
// connection for as long as it lasted, and markers may have expired
// meanwhile.
func (w *watcher) restart(ctx context.Context) {
	reload := w.first || w.recreated || (w.o.MarkerTTL > 0 && time.Since(w.contact) > w.o.MarkerTTL/2)
	w.recreated = false
	if reload || w.loading {
		w.dropOld()
		w.stop()
	} else {
		w.abandon()
		if w.kw != nil {
			w.dropOld()
			w.old, w.oldCancel = w.kw, w.cancel
			w.kw, w.cancel = nil, nil
		}
	}
	w.reload = reload
	w.loading = false
	w.seen = nil
	w.behindSeq = 0
	w.recheck.Stop()
	w.loadTimer.Stop()
	w.delay = 0
	w.attempt(ctx)
}

// stop ends the current watcher and abandons creations in flight.
func (w *watcher) stop() {
	if w.kw != nil {
		w.discard(w.kw, w.cancel)
		w.kw, w.cancel = nil, nil
	}
	w.abandon()
}

// abandon cancels creations in flight; their results come back as stale.
func (w *watcher) abandon() {
	for id, cancel := range w.attempts {
		cancel()
		delete(w.attempts, id)
	}
	w.next.Stop()
	w.gen++
}

// dropOld ends the watcher being replaced.
func (w *watcher) dropOld() {
	if w.old != nil {
		w.discard(w.old, w.oldCancel)
		w.old, w.oldCancel = nil, nil
	}
}

// discard ends a watcher without waiting on NATS: cancelling its context
// makes the client unsubscribe on a goroutine of its own, which then
// deletes the consumer with a request that may wait seconds for an answer
// (KeyWatcher.Stop would wait here). What the watcher still delivers is
// read until it closes: the client blocks on a full Updates channel, which
// would keep the subscription alive.
func (w *watcher) discard(kw jetstream.KeyWatcher, cancel context.CancelFunc) {
	cancel()
	w.bg.Go(func() {
		for range kw.Updates() {
		}
	})
}

// attempt starts creating a watcher in the background, unless the
// connection is down (its reconnect starts one) or maxAttempts are in
// flight. The watcher lives as long as the context it was created with, so
// each creation runs under its own cancellable context, abandoned after
// createTimeout.
func (w *watcher) attempt(ctx context.Context) {
	if !w.connected() {
		w.next.Reset(retryMax) // in case a reconnect goes unnoticed
		return
	}
	if len(w.attempts) >= maxAttempts {
		return
	}
	var opts []jetstream.WatchOpt
	if !w.reload {
		opts = append(opts, jetstream.ResumeFromRevision(w.last+1))
	}
	keys := append([]string(nil), w.o.Keys...) // WatchFiltered rewrites its slice
	w.nextID++
	id, gen := w.nextID, w.gen
	actx, cancel := context.WithCancel(ctx)
	w.attempts[id] = cancel
	w.inflight++
	kv := w.o.KV
	go func() {
		abandon := time.AfterFunc(createTimeout, cancel)
		var kw jetstream.KeyWatcher
		var err error
		if len(keys) == 0 {
			kw, err = kv.WatchAll(actx, opts...)
		} else {
			kw, err = kv.WatchFiltered(actx, keys, opts...)
		}
		if !abandon.Stop() && err == nil {
			// Abandoned just as it succeeded: its context is cancelled,
			// so the watcher is closing.
			err = fmt.Errorf("watcher creation timed out after %s", createTimeout)
		}
		w.results <- attempt{id: id, gen: gen, kw: kw, cancel: cancel, err: err}
	}()
	w.next.Reset(hedgeAfter)
}

// created takes the result of one creation attempt.
func (w *watcher) created(r attempt) {
	w.inflight--
	delete(w.attempts, r.id)
	if r.gen != w.gen || w.kw != nil || r.err != nil {
		if r.kw != nil {
			w.discard(r.kw, r.cancel)
		} else {
			r.cancel()
		}
		if r.gen == w.gen && w.kw == nil && r.err != nil {
			w.failed(r.err)
		}
		return
	}
	for id, cancel := range w.attempts { // hedges no longer needed
		cancel()
		delete(w.attempts, id)
	}
	w.dropOld()
	w.kw, w.cancel = r.kw, r.cancel
	w.next.Stop()
	if w.failures > 0 {
		w.log.Info("kv watcher started", "after_failures", w.failures, "after_revision", w.last)
	}
	w.failures, w.delay = 0, 0
	if w.reload {
		w.loading = true
		w.loadLast = time.Now()
		w.seen = make(map[string]bool, len(w.live))
		w.loadTimer.Reset(w.o.LoadTimeout)
	}
}

// failed schedules the next attempt after a failed creation.
func (w *watcher) failed(err error) {
	w.failures++
	if w.failures == 1 {
		w.log.Warn("kv watcher: cannot start; retrying", "err", err)
	} else {
		w.log.Debug("kv watcher: cannot start; retrying", "err", err, "failures", w.failures)
	}
	w.delay = min(max(2*w.delay, retryMin), retryMax)
	w.next.Reset(w.delay)
}

// entry applies one KV entry unless its revision was applied already.
// During a full load, an entry with nothing pending after it (Delta 0) is
// the end of the load, as the end marker would say.
func (w *watcher) entry(e jetstream.KeyValueEntry) {
	key, rev := e.Key(), e.Revision()
	if w.loading {
		w.loadLast = time.Now()
		if w.seen != nil {
			w.seen[key] = true
		}
		if e.Delta() == 0 {
			defer w.loaded()
		}
	}
	if rev <= w.last {
		return
	}
	w.last = rev
	w.contact = time.Now()
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		if _, ok := w.live[key]; !ok {
			return // a marker for a value this watcher never delivered
		}
		delete(w.live, key)
		w.apply(Event{Op: OpDelete, Key: key, Revision: rev, Initial: w.first})
	default:
		w.live[key] = struct{}{}
		w.apply(Event{Op: OpPut, Key: key, Value: e.Value(), Revision: rev, Initial: w.first})
	}
}

// loaded ends a full load. After a reload, keys that were live but are no
// longer in the bucket are delivered as deleted.
func (w *watcher) loaded() {
	w.loadTimer.Stop()
	if w.reload && w.seen != nil {
		for key := range w.live {
			if !w.seen[key] {
				delete(w.live, key)
				w.apply(Event{Op: OpDelete, Key: key, Revision: w.last, Initial: w.first})
			}
		}
	}
	w.seen = nil
	w.loading = false
	w.contact = time.Now()
	if w.first {
		w.first = false
		w.apply(Event{Op: OpLoaded})
	}
}

// checkBehind asks the bucket for its last revision on a goroutine of its
// own; checked takes the answer. Without this a stall is only noticed by
// the client after missed heartbeats (tens of seconds).
func (w *watcher) checkBehind(ctx context.Context) {
	if w.kw == nil || w.loading || w.checking || w.behindSeq != 0 || !w.connected() {
		return
	}
	w.checking = true
	gen, kv, timeout, applied := w.gen, w.o.KV, w.o.OpTimeout, w.last
	w.bg.Go(func() {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		st := status{gen: gen, applied: applied}
		s, err := kv.Status(cctx)
		if err == nil {
			if bs, ok := s.(*jetstream.KeyValueBucketStatus); ok {
				st.lastSeq = bs.StreamInfo().State.LastSeq
			} else {
				err = fmt.Errorf("kvwatch: unexpected bucket status %T", s)
			}
		}
		st.err = err
		w.statusC <- st // buffered: one check at a time
	})
}

// checked compares the bucket's last revision with the last one applied.
// When the watcher is behind it arms the recheck: a live watcher delivers
// within milliseconds, so one still short of that revision a moment later
// has stalled. It reports a bucket whose last revision is below the last
// one applied: revisions never go back, so the bucket was deleted and
// created again (its storage lost, a memory-stored bucket after a full
// NATS restart, an operator re-creating it), and its new revisions would
// be taken for ones already applied.
func (w *watcher) checked(st status) (recreated bool) {
	w.checking = false
	if st.err != nil || st.gen != w.gen || w.kw == nil || w.loading {
		return false
	}
	if st.lastSeq < st.applied {
		return true
	}
	if len(w.o.Keys) > 0 {
		// Filtered: the bucket's last revision may be another key's, so
		// it says nothing of this watcher's progress.
		return false
	}
	if st.lastSeq <= max(w.last, w.caughtUp) {
		w.contact = time.Now()
		return false
	}
	w.behindSeq, w.behindFrom = st.lastSeq, w.last
	w.recheck.Reset(stallGrace)
	return false
}

// stalled reports whether the watcher is still short of the revision the
// check saw and delivered nothing since the check (or the last recheck):
// one that is delivering is only slower than the bucket grew (a burst of
// writes, a busy machine) and is rechecked after another grace, as a
// second watcher beside it would deliver the same revisions again. A
// revision that a fresh watcher does not deliver either (an expiry marker
// that has itself expired, a change to a key outside the filter) is
// accounted for after one restart.
func (w *watcher) stalled() bool {
	seq := w.behindSeq
	w.behindSeq = 0
	if seq == 0 || w.kw == nil || w.loading || w.last >= seq {
		return false
	}
	if w.last > w.behindFrom {
		w.behindSeq, w.behindFrom = seq, w.last
		w.recheck.Reset(stallGrace)
		return false
	}
	if w.restartedFor == seq {
		w.caughtUp = seq
		return false
	}
	w.restartedFor = seq
	return true
}

// shutdown stops everything and waits for the goroutines it started.
func (w *watcher) shutdown() {
	w.dropOld()
	w.stop()
	for w.inflight > 0 {
		w.created(<-w.results)
	}
	w.bg.Wait()
}
