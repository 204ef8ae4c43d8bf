package prober

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
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

// nextRecord is the unit's record after check r.
func (s *Service) nextRecord(u *unit, r result, now time.Time) health.Record {
	prev := u.rec
	ok := r.ok
	rec := health.Record{
		Provider: u.t.name, Key: u.id.keyID, ActiveCheckOK: &ok,
		Check:      &health.Check{Method: u.t.spec.method, Path: u.t.spec.path},
		LastStatus: r.status, LastErrorCode: prev.LastErrorCode, LastErrorClass: prev.LastErrorClass,
		CheckedAt: now.UTC(), Models: prev.Models, ModelsAt: prev.ModelsAt,
	}
	ms := float64(r.latency.Microseconds()) / 1000
	if prev.AvgLatencyMS == 0 {
		rec.AvgLatencyMS = ms
	} else {
		rec.AvgLatencyMS = 0.7*prev.AvgLatencyMS + 0.3*ms
	}
	if r.ok {
		rec.Status = health.Healthy
		if d := s.cfg.DegradedLatency; d > 0 && r.latency > d {
			rec.Status = health.Degraded
			rec.Reason = fmt.Sprintf("slow: %d ms (degraded_latency %s)", r.latency.Milliseconds(), d)
		}
	} else {
		rec.ConsecutiveFailures = prev.ConsecutiveFailures + 1
		rec.LastErrorCode, rec.LastErrorClass = r.res.Code, r.res.Class.String()
		rec.Reason = r.res.Reason
		if r.status != 0 {
			rec.Reason = fmt.Sprintf("HTTP %d: %s", r.status, r.res.Reason)
		}
		rec.Status = health.Degraded
		if rec.ConsecutiveFailures >= s.cfg.UnhealthyAfter {
			rec.Status = health.Unhealthy
		}
	}
	s.circuit(&rec)
	return rec
}

// circuit fills in the provider-scope hold's state.
func (s *Service) circuit(rec *health.Record) {
	rec.CircuitState = health.CircuitClosed
	rec.CooldownUntil = time.Time{}
	h, ok := s.providerHold(rec.Provider)
	if !ok || !live(h) {
		return
	}
	rec.CooldownUntil = h.Until
	rec.CircuitState = health.CircuitHalfOpen
	if h.State == hold.StateHeld && time.Now().Before(h.Until) {
		rec.CircuitState = health.CircuitOpen
	}
}

// write stores the unit's record with its passive counts, publishes a
// health event when its status changed, and for a per-key unit refreshes
// the provider's record.
func (s *Service) write(ctx context.Context, u *unit, rec health.Record) {
	rec.CheckedBy = s.inst
	s.fillPassive(&rec, time.Now(), u.t.spec)
	prev := u.rec.Status
	if prev == "" {
		if old, ok := s.view.Snapshot().Get(rec.Provider, rec.Key); ok {
			prev = old.Status
		} else {
			prev = health.Unknown
		}
	}
	u.rec = rec
	if err := s.put(ctx, rec); err != nil {
		return
	}
	if rec.Status != prev {
		s.log.Info("health changed", "provider", rec.Provider, "key_id", rec.Key, "status", rec.Status, "previous", prev, "reason", rec.Reason)
		if err := health.Publish(s.nc, health.EventFor(rec, prev, time.Now())); err != nil {
			s.log.Warn("publish health event", "err", err)
		}
	}
	if u.id.keyID != "" {
		s.writeAggregate(ctx, u.t, &rec, nil)
	}
}

func (s *Service) put(ctx context.Context, rec health.Record) error {
	st := s.healthStore()
	if st == nil {
		return fmt.Errorf("health bucket not bound")
	}
	if _, err := st.Put(ctx, rec); err != nil {
		s.log.Warn("write health record", "id", health.ID(rec.Provider, rec.Key), "err", err)
		return err
	}
	return nil
}

