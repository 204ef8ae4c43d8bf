package hold

// The probe lease: taking the fleet-wide right to probe a due hold (by
// compare-and-set on its record), and the local lease this instance takes
// for itself while the store is unavailable.

import (
	"context"
	"errors"
)

func (e *Engine) leaseLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case en := <-e.leaseReq:
			e.takeLease(ctx, en)
			e.endRound()
		}
	}
}

// takeLease tries to take the probe lease of a due hold the local traffic
// wants; while the store is unavailable it takes a local lease (this
// instance probes for itself; the outcome is written when the store is
// back).
func (e *Engine) takeLease(ctx context.Context, en *entry) {
	e.mu.Lock()
	cur := e.entries[en.rec.ID]
	e.mu.Unlock()
	if cur != en {
		return
	}
	early := en.early.Swap(false)
	if en.over != nil {
		// A local lease lapsed: the record it stood over decides again
		// (leased in the store if it is back, else locally once more).
		if en = e.endLocalLease(en); en == nil {
			return
		}
	}
	if en.rec.Pinned && en.rec.State == StateHeld {
		e.endPin(en)
		en.wanted.Store(false)
		return
	}
	_, ok, err := e.tryProbe(ctx, en.rec.ID, early)
	switch {
	case ok:
	case errors.Is(err, ErrUnavailable) || (errors.Is(err, errPending) && e.storeDown.Load()):
		e.localLease(en)
	default:
		if err != nil && !errors.Is(err, errPending) {
			e.log.Warn("take probe lease", "hold", en.rec.ID, "err", err)
		}
		en.wanted.Store(false)
	}
}

// localLease puts a lease of this instance's own over en: nothing is
// queued to write it (the store was unavailable). It is not pending, so a
// record the store brings replaces it, and when it lapses takeLease puts
// en back (endLocalLease).
func (e *Engine) localLease(en *entry) {
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.entries[en.rec.ID] != en {
		return
	}
	rec := en.rec
	set := e.Policy().For(rec.Scope.Provider)
	rec.State = StateProbing
	rec.Probe = &Probe{Owner: e.inst, Started: now, LeaseUntil: now.Add(set.ProbeLease)}
	rec.EarlyProbeAfter = now.Add(set.EarlyProbeInterval(rec.Class, rec.Rung)) // as tryProbe writes it
	n := e.newEntry(rec)
	n.over = en
	e.installLocked(n)
}

// underLeaseLocked keeps a local lease whose probe is out (its one
// AdmitProbe handed out, its lease not lapsed) in place of a held record
// the store or this instance's writer brings for the same hold (the
// hold's own write landing once the store is back): the record becomes
// what the lease stands over, put back when the lease lapses, and the
// lease takes its revision so that the probe's outcome is written over
// it. Replacing the lease would let this instance hand out a second probe
// while the first runs, and the first's outcome would settle the second's
// lease. Only this instance's own write of the hold is taken under the
// lease: an operator's pin or another instance's change replaces it (the
// probe's outcome then finds no lease and settles nothing, so the change
// stands). It reports whether it kept the lease. e.mu is held.
func (e *Engine) underLeaseLocked(cur *entry, rec Record) bool {
	if cur == nil || cur.over == nil || !cur.token.Load() || rec.State != StateHeld ||
		rec.Pinned || rec.RecordedBy != e.inst || e.clock.Now().UnixNano() >= cur.leaseUntil {
		return false
	}
	// A new entry: a published one never changes (readers hold it
	// without e.mu).
	n := e.newEntry(cur.rec)
	n.rec.Revision = rec.Revision
	n.over = e.newEntry(rec)
	n.token.Store(true)
	e.installLocked(n)
	return true
}

// endLocalLease puts back the entry a lapsed local lease stood over and
// returns it (nil when the lease is no longer the current entry). The
// entry is the same one (a write queued for it still finds it); its lease
// request is this one, being served.
func (e *Engine) endLocalLease(en *entry) *entry {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.entries[en.rec.ID] != en {
		return nil
	}
	b := en.over
	b.wanted.Store(true)
	e.installLocked(b)
	return b
}
