package hold

import (
	"context"
	"errors"
	"fmt"
	"time"

	"switchyard.dev/shared/failure"
)

// Sources of a record or a release.
const (
	SourceProxy      = "proxy"
	SourceProber     = "prober"
	SourceBreaker    = "breaker"
	SourceAdmin      = "admin"
	SourceRule       = "rule"
	SourceCredential = "credential"
	// SourceExpired: an operator pin reached its end.
	SourceExpired = "expired"
)

// Probe outcomes (Event.Outcome of a probe event).
const (
	ProbeReleased  = "released"
	ProbeEscalated = "escalated"
	ProbeSameRung  = "same_rung"
	ProbeSettled   = "settled"
	// ProbeCounted: a successful probe of a trip hold that needs more of
	// them (breaker.success_threshold): the hold stays, due again at once.
	ProbeCounted = "counted"
)

// errPending: the hold is not in the store yet, so it cannot be leased.
var errPending = errors.New("hold: record not yet written")

// Report records what an attempt on a target came to. It never blocks on
// the store: a new hold is applied to the local table at once and written
// in the background. probe is true for the attempt Admit answered with
// AdmitProbe. A cancelled attempt counts for nothing, but a cancelled
// probe gives its lease back (the hold is due again at once) rather than
// keeping the hold from every instance until the lease lapses.
func (e *Engine) Report(provider, keyID, model string, probe bool, out Outcome) {
	if probe && e.reportProbe(provider, keyID, model, out) {
		return
	}
	if out.Cancelled {
		return
	}
	set := e.Policy().For(provider)
	e.breakerReport(set, provider, model, out)
	if out.OK || !out.Result.Class.Meaning().Holds {
		return
	}
	e.hold(holdReq{ScopeFor(out.Result, provider, keyID, model), out.Result, e.sourceOf(out.Result), nil}, out.RequestID, out.Sent)
}

// releasedSince reports whether rec was released by an operator (or by a
// credential rotation) after sent (zero: unknown): an attempt sent before
// that answers for the target as it was, and holding it again (one rung
// up) would undo the release.
func releasedSince(rec Record, sent time.Time) bool {
	return !sent.IsZero() && operatorReleased(rec) && sent.Before(rec.RecordedAt)
}

// operatorReleased reports whether rec was released by an operator (or by
// a credential rotation) rather than by a passing probe or check: such a
// release starts the target's ladder over.
func operatorReleased(rec Record) bool {
	return rec.State == StateReleased &&
		(rec.ReleaseSource == SourceAdmin || rec.ReleaseSource == SourceCredential)
}

// sourceOf is who a hold from a reported failure is recorded as: the
// operator rule that matched, else this engine's source (proxy, prober).
func (e *Engine) sourceOf(res failure.Result) string {
	if res.Rule != "" {
		return SourceRule
	}
	return e.source
}

// ScopeFor is the hold scope of a failure on the target (provider, keyID,
// model): the classification's scope, else its class's default. A keyless
// provider (vLLM, Ollama: keyID "") holds provider scopes instead of key
// scopes, so the proxy and the prober, which both report keyless targets
// with keyID "", name one hold with one id.
func ScopeFor(res failure.Result, provider, keyID, model string) Scope {
	sc := res.Scope
	if sc == failure.ScopeNone {
		sc = res.Class.Meaning().Scope
	}
	if keyID == "" {
		switch sc {
		case failure.ScopeKey:
			sc = failure.ScopeProvider
		case failure.ScopeKeyModel:
			sc = failure.ScopeProviderModel
		}
	}
	if model == "" && sc == failure.ScopeKeyModel {
		sc = failure.ScopeKey
	}
	if model == "" && sc == failure.ScopeProviderModel {
		sc = failure.ScopeProvider
	}
	switch sc {
	case failure.ScopeKey:
		return Scope{Kind: ScopeKey, Provider: provider, Key: keyID}
	case failure.ScopeKeyModel:
		return Scope{Kind: ScopeKeyModel, Provider: provider, Key: keyID, Model: model}
	case failure.ScopeProviderModel:
		return Scope{Kind: ScopeProviderModel, Provider: provider, Model: model}
	}
	return Scope{Kind: ScopeProvider, Provider: provider}
}

