package prober

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/health"
)

// passiveSlots is the number of steps the passive window slides in.
const passiveSlots = 30

// maxPassiveKeys bounds the keys kept per provider (a proxy allows 64);
// maxPassiveModels the models.
const (
	maxPassiveKeys   = 64
	maxPassiveModels = 256
)

// passiveWindow sums the proxies' passive reports per provider, per key
// and per model over a sliding window (prober.passive_window, in
// passiveSlots steps): counts of attempts and the latency sums of the
// successful ones. Every replica receives every report (a plain
// subscription, no queue group) and keeps the same sums; a record's
// writer writes its window's sums, never adds them to the record's
// previous counts, so a report is counted once whichever replica writes
// and however often.
//
// Which providers count is the routing's: known is asked, under the
// window's lock, for each report; prune drops the counts of providers a
// new routing no longer has.
type passiveWindow struct {
	mu    sync.Mutex
	width time.Duration              // one slot
	known func(provider string) bool // the routing in use names provider
	provs map[string]*passiveProvider
}

// passiveProvider is one provider's rings, by key id and by model.
type passiveProvider struct {
	keys   map[string]*passiveRing
	models map[string]*passiveRing
}

// passiveRing is the slots of one key or model.
type passiveRing [passiveSlots]slot

// slot is the counts of one step of the window; n is the step number
// (unix time / width) it holds.
type slot struct {
	n int64
	c health.PassiveCounts
}

// add adds c to the ring's slot of step n (a slot last used a full turn
// ago starts from zero).
func (r *passiveRing) add(n int64, c health.PassiveCounts) {
	s := &r[n%passiveSlots]
	if s.n != n {
		*s = slot{n: n}
	}
	s.c.Add(c)
}

// sum is the ring's counts over the window ending at step n.
func (r *passiveRing) sum(n int64) health.PassiveCounts {
	var c health.PassiveCounts
	for _, s := range r {
		if s.n > n-passiveSlots && s.n <= n {
			c.Add(s.c)
		}
	}
	return c
}

// newPassiveWindow returns a window of the given length over the
// providers known names; reports about others are ignored.
func newPassiveWindow(window time.Duration, known func(provider string) bool) *passiveWindow {
	return &passiveWindow{width: max(window/passiveSlots, time.Millisecond), known: known,
		provs: map[string]*passiveProvider{}}
}

// prune drops the counts of providers known no longer names (a routing
// configuration removed them). Asking known under the lock, add and prune
// agree: a report that add counted before a new routing was swapped in
// is dropped by the prune that follows the swap.
func (w *passiveWindow) prune() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.provs {
		if !w.known(p) {
			delete(w.provs, p)
		}
	}
}

func (w *passiveWindow) step(now time.Time) int64 { return now.UnixNano() / int64(w.width) }

// add counts a report received at now. It reports false for a provider
// the window does not know.
func (w *passiveWindow) add(now time.Time, r health.PassiveReport) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.known(r.Provider) {
		return false
	}
	p := w.provs[r.Provider]
	if p == nil {
		p = &passiveProvider{keys: map[string]*passiveRing{}, models: map[string]*passiveRing{}}
		w.provs[r.Provider] = p
	}
	n := w.step(now)
	addTo := func(rings map[string]*passiveRing, most int, counts map[string]health.PassiveCounts) {
		for id, c := range counts {
			ring := rings[id]
			if ring == nil {
				if len(rings) >= most || id == "" {
					continue
				}
				ring = new(passiveRing)
				rings[id] = ring
			}
			ring.add(n, c)
		}
	}
	addTo(p.keys, maxPassiveKeys, r.Keys)
	addTo(p.models, maxPassiveModels, r.Models)
	return true
}

// counts returns a provider's sums over the window ending at now: in
// total and by key id (keys without attempts left out; nil when none).
// The total adds the keys in id order, so the same window always gives
// the same latency sum.
func (w *passiveWindow) counts(now time.Time, provider string) (total health.PassiveCounts, byKey map[string]health.PassiveCounts) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.provs[provider]
	if p == nil {
		return total, nil
	}
	byKey = sums(p.keys, w.step(now))
	for _, id := range slices.Sorted(maps.Keys(byKey)) {
		total.Add(byKey[id])
	}
	return total, byKey
}

// models returns a provider's sums by model over the window ending at now
// (models without attempts left out; nil when none).
func (w *passiveWindow) models(now time.Time, provider string) map[string]health.PassiveCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.provs[provider]
	if p == nil {
		return nil
	}
	return sums(p.models, w.step(now))
}

// sums is the window's counts of each ring, leaving out the empty ones
// (nil when every one is).
func sums(rings map[string]*passiveRing, n int64) map[string]health.PassiveCounts {
	var out map[string]health.PassiveCounts
	for id, ring := range rings {
		c := ring.sum(n)
		if c.IsZero() {
			continue
		}
		if out == nil {
			out = map[string]health.PassiveCounts{}
		}
		out[id] = c
	}
	return out
}

// passiveInbox is the subscription to the proxies' passive reports.
type passiveInbox struct {
	sub *nats.Subscription
	ch  chan *nats.Msg
}

// subscribePassive subscribes to the passive reports. The subscription
// is plain: every replica aggregates every report (see passiveWindow);
// nats.go renews it after a reconnect. Reports that arrive while the
// inbox is full are dropped by the client (a slow consumer).
func (s *Service) subscribePassive() (*passiveInbox, error) {
	in := &passiveInbox{ch: make(chan *nats.Msg, 1024)}
	sub, err := s.nc.ChanSubscribe(health.PassiveSubjects, in.ch)
	if err != nil {
		return nil, fmt.Errorf("prober: subscribe to %s: %w", health.PassiveSubjects, err)
	}
	in.sub = sub
	return in, nil
}

