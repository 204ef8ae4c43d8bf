package prober

// Model discovery: which key lists a provider's models, and the listing.

import (
	"context"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/health"
)

// discoveryKey is the key a discovery uses: the provider's
// highest-priority key that is neither held nor refused a discovery since
// the last one that passed, so that a refusal which holds nothing (a key
// without the models scope, a refusal naming a model) moves the next
// discovery on to the next key instead of asking the same one again. When
// every key not held has refused, the round starts over from the first.
// With per_key it may be another unit's key: discovery is the provider's.
func (s *Service) discoveryKey(u *unit) (config.Key, bool) {
	if len(u.t.keys) == 0 {
		return config.Key{}, true
	}
	if u.refused == nil {
		u.refused = map[string]bool{}
	}
	held := s.heldKeys(u.t)
	for range 2 {
		for _, k := range u.t.keys {
			if !held[k.ID] && !u.refused[k.ID] {
				return k, true
			}
		}
		clear(u.refused)
	}
	return config.Key{}, false
}

// discoverModels lists the provider's models and records them in its
// health record; a failed discovery is retried on the fast loop.
// A discovery skips a provider whose breaker is open and keys that are
// held, and reports its own failures like a check's (a 401 holds the key).
func (s *Service) discoverModels(ctx context.Context, u *unit) {
	now := time.Now()
	u.nextDiscovery = now.Add(s.cfg.DiscoveryRetry)
	if rec, held := s.providerHold(u.t.name); held && live(rec) {
		return // a tripped breaker: the settle path probes it, discovery waits
	}
	key, ok := s.discoveryKey(u) // a held key is not used
	if !ok {
		return
	}
	r := s.send(ctx, u.t, key, u.t.modelsList(u.t.spec.timeout))
	if ctx.Err() != nil {
		return // shutting down, or the lease lapsed: says nothing of the provider
	}
	if !r.ok {
		s.report(u.t, key.ID, r) // a refused key is held like a failed check's
		if r.res.Class != failure.Transient && key.ID != "" {
			u.refused[key.ID] = true // the next discovery tries the next key
		}
	}
	var models []string
	var err error
	if r.ok {
		models, err = parseModels(r.body)
	}
	if !r.ok || err != nil {
		s.met.discoveries.WithLabelValues(u.t.name, "failed").Inc()
		s.log.Warn("model discovery failed", "provider", u.t.name, "status", r.status, "reason", r.res.Reason, "err", err,
			"retry_in", s.cfg.DiscoveryRetry)
		return
	}
	s.met.discoveries.WithLabelValues(u.t.name, "ok").Inc()
	clear(u.refused)
	u.nextDiscovery = now.Add(s.cfg.DiscoveryInterval)
	if u.id.keyID == "" {
		rec := u.rec
		if rec.Provider == "" {
			rec = health.Record{Provider: u.t.name, Status: health.Unknown, Reason: notChecked, CircuitState: health.CircuitClosed}
		}
		rec.Models, rec.ModelsAt = models, now.UTC()
		s.write(ctx, u, rec)
	} else {
		var fresh *health.Record
		if u.rec.Provider != "" {
			fresh = &u.rec
		}
		s.writeAggregate(ctx, u.t, fresh, &discovered{models: models, at: now})
	}
	s.log.Info("models discovered", "provider", u.t.name, "count", len(models))
}
