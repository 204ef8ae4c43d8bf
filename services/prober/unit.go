package prober

// A unit's schedule: the goroutine behind one lease (runUnit), following a
// new routing, taking over a unit, retiring a removed one, and the interval
// to the next check. What a check does is in runcheck.go, the records it
// writes in record.go.

import (
	"context"
	"math/rand/v2"
	"time"

	"switchyard.dev/shared/health"
	"switchyard.dev/shared/lease"
)

// unit is the work behind one lease: the checks of a provider (one check
// with its best key) or of one key (health_check.per_key), and for one
// unit per provider the model discovery. Only the unit's goroutine
// (runUnit) touches it.
type unit struct {
	id    unitID
	lease *lease.Lease

	// t and discover are the unit's target and role in the routing in
	// use, read from it at each wake.
	t        *target
	discover bool

	owned         bool
	next          time.Time // next check
	nextDiscovery time.Time
	rec           health.Record // the unit's record as last written or read
	// refused are the keys that refused a discovery since the last one
	// that passed (see discoveryKey).
	refused map[string]bool
}

// runUnit takes and renews the unit's lease, and runs its checks and
// discoveries while it owns it, until ctx ends. At each wake (at least
// every third of the lease TTL) it reads its target from the routing in
// use: an unchanged target changes nothing, a changed check is run at once
// (see follow). On the way out it deletes the health records the routing
// in use no longer writes (the unit was removed) and releases the lease.
func (s *Service) runUnit(ctx context.Context, u *unit) {
	defer func() {
		bg := context.WithoutCancel(ctx)
		s.retire(bg, u)
		u.lease.Release(bg)
		if u.owned {
			s.met.leases.Dec()
		}
	}()
	ttl := u.lease.TTL
	for {
		now := time.Now()
		t, discover, ok := s.routing().unit(u.id)
		if !ok {
			// Removed by the routing just applied: Apply stops the unit.
			<-ctx.Done()
			return
		}
		prev, wasDiscoverer := u.t, u.discover
		u.t, u.discover = t, discover
		lapse, err := u.lease.Acquire(ctx)
		if ctx.Err() != nil {
			return
		}
		owned := err == nil
		switch {
		case owned && !u.owned:
			s.met.leases.Inc()
			s.log.Debug("check lease taken", "lease", u.lease.Key)
			s.takeOver(u, now)
		case owned:
			s.follow(u, prev, wasDiscoverer, now)
		case !owned && u.owned:
			s.met.leases.Dec()
			s.log.Info("check lease lost", "lease", u.lease.Key, "err", err)
		}
		u.owned = owned
		wake := now.Add(ttl / 3)
		if owned {
			// The check and the discovery each end within the lease they
			// run under: another replica takes the unit over once it lapses.
			if !now.Before(u.next) {
				s.underLease(ctx, u, s.runCheck)
			}
			if u.discover && !time.Now().Before(u.nextDiscovery) {
				if _, err := u.lease.Acquire(ctx); err == nil { // the check may have used most of it
					s.underLease(ctx, u, s.discoverModels)
				}
			}
			s.refreshPassive(ctx, u)
			wake = earliest(wake, u.next)
			if u.discover {
				wake = earliest(wake, u.nextDiscovery)
			}
		} else if !lapse.IsZero() {
			// try again right when the owner's lease lapses
			wake = earliest(wake, lapse.Add(20*time.Millisecond))
		}
		d := max(time.Until(wake), 20*time.Millisecond)
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// underLease runs work for u with a context that ends when u's lease
// lapses: a check still out then is cut and its result dropped (it is no
// longer this replica's to write).
func (s *Service) underLease(ctx context.Context, u *unit, work func(context.Context, *unit)) {
	lctx, cancel := context.WithDeadline(ctx, u.lease.Until)
	defer cancel()
	work(lctx, u)
}

// follow adjusts the schedule of a unit this replica owns to a new routing
// configuration's target: a target whose conf changed (where or how the
// check is sent) is checked, and discovered, at once; a changed interval
// counts from the last check; the unit that becomes its provider's
// discoverer continues from the provider record's models_at. An unchanged
// target changes nothing.
func (s *Service) follow(u *unit, prev *target, wasDiscoverer bool, now time.Time) {
	if prev == nil || prev == u.t {
		return
	}
	switch {
	case prev.conf != u.t.conf:
		s.log.Info("check changed by the routing configuration", "provider", u.t.name, "key_id", u.id.keyID)
		u.next, u.nextDiscovery = now, now
		return
	case prev.spec.interval != u.t.spec.interval && !u.rec.CheckedAt.IsZero():
		u.next = u.rec.CheckedAt.Add(s.interval(u))
	}
	if u.discover && !wasDiscoverer {
		u.nextDiscovery = now
		if prov, ok := s.view.Snapshot().Get(u.t.name, ""); ok && !prov.ModelsAt.IsZero() {
			u.nextDiscovery = prov.ModelsAt.Add(s.cfg.DiscoveryInterval)
		}
	}
}

// retire deletes, when the routing in use no longer writes them, the
// health records of a stopped unit: its own (a key's, or its provider's)
// and, for a removed per-key provider, the provider's aggregate. Only the
// replica holding the unit's lease writes its records, so only it deletes
// them: a unit whose lease is free takes it first (its owner died); one
// another replica holds is left to that replica, which deletes the records
// when it applies the same routing.
func (s *Service) retire(ctx context.Context, u *unit) {
	rt := s.routing()
	ids := []string{}
	if !rt.writes(u.id.provider, u.id.keyID) {
		ids = append(ids, health.ID(u.id.provider, u.id.keyID))
	}
	if u.id.keyID != "" && !rt.writes(u.id.provider, "") {
		ids = append(ids, health.ID(u.id.provider, ""))
	}
	if len(ids) == 0 {
		return
	}
	if _, err := u.lease.Acquire(ctx); err != nil {
		return
	}
	res := s.member.Resources()
	for _, id := range ids {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := res.Health.Delete(dctx, id)
		cancel()
		if err != nil {
			s.log.Warn("delete health record of a removed target", "id", id, "err", err)
			continue
		}
		s.log.Info("health record of a removed target deleted", "id", id)
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// takeOver starts the schedule of a unit this replica just took: the
// previous owner's record says when it last checked, so the interval is
// kept fleet-wide.
func (s *Service) takeOver(u *unit, now time.Time) {
	u.next, u.nextDiscovery = now, now
	if rec, ok := s.view.Snapshot().Get(u.t.name, u.id.keyID); ok {
		u.rec = rec
		if !rec.CheckedAt.IsZero() {
			u.next = rec.CheckedAt.Add(s.interval(u))
		}
	}
	if prov, ok := s.view.Snapshot().Get(u.t.name, ""); ok && !prov.ModelsAt.IsZero() {
		u.nextDiscovery = prov.ModelsAt.Add(s.cfg.DiscoveryInterval)
	}
}

// interval is the time to the unit's next check: the check interval, or
// the recheck interval while its checks fail, varied by the jitter.
func (s *Service) interval(u *unit) time.Duration {
	d := u.t.spec.interval
	if u.rec.ConsecutiveFailures > 0 && s.cfg.RecheckInterval < d {
		d = s.cfg.RecheckInterval
	}
	if j := s.cfg.Jitter; j > 0 {
		d = time.Duration(float64(d) * (1 + j*(2*rand.Float64()-1)))
	}
	return d
}
