package prober

// The health records a unit writes: its record after a check, the
// provider-scope hold's state in it, the write and its health event, and
// for a per-key provider the aggregate record of its keys.

import (
	"context"
	"fmt"
	"time"

	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
)

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
