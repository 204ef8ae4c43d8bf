package hold

// The engine's writes to the store: the queue of intents (one per hold id,
// merged), the writer loop with its backoff and drain, the compare-and-set
// of one write, and what the engine installs or adopts once a write has
// won or lost.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"switchyard.dev/shared/failure"
)

// intent is a write this process wants in the store. Intents for one id
// merge (the latest record wins, events add up).
type intent struct {
	rec   Record // rec.Revision is ignored; base is the expected revision
	base  uint64 // 0: create
	ttl   time.Duration
	hold  *holdReq // a new hold: on ErrExists adopt a live record, escalate a released one
	force bool     // overwrite whatever is there (operator pin)
	ev    []Event
	done  []chan error
	entry *entry // the local entry this write makes durable
}

type holdReq struct {
	scope   Scope
	res     failure.Result
	source  string
	tripped *Tripped // a breaker's trip: what it was tripped by
}

func (e *Engine) enqueue(in *intent) {
	e.wmu.Lock()
	if e.stopped != nil {
		err := e.stopped
		e.wmu.Unlock()
		e.notify(in, err)
		return
	}
	if old := e.pending[in.rec.ID]; old != nil {
		in.ev = append(old.ev, in.ev...)
		in.done = append(old.done, in.done...)
		if in.hold == nil && in.base == 0 {
			in.hold = old.hold
		}
		in.force = in.force || old.force
	} else {
		e.order = append(e.order, in.rec.ID)
	}
	e.pending[in.rec.ID] = in
	e.wmu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

func (e *Engine) next() *intent {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	for len(e.order) > 0 {
		id := e.order[0]
		e.order = e.order[1:]
		if in := e.pending[id]; in != nil {
			delete(e.pending, id)
			return in
		}
	}
	return nil
}

// requeue puts back an intent that could not be written, unless a newer
// one for the same id arrived meanwhile (which then carries its events).
func (e *Engine) requeue(in *intent) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if newer := e.pending[in.rec.ID]; newer != nil {
		newer.ev = append(in.ev, newer.ev...)
		if newer.hold == nil && newer.base == 0 {
			newer.hold = in.hold
		}
		return
	}
	e.pending[in.rec.ID] = in
	e.order = append(e.order, in.rec.ID)
}

// rebase moves a queued intent for id onto the revision just written.
func (e *Engine) rebase(id string, from, to uint64) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if in := e.pending[id]; in != nil && in.base == from {
		in.base = to
	}
}

func (e *Engine) writeLoop(ctx context.Context) {
	const first, most = 100 * time.Millisecond, 5 * time.Second
	backoff := first
	retry := make(chan struct{}, 1)
	sweep := make(chan struct{}, 1)
	tick := func(ch chan struct{}) func() {
		return func() {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	sweepT := e.clock.AfterFunc(time.Second, tick(sweep))
	var retryT Timer
	defer func() {
		sweepT.Stop()
		if retryT != nil {
			retryT.Stop()
		}
		e.failWaiters(context.Cause(ctx))
	}()
	for {
		select {
		case <-ctx.Done():
			e.drain(ctx)
			return
		case <-sweep:
			e.sweep(e.clock.Now())
			sweepT = e.clock.AfterFunc(time.Second, tick(sweep))
			continue
		case <-e.kick:
		case <-retry:
		}
		for {
			in := e.next()
			if in == nil {
				backoff = first
				break
			}
			err := e.write(ctx, in)
			if err != nil && ctx.Err() != nil {
				e.requeue(in) // shutting down: drained with a fresh deadline
				break
			}
			if errors.Is(err, ErrInvalidID) {
				// The store will never take it: dropped, locally too,
				// rather than retried for ever.
				e.notify(in, fmt.Errorf("write hold: %w", err))
				e.adoptGone(in)
				e.log.Error("hold store refused a hold id; dropping the hold", "err", err)
				continue
			}
			if err != nil {
				e.storeDown.Store(true)
				e.notify(in, fmt.Errorf("write hold %s: %w (kept locally, retrying)", in.rec.ID, err))
				in.done = nil
				e.requeue(in)
				e.log.Warn("hold store write failed; keeping the hold locally and retrying", "hold", in.rec.ID, "err", err, "in", backoff)
				retryT = e.clock.AfterFunc(backoff, tick(retry))
				backoff = min(backoff*2, most)
				break
			}
			e.storeDown.Store(false)
			e.notify(in, err)
		}
	}
}

// drain writes the queued transitions after Run's context ended, within
// DrainTimeout; what is left is logged (the local table dies with the
// process).
func (e *Engine) drain(parent context.Context) {
	if e.drainFor < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), e.drainFor)
	defer cancel()
	for {
		in := e.next()
		if in == nil {
			return
		}
		err := e.write(ctx, in)
		if errors.Is(err, ErrInvalidID) {
			e.notify(in, fmt.Errorf("write hold: %w", err)) // never storable: not left for the drain
			continue
		}
		if err != nil {
			e.requeue(in)
			e.wmu.Lock()
			left := len(e.pending)
			e.wmu.Unlock()
			e.log.Warn("hold writes not drained before shutdown", "left", left, "err", err)
			return
		}
		e.notify(in, nil)
	}
}

