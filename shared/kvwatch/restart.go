package kvwatch

// Replacing the KV watcher: restart (resume or reload), creation attempts
// in the background with retry and hedge, and ending a watcher without
// waiting on NATS.

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// attempt is the outcome of one watcher creation.
type attempt struct {
	id, gen uint64
	kw      jetstream.KeyWatcher
	cancel  context.CancelFunc
	err     error
}

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
//
// A connection closed for good delivers nothing more, and the client may
// never close Updates then (a subscription between an ordered consumer's
// reset and its new one is not among the connection's when it closes): the
// drain stops when the connection is closed, or Run's shutdown, which
// waits for it, would wait forever.
func (w *watcher) discard(kw jetstream.KeyWatcher, cancel context.CancelFunc) {
	cancel()
	w.bg.Go(func() {
		var tick *time.Ticker
		var closed <-chan time.Time
		if w.o.Conn != nil {
			tick = time.NewTicker(drainCheck)
			defer tick.Stop()
			closed = tick.C
		}
		for {
			select {
			case _, ok := <-kw.Updates():
				if !ok {
					return
				}
			case <-closed:
				if w.o.Conn.IsClosed() {
					return
				}
			}
		}
	})
}

// drainCheck is how often a drain of a discarded watcher looks whether its
// connection closed for good.
const drainCheck = 100 * time.Millisecond

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