// runPassive receives the passive reports into the window until ctx
// ends, then unsubscribes.
func (s *Service) runPassive(ctx context.Context, in *passiveInbox) {
	defer func() { _ = in.sub.Unsubscribe() }()
	ch := in.ch
	for {
		select {
		case <-ctx.Done():
			return
		case msg := <-ch:
			s.passiveReport(time.Now(), msg.Data)
		}
	}
}

// passiveReport counts one report.
func (s *Service) passiveReport(now time.Time, data []byte) {
	r, err := health.ParsePassiveReport(data)
	switch {
	case err != nil:
		s.met.passive.WithLabelValues("invalid").Inc()
		s.log.Debug("passive report ignored", "err", err)
	case !s.passive.add(now, r):
		s.met.passive.WithLabelValues("unknown_provider").Inc()
	default:
		s.met.passive.WithLabelValues("ok").Inc()
	}
}

// fillPassive sets a record's passive fields from the window (a key
// record its key's counts and latency, a provider record the sum of its
// keys with the breakdown by key and the latency by model), then applies
// the passive rule to the record's active status (see passiveRule). A
// record the rule degraded before is first brought back to the status
// of its active check (spec says why a target without one is unknown),
// so the rule is judged afresh on each write and recovers by itself.
func (s *Service) fillPassive(rec *health.Record, now time.Time, spec checkSpec) {
	unpassive(rec, spec)
	total, byKey := s.passive.counts(now, rec.Provider)
	if rec.Key != "" {
		c := byKey[rec.Key]
		rec.PassiveSuccess, rec.PassiveFailure, rec.PassiveByKey = c.Success, c.Failure, nil
		rec.PassiveLatencyMS, rec.PassiveLatencyByModel = roundMS(c.AvgLatencyMS()), nil
	} else {
		rec.PassiveSuccess, rec.PassiveFailure, rec.PassiveByKey = total.Success, total.Failure, byKey
		rec.PassiveLatencyMS, rec.PassiveLatencyByModel = roundMS(total.AvgLatencyMS()), nil
		for m, c := range s.passive.models(now, rec.Provider) {
			if c.Success == 0 {
				continue
			}
			if rec.PassiveLatencyByModel == nil {
				rec.PassiveLatencyByModel = map[string]float64{}
			}
			rec.PassiveLatencyByModel[m] = roundMS(c.AvgLatencyMS())
		}
	}
	s.passiveRule(rec)
}

// roundMS rounds a latency to the microsecond.
func roundMS(ms float64) float64 { return math.Round(ms*1000) / 1000 }

// passiveRule degrades a record whose active status is healthy (or
// unknown: no check, or none answered yet) when the real requests of the
// window fail too often: at least prober.passive_degraded_failures of
// them failed, and at least prober.passive_degraded_ratio of them (0
// failures configured: off). Degraded is advice (routing prefers other
// targets); the record is not offline.
func (s *Service) passiveRule(rec *health.Record) {
	least := s.cfg.PassiveDegradedFailures
	if least <= 0 || (rec.Status != health.Healthy && rec.Status != health.Unknown) {
		return
	}
	failed, all := rec.PassiveFailure, rec.PassiveSuccess+rec.PassiveFailure
	if failed < uint64(least) || float64(failed) < s.cfg.PassiveDegradedRatio*float64(all) {
		return
	}
	rec.Status, rec.PassiveDegraded = health.Degraded, true
	rec.Reason = fmt.Sprintf("passive: %d of %d real requests failed in the last %s", failed, all, s.cfg.PassiveWindow)
}

// unpassive undoes the passive rule on a record it degraded: the status
// is its active check's again (healthy after a passing check; unknown,
// with the reason its check gives, when none answered).
func unpassive(rec *health.Record, spec checkSpec) {
	if !rec.PassiveDegraded {
		return
	}
	rec.PassiveDegraded = false
	switch {
	case rec.ActiveCheckOK != nil && *rec.ActiveCheckOK:
		rec.Status, rec.Reason = health.Healthy, ""
	case !spec.enabled:
		rec.Status, rec.Reason = health.Unknown, spec.reason
	default:
		rec.Status, rec.Reason = health.Unknown, notChecked
	}
}

// notChecked is the reason of a record written before its first check.
const notChecked = "not checked yet"

// passiveChanged reports whether refilling a record changed what the
// window gives it (counts, latencies, or the passive rule's verdict).
func passiveChanged(a, b health.Record) bool {
	return a.PassiveSuccess != b.PassiveSuccess || a.PassiveFailure != b.PassiveFailure ||
		!maps.Equal(a.PassiveByKey, b.PassiveByKey) || a.PassiveLatencyMS != b.PassiveLatencyMS ||
		!maps.Equal(a.PassiveLatencyByModel, b.PassiveLatencyByModel) ||
		a.Status != b.Status || a.Reason != b.Reason || a.PassiveDegraded != b.PassiveDegraded
}

// refreshPassive rewrites the unit's record between checks when its
// passive fields moved (new reports, or old ones leaving the window), and
// with them, maybe, its status (the passive rule). runUnit calls it at
// each lease renewal while it owns the unit.
func (s *Service) refreshPassive(ctx context.Context, u *unit) {
	if u.rec.Provider == "" {
		return // nothing written yet: the first check writes the record
	}
	rec := u.rec
	s.fillPassive(&rec, time.Now(), u.t.spec)
	if !passiveChanged(rec, u.rec) {
		return
	}
	s.write(ctx, u, rec)
}
