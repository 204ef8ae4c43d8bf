package prober

// One check of a unit and what it tells the hold engine: the key it uses
// (a held key is skipped), runCheck, report (as a caller's attempt would),
// and the provider's breaker hold: released after a pass, and the trips
// this replica's own checks caused.

import (
	"context"
	"errors"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
)

// heldKeys returns the live key-scope holds of a target's keys, by key
// id: one lookup per configured key, whatever the number of holds.
func (s *Service) heldKeys(t *target) map[string]bool {
	held := map[string]bool{}
	for _, k := range t.keys {
		if r, ok := s.engine.Hold(hold.Scope{Kind: hold.ScopeKey, Provider: t.name, Key: k.ID}.ID()); ok && live(r) {
			held[k.ID] = true
		}
	}
	return held
}

func live(r hold.Record) bool { return r.State == hold.StateHeld || r.State == hold.StateProbing }

// checkKey is the key a unit's check uses: its own key, or the provider's
// highest-priority key that is not held. ok is false when every candidate
// is held: held keys are re-checked by settling their holds, not by
// regular checks.
func (s *Service) checkKey(u *unit) (config.Key, bool) {
	if len(u.t.keys) == 0 {
		return config.Key{}, true
	}
	held := s.heldKeys(u.t)
	if u.id.keyID != "" {
		k, ok := u.t.keyByID(u.id.keyID)
		return k, ok && !held[u.id.keyID]
	}
	for _, k := range u.t.keys {
		if !held[k.ID] {
			return k, true
		}
	}
	return config.Key{}, false
}

// runCheck runs the unit's check, reports it to the hold engine, and
// writes the unit's health record.
func (s *Service) runCheck(ctx context.Context, u *unit) {
	now := time.Now()
	spec := u.t.spec
	if !spec.enabled {
		active := u.rec
		unpassive(&active, spec)
		if active.Status != health.Unknown || active.Reason != spec.reason {
			s.write(ctx, u, health.Record{Provider: u.t.name, Key: u.id.keyID, Status: health.Unknown, Reason: spec.reason,
				CircuitState: health.CircuitClosed, CheckedAt: now, Models: u.rec.Models, ModelsAt: u.rec.ModelsAt})
		}
		u.next = now.Add(spec.interval)
		return
	}
	key, ok := s.checkKey(u)
	if !ok {
		u.next = now.Add(s.interval(u))
		return
	}
	r := s.send(ctx, u.t, key, u.t.healthCheck())
	if ctx.Err() != nil {
		return
	}
	s.met.checks.WithLabelValues(u.t.name, outcomeOf(r)).Inc()
	s.met.checkSecs.WithLabelValues(u.t.name).Observe(r.latency.Seconds())
	s.report(u.t, key.ID, r)
	if r.ok {
		s.releaseProviderHold(ctx, u.t)
	}
	s.write(ctx, u, s.nextRecord(u, r, now))
	u.next = time.Now().Add(s.interval(u))
	if !r.ok {
		s.log.Warn("check failed", "provider", u.t.name, "key_id", key.ID, "status", r.status,
			"class", r.res.Class.String(), "code", r.res.Code, "reason", r.res.Reason,
			"consecutive_failures", u.rec.ConsecutiveFailures)
	}
}

// report feeds a check to the hold engine exactly as a caller's attempt
// would be: transient failures count for the provider's circuit breaker
// (whose trip holds the provider), a refused credential, exhausted quota
// or rate limit holds the key, a pass resets the breaker. Other classes
// (a model or a bad path) say nothing about the provider or key the check
// used: they are recorded in health only.
func (s *Service) report(t *target, keyID string, r result) {
	if r.stale && !r.ok {
		return // a refusal of a secret rotated away meanwhile
	}
	m := r.res.Class.Meaning()
	switch {
	case r.ok:
		s.engine.Report(t.name, keyID, "", false, hold.Outcome{OK: true})
	case r.res.Class == failure.Transient:
		before, had := s.providerHold(t.name)
		s.engine.Report(t.name, keyID, "", false, hold.Outcome{Result: r.res, Status: r.status, Operation: hold.OperationHealthCheck})
		if after, ok := s.providerHold(t.name); ok && live(after) && after.Source == hold.SourceBreaker &&
			after.RecordedBy == s.inst && (!had || !live(before) || !before.Since.Equal(after.Since)) {
			s.trips.Store(after.ID, tripMark{after.Since, after.Rung}) // this check tripped it
		}
	case m.Holds && m.Scope == failure.ScopeKey:
		// A check names no model: only what holds a whole key is held
		// (for a keyless provider, keyID "": the provider, as the proxy
		// holds it; hold.ScopeFor).
		res := r.res
		res.Scope = failure.ScopeKey
		s.engine.Report(t.name, keyID, "", false, hold.Outcome{Result: res, Status: r.status})
	}
}

// providerHold returns the provider-scope hold of a provider, if any.
func (s *Service) providerHold(provider string) (hold.Record, bool) {
	return s.engine.Hold(hold.Scope{Kind: hold.ScopeProvider, Provider: provider}.ID())
}

// releaseProviderHold releases a live transient (breaker) hold of the
// provider after a passing check: a due one through its probe lease (one
// probe fleet-wide: with breaker.success_threshold above 1 the pass
// counts as one of the successes the hold needs), and one the prober's
// own checks tripped at once, unless success_threshold asks for more
// than one success (then that hold waits out its cooldown and is probed
// like any).
func (s *Service) releaseProviderHold(ctx context.Context, t *target) {
	rec, ok := s.providerHold(t.name)
	if !ok || !live(rec) || rec.Class != failure.Transient {
		return
	}
	if _, got, _ := s.engine.TryProbe(ctx, rec.ID); got {
		if err := s.engine.ProbeResult(ctx, rec.ID, hold.Outcome{OK: true}); err != nil {
			s.log.Warn("release provider hold", "hold", rec.ID, "err", err)
		}
		s.met.probes.WithLabelValues(rec.Class.String(), "ok").Inc()
		return
	}
	if rec.State == hold.StateHeld && s.trippedHere(rec) &&
		s.engine.Policy().For(t.name).Breaker.SuccessThreshold <= 1 {
		// At the revision read: an operator's pin or another instance's
		// write since then stands.
		switch err := s.engine.ReleaseAt(ctx, rec.ID, hold.SourceProber, rec.Revision); {
		case err == nil:
			s.trips.Delete(rec.ID)
		case !errors.Is(err, hold.ErrConflict):
			s.log.Warn("release provider hold", "hold", rec.ID, "err", err)
		} // a conflict (the trip not written yet, or changed since): the next passing check tries again
	}
}

// tripMark tells a trip apart: its Since and rung. A hold tripped again
// after a probe's release keeps the Since of the first and climbs a rung
// (after an operator's release it starts over with a Since of its own);
// a probe's result on the same rung keeps both.
type tripMark struct {
	since time.Time
	rung  int
}

// trippedHere reports whether this replica's own checks tripped the hold
// rec (the trip it noted is rec's, not an earlier one); a note of another
// trip is dropped.
func (s *Service) trippedHere(rec hold.Record) bool {
	v, ok := s.trips.Load(rec.ID)
	if !ok {
		return false
	}
	if m := v.(tripMark); m.since.Equal(rec.Since) && m.rung == rec.Rung {
		return true
	}
	s.trips.Delete(rec.ID)
	return false
}
