package hold

// Releasing and pinning holds outside a probe: an operator's Release, the
// prober's ReleaseAt after a passing check, every hold of a key
// (ReleaseKey, CredentialChanged), a pin's end (endPin), and Pin itself.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"switchyard.dev/shared/failure"
)

// Release releases the hold id (an operator's release, source "admin", or
// a credential change, "credential"): the target returns through a fresh
// ramp. ErrNotFound when there is no such hold. It waits for the first
// write attempt (see ProbeResult for ErrUnavailable).
func (e *Engine) Release(ctx context.Context, id string, source string) error {
	e.mu.Lock()
	en := e.entries[id]
	e.mu.Unlock()
	if en == nil {
		rec, err := e.store.Get(ctx, id)
		if err != nil {
			return fmt.Errorf("release %s: %w", id, err)
		}
		e.applyChange(Change{ID: id, Record: rec, Revision: rec.Revision})
		e.mu.Lock()
		en = e.entries[id]
		e.mu.Unlock()
		if en == nil {
			return fmt.Errorf("release %s: %w", id, ErrNotFound)
		}
	}
	return wait(ctx, e.releaseEntry(en, source, 0, false))
}

// ReleaseAt releases the hold id as Release does, but only as this
// instance last saw it, at revision rev: a hold that has changed since
// (an operator's pin, another instance's write) keeps the change. It is
// ErrConflict when the change is already in this instance's table; when
// it is only in the store, the compare-and-set loses and the stored
// record is adopted (nil: nothing was released). An automatic release
// (the prober's, after a passing check) uses it; an operator's Release
// overwrites whatever is there.
func (e *Engine) ReleaseAt(ctx context.Context, id, source string, rev uint64) error {
	e.mu.Lock()
	en := e.entries[id]
	e.mu.Unlock()
	if en == nil {
		return fmt.Errorf("release %s: %w", id, ErrNotFound)
	}
	return wait(ctx, e.releaseEntry(en, source, rev, true))
}

// releaseEntry releases en (the current entry of its id): whatever the
// store holds, or with cas only as written at revision rev (ReleaseAt; a
// record not written yet, or with a write of this instance pending, is a
// conflict).
func (e *Engine) releaseEntry(en *entry, source string, rev uint64, cas bool) chan error {
	now := e.clock.Now()
	set := e.Policy().For(en.rec.Scope.Provider)
	done := make(chan error, 1)
	e.mu.Lock()
	if cur := e.entries[en.rec.ID]; cur != nil {
		en = cur
	}
	if cas && (en.pending || en.rec.Revision == 0 || en.rec.Revision != rev) {
		e.mu.Unlock()
		done <- fmt.Errorf("release %s at revision %d: %w", en.rec.ID, rev, ErrConflict)
		return done
	}
	rec := en.rec
	rec.RecordedBy = e.inst
	e.release(&rec, now, set, source)
	n := e.newEntry(rec)
	n.pending = true
	e.installLocked(n)
	e.mu.Unlock()
	e.enqueue(&intent{rec: rec, base: rec.Revision, ttl: set.RampDuration, force: !cas,
		ev: []Event{e.event(EventRelease, rec, source)}, done: []chan error{done}, entry: n})
	return done
}

// endPin releases a pin whose time is over: an operator drain ends at
// its until, without a probe. The write is a compare-and-set on the pin's
// revision, so when several instances see it end, one wins and emits the
// release (outcome "expired"); the others adopt the stored record.
func (e *Engine) endPin(en *entry) {
	now := e.clock.Now()
	set := e.Policy().For(en.rec.Scope.Provider)
	e.mu.Lock()
	if e.entries[en.rec.ID] != en || en.pending || !en.rec.Pinned || en.rec.State != StateHeld {
		e.mu.Unlock()
		return
	}
	rec := en.rec
	rec.RecordedBy = e.inst
	e.release(&rec, now, set, SourceExpired)
	n := e.newEntry(rec)
	n.pending = true
	e.installLocked(n)
	e.mu.Unlock()
	e.enqueue(&intent{rec: rec, base: rec.Revision, ttl: set.RampDuration,
		ev: []Event{e.event(EventRelease, rec, SourceExpired)}, entry: n})
}

// ReleaseKey releases every live hold of a key (all its models) and
// returns how many it released.
func (e *Engine) ReleaseKey(ctx context.Context, provider, keyID, source string) (int, error) {
	e.mu.Lock()
	var ens []*entry
	for _, en := range e.entries {
		if en.rec.Scope.Provider == provider && en.rec.Scope.Key == keyID && live(en.rec) {
			ens = append(ens, en)
		}
	}
	e.mu.Unlock()
	dones := make([]chan error, len(ens))
	for i, en := range ens {
		dones[i] = e.releaseEntry(en, source, 0, false)
	}
	var errs []error
	for _, d := range dones {
		if err := wait(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	return len(ens), errors.Join(errs...)
}

// CredentialChanged releases every hold of a key whose secret changed
// (config reload): ReleaseKey with source "credential".
func (e *Engine) CredentialChanged(ctx context.Context, provider, keyID string) (int, error) {
	return e.ReleaseKey(ctx, provider, keyID, SourceCredential)
}

// Pin holds scope until an operator-chosen time (a drain): a record with
// Pinned set and Source "admin", replacing whatever the scope had. It is
// not probed before until; then it is due like any hold.
func (e *Engine) Pin(ctx context.Context, scope Scope, until time.Time, reason string) error {
	now := e.clock.Now()
	rec := Record{
		Version: SchemaVersion, ID: scope.ID(), Scope: scope, State: StateHeld,
		Class: failure.Unrecognised, Since: now, Until: until, Reason: reason, Code: "pinned",
		Source: SourceAdmin, RecordedBy: e.inst, RecordedAt: now, Pinned: true,
	}
	if e.fp != nil && scope.Key != "" {
		rec.Fingerprint = e.fp(scope.Provider, scope.Key) // the secret the pin was made against
	}
	if err := CheckID(rec.ID); err != nil {
		return err // refused before it is applied anywhere, as a hold of such an id
	}
	e.mu.Lock()
	if cur := e.entries[rec.ID]; cur != nil {
		rec.Revision = cur.rec.Revision
	}
	n := e.newEntry(rec)
	n.pending = true
	e.installLocked(n)
	e.mu.Unlock()
	done := make(chan error, 1)
	e.enqueue(&intent{rec: rec, base: rec.Revision, force: true,
		ev: []Event{e.event(EventHold, rec, "")}, done: []chan error{done}, entry: n})
	return wait(ctx, done)
}
