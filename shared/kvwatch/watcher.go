package kvwatch

// The state of one Run and its loop: the select over updates,
// reconnects, leader elections, creations, stall checks and timers; how an
// entry and the end of a load are applied; shutdown.

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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

// shutdown stops everything and waits for the goroutines it started.
func (w *watcher) shutdown() {
	w.dropOld()
	w.stop()
	for w.inflight > 0 {
		w.created(<-w.results)
	}
	w.bg.Wait()
}
