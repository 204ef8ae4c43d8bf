package hold

// Probing a hold: when a record may be leased (due, or early for a soft
// class), TryProbe's compare-and-set of the lease, and ProbeResult.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// probeable reports whether a record may be leased now: it is due (held
// past its until, or probing with a lapsed lease), or early is asked and
// it may be probed early (earlyProbeable).
func probeable(rec Record, now time.Time, early bool) bool {
	due := !now.Before(rec.Until) || early && earlyProbeable(rec, now)
	switch rec.State {
	case StateHeld:
		return due
	case StateProbing:
		return due && (rec.Probe == nil || !now.Before(rec.Probe.LeaseUntil))
	}
	return false
}

// earlyProbeable reports whether a hold not yet due may take an early
// probe (AdmitSoft: every target of a request is held): a soft class, not
// an operator's pin, not a stated wait, and its early-probe interval over.
func earlyProbeable(rec Record, now time.Time) bool {
	return rec.Class.Meaning().Soft && !rec.Pinned && !rec.WaitStated && !now.Before(rec.EarlyProbeAfter)
}

// TryProbe takes the fleet-wide right to probe the due hold id, by
// compare-and-set on its record. ok is false when the hold is not due,
// another instance holds an unexpired lease, or another instance won the
// race (err nil in these cases). The prober uses it to settle due holds
// with a cheap check, then calls ProbeResult; the engine uses it for the
// caller requests Admit turns into probes.
func (e *Engine) TryProbe(ctx context.Context, id string) (Probe, bool, error) {
	return e.tryProbe(ctx, id, false)
}

// tryProbe is TryProbe; early also leases a soft hold before it is due.
func (e *Engine) tryProbe(ctx context.Context, id string, early bool) (Probe, bool, error) {
	now := e.clock.Now()
	e.mu.Lock()
	en := e.entries[id]
	e.mu.Unlock()
	var rec Record
	switch {
	case en != nil && en.pending:
		return Probe{}, false, errPending
	case en != nil:
		rec = en.rec
	default:
		r, err := e.store.Get(ctx, id)
		if err != nil {
			return Probe{}, false, fmt.Errorf("probe %s: %w", id, err)
		}
		rec = r
	}
	if !probeable(rec, now, early) {
		return Probe{}, false, nil
	}
	set := e.Policy().For(rec.Scope.Provider)
	lease := Probe{Owner: e.inst, Started: now, LeaseUntil: now.Add(set.ProbeLease)}
	next := rec
	next.State = StateProbing
	next.Probe = &lease
	// after any probe, due or early, the fleet's next early probe waits
	// the interval
	next.EarlyProbeAfter = now.Add(set.EarlyProbeInterval(rec.Class, rec.Rung))
	rev, err := e.store.Update(ctx, next, rec.Revision, 0)
	switch {
	case errors.Is(err, ErrConflict):
		cur, gerr := e.store.Get(ctx, id)
		if gerr == nil {
			e.applyChange(Change{ID: id, Record: cur, Revision: cur.Revision})
		}
		return Probe{}, false, nil
	case err != nil:
		return Probe{}, false, fmt.Errorf("probe %s: %w", id, err)
	}
	e.storeDown.Store(false)
	next.Revision = rev
	e.applyChange(Change{ID: id, Record: next, Revision: rev})
	return lease, true, nil
}

// ProbeResult reports the outcome of the probe this instance took with
// TryProbe (or of a caller request Admit turned into a probe) and writes
// the hold's next state. It waits for the first write attempt: an
// ErrUnavailable error means the transition is applied locally and will be
// written when the store answers again.
func (e *Engine) ProbeResult(ctx context.Context, id string, out Outcome) error {
	e.mu.Lock()
	en := e.entries[id]
	e.mu.Unlock()
	if en == nil {
		return ErrNotFound
	}
	if !en.mine || en.rec.State != StateProbing {
		return ErrNotOwner
	}
	done := make(chan error, 1)
	e.settle(en, out, done)
	return wait(ctx, done)
}