// hold applies a new hold locally and queues its write. A scope already
// held (or being probed) is left alone: the first record stands; so is one
// an operator released after the failed attempt was sent (releasedSince).
func (e *Engine) hold(req holdReq, requestID string, sent time.Time) {
	scope, res, source := req.scope, req.res, req.source
	now := e.clock.Now()
	id := scope.ID()
	if err := CheckID(id); err != nil {
		// Not even locally: a hold the fleet cannot share would differ
		// from process to process, and a write of it is refused for good.
		e.log.Warn("hold not recorded", "provider", scope.Provider, "key_id", scope.Key, "class", res.Class.String(), "err", err)
		return
	}
	e.mu.Lock()
	cur := e.entries[id]
	if cur != nil && (live(cur.rec) || releasedSince(cur.rec, sent)) {
		e.mu.Unlock()
		return
	}
	var prev *Record
	var base uint64
	if cur != nil {
		prev = &cur.rec
		base = cur.rec.Revision
	}
	rec := e.newHold(req, now, prev)
	rec.Revision = base
	en := e.newEntry(rec)
	en.pending = true
	e.installLocked(en)
	widen, n := e.widenLocked(rec)
	e.mu.Unlock()
	ev := []Event{e.event(EventHold, rec, "")}
	if source == SourceBreaker {
		ev = append(ev, e.event(EventTrip, rec, ""))
	}
	for i := range ev {
		ev[i].RequestID = requestID
	}
	e.enqueue(&intent{rec: rec, base: base, hold: &req, ev: ev, entry: en})
	if widen {
		wide := res
		wide.Reason = fmt.Sprintf("%d keys refused the model: %s", n, res.Reason)
		e.hold(holdReq{Scope{Kind: ScopeProviderModel, Provider: scope.Provider, Model: scope.Model}, wide, source, nil}, requestID, sent)
	}
}

// newHold builds a held record. A failure of the same class on a target
// still ramping after a probe's release (prev) climbs one rung; after an
// operator's release the ladder starts over at rung 0.
func (e *Engine) newHold(req holdReq, now time.Time, prev *Record) Record {
	scope, res, source := req.scope, req.res, req.source
	set := e.Policy().For(scope.Provider)
	rung := 0
	since := now
	if prev != nil && prev.State == StateReleased && prev.Class == res.Class && !operatorReleased(*prev) {
		rung = set.nextRung(res.Class, prev.Rung)
		since = prev.Since
	}
	rec := Record{
		Version:    SchemaVersion,
		ID:         scope.ID(),
		Scope:      scope,
		State:      StateHeld,
		Class:      res.Class,
		Rung:       rung,
		Since:      since,
		Until:      now.Add(set.Wait(res.Class, rung, res, e.rnd)),
		WaitStated: stated(res),
		Reason:     res.Reason,
		Code:       res.Code,
		Source:     source,
		RecordedBy: e.inst,
		RecordedAt: now,
		Tripped:    req.tripped,
	}
	if e.fp != nil && scope.Key != "" {
		rec.Fingerprint = e.fp(scope.Provider, scope.Key)
	}
	return rec
}

// reportProbe settles the holds whose probe this attempt was. It reports
// false when there is none (the lease lapsed or was lost meanwhile).
func (e *Engine) reportProbe(provider, keyID, model string, out Outcome) bool {
	ents, ok := e.covering(provider, keyID, model)
	if !ok {
		return false
	}
	found := false
	for _, en := range ents {
		if en != nil && en.mine && en.rec.State == StateProbing && en.token.Load() {
			found = true
			e.settle(en, out, nil)
		}
	}
	return found
}

// stated reports whether a failure's hold waits as the failure says (a
// provider's stated wait, a trip_on rule's TTL): WaitStated.
func stated(res failure.Result) bool { return res.HasWait || res.HoldTTL > 0 }

