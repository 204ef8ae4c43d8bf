package proxy

import (
	"context"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/health"
)

// runHealth feeds the route table with the prober's health records (the
// switchyard_health bucket, through a KV watcher into memory) until ctx
// ends. Health only makes targets less preferred: a step whose provider is
// offline is tried after the healthy ones, a key whose own checks fail
// after the healthy keys, and GET /v1/models hides the models only offline
// providers serve (unless every provider is offline). The hold engine still
// decides what is out of rotation; nothing here brings a held target back.
//
// Wiring: Serve runs it beside the fleet member, under the same context:
//
//	wg.Go(func() { s.runHealth(engineCtx) })
func (s *Service) runHealth(ctx context.Context) {
	select {
	case <-s.member.Bound():
	case <-ctx.Done():
		return
	}
	res := s.member.Resources()
	view := health.NewView(s.setHealth)
	// The watcher (kvwatch) restarts itself on the connection's reconnects,
	// on leader elections of the bucket and when it stalls or closes; the
	// fleet member owns the connection.
	_ = view.Run(ctx, res.Health, s.member.Conn(), s.log.With("component", "health"))
}

// healthOf reads a provider's health from the records: offline (unhealthy
// or its circuit open), healthy, degraded, or unknown (no record, or no
// check).
func healthOf(snap *health.Snapshot) func(provider string) route.Health {
	return func(provider string) route.Health {
		rec, ok := snap.Get(provider, "")
		switch {
		case !ok:
			return route.HealthUnknown
		case rec.Offline():
			return route.HealthOffline
		case rec.Status == health.Healthy:
			return route.HealthHealthy
		case rec.Status == health.Degraded:
			return route.HealthDegraded
		}
		return route.HealthUnknown
	}
}