// discovered is what a discovery found: the provider's models and when.
type discovered struct {
	models []string
	at     time.Time
}

// writeAggregate writes the provider record of a per-key provider from its
// keys' records: healthy when a key is healthy, unhealthy when every key
// checked is, degraded otherwise; then the passive rule over the
// provider's real requests. fresh is the key record just written (nil:
// the view's records only); disc, when set, replaces the record's models.
// With no key checked yet the record is the stored one (or a new unknown
// one), with the discovery's models. A status change publishes a health
// event.
func (s *Service) writeAggregate(ctx context.Context, t *target, fresh *health.Record, disc *discovered) {
	snap := s.view.Snapshot()
	prov, _ := snap.Get(t.name, "")
	agg, ok := s.aggregate(t, snap, prov, fresh)
	if !ok {
		if disc == nil {
			return
		}
		agg = prov
		if agg.Provider == "" {
			agg = health.Record{Provider: t.name, Status: health.Unknown, Reason: notChecked, CircuitState: health.CircuitClosed}
		}
	}
	if disc != nil {
		agg.Models, agg.ModelsAt = disc.models, disc.at.UTC()
	}
	agg.CheckedBy = s.inst
	s.fillPassive(&agg, time.Now(), t.spec)
	prev := prov.Status
	if prev == "" {
		prev = health.Unknown
	}
	if err := s.put(ctx, agg); err == nil && agg.Status != prev {
		s.log.Info("health changed", "provider", agg.Provider, "status", agg.Status, "previous", prev, "reason", agg.Reason)
		if err := health.Publish(s.nc, health.EventFor(agg, prev, time.Now())); err != nil {
			s.log.Warn("publish health event", "err", err)
		}
	}
}

// aggregate is the provider record of a per-key provider from its keys'
// records in snap (fresh, when set, in place of its key's), before the
// passive rule. ok is false when no key has been checked yet.
func (s *Service) aggregate(t *target, snap *health.Snapshot, prov health.Record, fresh *health.Record) (health.Record, bool) {
	agg := health.Record{Provider: t.name, Models: prov.Models, ModelsAt: prov.ModelsAt, CheckedAt: prov.CheckedAt}
	if fresh != nil {
		agg.Check, agg.CheckedAt = fresh.Check, fresh.CheckedAt
	}
	var healthy, unhealthy, n int
	var lat float64
	anyOK := false
	agg.ConsecutiveFailures = -1
	for _, k := range t.keys {
		kr, ok := snap.Get(t.name, k.ID)
		if fresh != nil && k.ID == fresh.Key {
			kr, ok = *fresh, true
		}
		if !ok || kr.ActiveCheckOK == nil {
			continue
		}
		n++
		lat += kr.AvgLatencyMS
		if agg.Check == nil {
			agg.Check = kr.Check
		}
		switch kr.Status {
		case health.Healthy:
			healthy++
		case health.Unhealthy:
			unhealthy++
		}
		if *kr.ActiveCheckOK {
			anyOK = true
		} else if agg.LastErrorCode == "" || (fresh != nil && kr.Key == fresh.Key) {
			agg.LastErrorCode, agg.LastErrorClass, agg.LastStatus = kr.LastErrorCode, kr.LastErrorClass, kr.LastStatus
		}
		if agg.ConsecutiveFailures < 0 || kr.ConsecutiveFailures < agg.ConsecutiveFailures {
			agg.ConsecutiveFailures = kr.ConsecutiveFailures
		}
	}
	if n == 0 {
		return health.Record{}, false
	}
	agg.ActiveCheckOK = &anyOK
	agg.AvgLatencyMS = lat / float64(n)
	switch {
	case healthy > 0:
		agg.Status = health.Healthy
	case unhealthy == n:
		agg.Status = health.Unhealthy
	default:
		agg.Status = health.Degraded
	}
	agg.Reason = fmt.Sprintf("%d of %d checked keys healthy", healthy, n)
	s.circuit(&agg)
	return agg, true
}
