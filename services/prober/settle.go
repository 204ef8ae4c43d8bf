package prober

import (
	"context"
	"sync"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
)

// settleLoop looks for due holds every settle_interval and settles those
// whose class has a cheap check, until ctx ends.
func (s *Service) settleLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	inflight := map[string]bool{}
	var mu sync.Mutex
	t := time.NewTicker(s.cfg.SettleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		rt := s.routing()
		for _, rec := range s.engine.Due(now) {
			mu.Lock()
			busy := inflight[rec.ID]
			mu.Unlock()
			if busy || !due(rec, now) {
				continue
			}
			tg := rt.targets[rec.Scope.Provider]
			if tg == nil {
				continue // a provider the routing in use does not have
			}
			c, ok := s.cheapCheck(tg, rec)
			if !ok {
				continue
			}
			if _, got, _ := s.engine.TryProbe(ctx, rec.ID); !got {
				continue // not due after all, or another instance probes it
			}
			mu.Lock()
			inflight[rec.ID] = true
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(inflight, rec.ID)
					mu.Unlock()
				}()
				s.settle(ctx, tg, rec, c)
			})
		}
	}
}

// due reports whether a hold may be probed now.
func due(r hold.Record, now time.Time) bool {
	switch r.State {
	case hold.StateHeld:
		return !now.Before(r.Until)
	case hold.StateProbing:
		return r.Probe == nil || !now.Before(r.Probe.LeaseUntil)
	}
	return false
}

// cheap is the check that settles one hold.
type cheap struct {
	key  config.Key
	req  request
	kind string // models_list, model_entry, one_token, health_check
}

// cheapCheck returns the cheap check of a hold, if its class has one:
// credential_rejected and quota_exhausted list models with the key;
// model_not_accessible and model_retired fetch the model's entry (or send
// a one-token request with prober.completion_probes); region_blocked only
// with completion probes; a tripped breaker (transient) on the provider
// is settled by a one-token request of the operation and model that
// tripped it (hold.Tripped; none known: left to a caller's request);
// another transient hold on the provider runs the provider's health
// check (its model list when health checks are off). rate_limit and the
// rest are left to a caller's request.
func (s *Service) cheapCheck(t *target, rec hold.Record) (cheap, bool) {
	sc := rec.Scope
	timeout := t.spec.timeout
	key, ok := t.keyByID(sc.Key)
	if sc.Key == "" && len(t.keys) > 0 {
		held := s.heldKeys(t)
		ok = false
		for _, k := range t.keys {
			if !held[k.ID] {
				key, ok = k, true
				break
			}
		}
	}
	if !ok {
		return cheap{}, false
	}
	switch rec.Class {
	case failure.CredentialRejected, failure.QuotaExhausted:
		return cheap{key: key, req: t.modelsList(timeout), kind: "models_list"}, true
	case failure.ModelNotAccessible, failure.ModelRetired, failure.RegionBlocked:
		if sc.Model == "" {
			return cheap{}, false
		}
		if s.cfg.CompletionProbes {
			return cheap{key: key, req: t.oneToken(sc.Model, timeout), kind: "one_token"}, true
		}
		if rec.Class == failure.RegionBlocked {
			return cheap{}, false
		}
		return cheap{key: key, req: t.modelEntry(sc.Model, timeout), kind: "model_entry"}, true
	case failure.Transient:
		if rec.Source == hold.SourceBreaker {
			// A tripped breaker is settled only by what tripped it: a
			// models list or health check passes while chat still fails.
			req, ok := t.tripCheck(rec.Tripped, timeout)
			return cheap{key: key, req: req, kind: "trip_request"}, ok
		}
		switch {
		case sc.Model != "" && s.cfg.CompletionProbes:
			return cheap{key: key, req: t.oneToken(sc.Model, timeout), kind: "one_token"}, true
		case sc.Model != "":
			return cheap{key: key, req: t.modelEntry(sc.Model, timeout), kind: "model_entry"}, true
		case t.spec.enabled:
			return cheap{key: key, req: t.healthCheck(), kind: "health_check"}, true
		default:
			// No active check configured: the provider's model list still
			// says whether it answers, so a tripped breaker is settled by
			// someone (not left due until a reset).
			return cheap{key: key, req: t.modelsList(timeout), kind: "models_list"}, true
		}
	}
	return cheap{}, false
}

// giveBackTimeout bounds giving a probe lease back: at shutdown the hold
// engine may be draining its last writes (or have stopped); the lease
// lapses on its own anyway.
const giveBackTimeout = 5 * time.Second

// settle runs the cheap check of a hold whose probe lease this replica
// holds and reports its outcome to the engine (released, one rung up, same
// rung, or settled with the new failure held on its own).
func (s *Service) settle(ctx context.Context, t *target, rec hold.Record, c cheap) {
	r := s.send(ctx, t, c.key, c.req)
	if ctx.Err() != nil || (r.stale && !r.ok) {
		// Shutting down, or the key's secret was rotated while the check
		// was out (its refusal says nothing about the new one):
		// give the lease back; the hold is due again at once.
		giveBack, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
		_ = s.engine.ProbeResult(giveBack, rec.ID, hold.Outcome{Cancelled: true})
		cancel()
		return
	}
	s.met.checkSecs.WithLabelValues(t.name).Observe(r.latency.Seconds())
	s.met.probes.WithLabelValues(rec.Class.String(), outcomeOf(r)).Inc()
	out := s.probeOutcome(t, rec, c, r)
	if err := s.engine.ProbeResult(ctx, rec.ID, out); err != nil {
		s.log.Warn("report probe", "hold", rec.ID, "err", err)
		return
	}
	s.log.Info("hold settled by a cheap check", "hold", rec.ID, "class", rec.Class.String(), "check", c.kind,
		"ok", r.ok, "status", r.status, "result", outcomeOf(r))
}

// probeOutcome maps a cheap check onto the hold's lifecycle. Only what the
// check can say about the held scope counts: a refusal of the same kind
// climbs a rung, a different refusal of the same scope settles the hold
// and is held on its own, anything else (a 5xx, a network error, an
// answer that says nothing about the scope) keeps the rung.
func (s *Service) probeOutcome(t *target, rec hold.Record, c cheap, r result) hold.Outcome {
	if r.ok {
		return hold.Outcome{OK: true}
	}
	res := r.res
	modelClass := func(cl failure.Class) bool { return cl == failure.ModelNotAccessible || cl == failure.ModelRetired }
	switch {
	case rec.Scope.Key == "" && rec.Class == failure.Transient:
		if res.Class != failure.Transient {
			// The provider answered: it is up. What the answer says about
			// the key is reported on its own.
			s.report(t, c.key.ID, r)
			return hold.Outcome{OK: true}
		}
	case modelClass(rec.Class) && modelClass(res.Class):
		res.Class = rec.Class // a missing model entry is the same refusal
	case res.Class == rec.Class, res.Class == failure.Transient:
	case rec.Scope.Key != "" && res.Class.Meaning().Holds && res.Class.Meaning().Scope == failure.ScopeKey:
		res.Scope = failure.ScopeKey
	case rec.Scope.Model != "" && res.Class.Meaning().Holds && res.Class.Meaning().Scope == failure.ScopeKeyModel:
	default:
		res = failure.Result{Class: failure.Transient, Code: res.Code, Reason: res.Reason}
	}
	return hold.Outcome{Result: res, Status: r.status}
}