// settle turns a probe outcome into the hold's next state (section 6):
// serves -> released (ramp); same refusal -> held one rung higher;
// network error or 5xx -> held on the same rung; a different failure ->
// released, and the new failure recorded on its own scope. An early
// probe's failure (its lease taken before the hold was due: the try_soft
// pass) leaves the rung and the due time as they were: the rung grows at
// most once per due time, as due probes alone would make it.
func (e *Engine) settle(en *entry, out Outcome, done chan error) {
	now := e.clock.Now()
	set := e.Policy().For(en.rec.Scope.Provider)
	rec := en.rec
	early := rec.Probe != nil && rec.Probe.Started.Before(rec.Until)
	if out.Cancelled && out.Unsent && rec.Probe != nil {
		rec.EarlyProbeAfter = rec.Probe.Started // nothing was sent: no interval to wait
	}
	rec.Probe = nil
	rec.RecordedBy = e.inst
	rec.RecordedAt = now
	rec.Pinned = false
	res := out.Result
	var ev []Event
	var ttl time.Duration
	var settled bool
	switch {
	case out.Cancelled:
		rec.State = StateHeld // give the lease back: due again at once
	case out.OK && isTrip(rec) && rec.ProbeSuccesses+1 < set.Breaker.SuccessThreshold:
		// not yet the last success the breaker asks for: still held, due
		// again at once for the next probe
		rec.State = StateHeld
		rec.ProbeSuccesses++
		rec.Until = now
		ev = append(ev, e.event(EventProbe, rec, ProbeCounted))
	case out.OK:
		e.release(&rec, now, set, "probe")
		ttl = set.RampDuration
		ev = append(ev, e.event(EventProbe, rec, ProbeReleased), e.event(EventRelease, rec, "probe"))
	default:
		rec.ProbeSuccesses = 0
		switch s := failure.ProbeSettlement(rec.Class, res.Class); {
		case s != failure.Settle && early:
			rec.State = StateHeld // rung and due time unchanged
			if s == failure.Escalate {
				rec.Reason, rec.Code = res.Reason, res.Code
			}
			ev = append(ev, e.event(EventProbe, rec, ProbeSameRung))
		case s == failure.Escalate:
			rec.State = StateHeld
			rec.Rung = set.nextRung(rec.Class, rec.Rung)
			rec.Until = now.Add(set.Wait(rec.Class, rec.Rung, res, e.rnd))
			rec.WaitStated = stated(res)
			rec.Reason, rec.Code = res.Reason, res.Code
			ev = append(ev, e.event(EventProbe, rec, ProbeEscalated))
		case s == failure.SameRung:
			rec.State = StateHeld
			rec.Until = now.Add(set.Wait(rec.Class, rec.Rung, failure.Result{}, e.rnd))
			rec.WaitStated = false
			ev = append(ev, e.event(EventProbe, rec, ProbeSameRung))
		default:
			e.release(&rec, now, set, "probe")
			ttl = set.RampDuration
			ev = append(ev, e.event(EventProbe, rec, ProbeSettled), e.event(EventRelease, rec, "probe"))
			settled = true
		}
	}
	for i := range ev {
		ev[i].RequestID = out.RequestID
	}
	e.mu.Lock()
	if e.entries[rec.ID] != en {
		e.mu.Unlock()
		if done != nil {
			done <- ErrNotOwner
		}
		return
	}
	n := e.newEntry(rec)
	n.pending = true
	e.installLocked(n)
	e.mu.Unlock()
	in := &intent{rec: rec, base: rec.Revision, ttl: ttl, ev: ev, entry: n}
	if done != nil {
		in.done = []chan error{done}
	}
	e.enqueue(in)
	if settled && res.Class.Meaning().Holds {
		sc := rec.Scope
		e.hold(holdReq{ScopeFor(res, sc.Provider, sc.Key, sc.Model), res, e.sourceOf(res), nil}, out.RequestID, out.Sent)
	}
}

// isTrip reports whether rec is a tripped circuit breaker's hold (class
// transient, source breaker): the holds breaker.success_threshold applies
// to.
func isTrip(rec Record) bool { return rec.Class == failure.Transient && rec.Source == SourceBreaker }

// release turns rec into a released record ramping from now, released by
// this instance for source (probe, admin, credential, expired).
func (e *Engine) release(rec *Record, now time.Time, set *Settings, source string) {
	rec.State = StateReleased
	rec.ProbeSuccesses = 0
	rec.ReleasedBy = e.inst
	rec.ReleaseSource = source
	rec.Probe = nil
	rec.Pinned = false
	rec.RecordedAt = now
	rec.RampUntil = now.Add(set.RampDuration)
}

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