func (e *Engine) notify(in *intent, err error) {
	for _, d := range in.done {
		d <- err
	}
}

func (e *Engine) failWaiters(err error) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	e.stopped = fmt.Errorf("hold: engine stopped: %w", err)
	for _, in := range e.pending {
		for _, d := range in.done {
			d <- e.stopped
		}
		in.done = nil
	}
}

// write performs one intent. It returns nil when the intent is settled
// (written, or superseded by what the store holds, which is adopted) and
// an error when the store could not be reached (the intent is retried).
func (e *Engine) write(ctx context.Context, in *intent) error {
	for range 8 {
		var rev uint64
		var err error
		if in.base == 0 {
			rev, err = e.store.Create(ctx, in.rec, in.ttl)
		} else {
			rev, err = e.store.Update(ctx, in.rec, in.base, in.ttl)
		}
		switch {
		case err == nil:
			e.written(in, rev)
			return nil
		case errors.Is(err, ErrExists) || errors.Is(err, ErrConflict):
			cur, gerr := e.store.Get(ctx, in.rec.ID)
			switch {
			case errors.Is(gerr, ErrNotFound):
				if in.hold == nil && !in.force && in.rec.State == StateReleased {
					e.adoptGone(in)
					return nil
				}
				in.base = 0
				continue
			case gerr != nil:
				return gerr
			}
			switch {
			case in.force:
				in.base = cur.Revision
			case in.hold != nil && !live(cur):
				// a released (ramping) record failed again: escalate by CAS
				in.rec = e.newHold(*in.hold, e.clock.Now(), &cur)
				in.base = cur.Revision
			default:
				e.adopt(in, cur)
				return nil
			}
		default:
			return err
		}
	}
	return fmt.Errorf("hold %s: too many conflicting writes", in.rec.ID)
}

// written installs what this process wrote and publishes its events: the
// winner of each transition is the only one that emits it.
func (e *Engine) written(in *intent, rev uint64) {
	rec := in.rec
	rec.Revision = rev
	e.mu.Lock()
	cur := e.entries[rec.ID]
	switch {
	case cur != in.entry && e.underLeaseLocked(cur, rec):
	case cur == nil || cur == in.entry || (!cur.pending && cur.rec.Revision < rev):
		e.installLocked(e.newEntry(rec))
	case cur.pending && cur.rec.Revision == in.base:
		cur.rec.Revision = rev // a newer local change waits in the queue; it was rebased
	}
	e.mu.Unlock()
	e.rebase(rec.ID, in.base, rev)
	for _, ev := range in.ev {
		if e.emit != nil {
			e.emit.Emit(ev)
		}
	}
}

// adopt replaces the local entry of a lost write by the stored record.
func (e *Engine) adopt(in *intent, cur Record) {
	e.mu.Lock()
	if en := e.entries[cur.ID]; en == nil || en == in.entry || en.rec.Revision < cur.Revision {
		e.installLocked(e.newEntry(cur))
	}
	e.mu.Unlock()
}

// adoptGone drops the local entry of a write whose record the store no
// longer has (a release that found the record expired).
func (e *Engine) adoptGone(in *intent) {
	e.mu.Lock()
	if en := e.entries[in.rec.ID]; en == in.entry {
		e.removeLocked(in.rec.ID)
	}
	e.mu.Unlock()
}

// wait blocks until the intent's first write attempt answered, or ctx.
func wait(ctx context.Context, done chan error) error {
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
