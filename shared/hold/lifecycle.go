package hold

// What an attempt's outcome does to a hold: Report (a new hold applied
// locally and queued for the store, its scope and rung) and settle (a
// probe's outcome: released, escalated, same rung, settled, counted).

import (
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
