package prober

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/health"
)

// passiveSlots is the number of steps the passive window slides in.
const passiveSlots = 30

// maxPassiveKeys bounds the keys kept per provider (a proxy allows 64).
const maxPassiveKeys = 64

// passiveWindow sums the proxies' passive reports per provider and key
// over a sliding window (prober.passive_window, in passiveSlots steps).
// Every replica receives every report (a plain subscription, no queue
// group) and keeps the same sums; a record's writer writes its window's
// sums, never adds them to the record's previous counts, so a report is
// counted once whichever replica writes and however often.
//
// Which providers count is the routing's: known is asked, under the
// window's lock, for each report; prune drops the counts of providers a
// new routing no longer has.
type passiveWindow struct {
	mu    sync.Mutex
	width time.Duration                             // one slot
	known func(provider string) bool                // the routing in use names provider
	provs map[string]map[string]*[passiveSlots]slot // provider -> key id -> ring
}

// slot is the counts of one step of the window; n is the step number
// (unix time / width) it holds.
type slot struct {
	n int64
	c health.PassiveCounts
}

// newPassiveWindow returns a window of the given length over the
// providers known names; reports about others are ignored.
func newPassiveWindow(window time.Duration, known func(provider string) bool) *passiveWindow {
	return &passiveWindow{width: max(window/passiveSlots, time.Millisecond), known: known,
		provs: map[string]map[string]*[passiveSlots]slot{}}
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
	keys := w.provs[r.Provider]
	if keys == nil {
		keys = map[string]*[passiveSlots]slot{}
		w.provs[r.Provider] = keys
	}
	n := w.step(now)
	for id, c := range r.Keys {
		ring := keys[id]
		if ring == nil {
			if len(keys) >= maxPassiveKeys || id == "" {
				continue
			}
			ring = new([passiveSlots]slot)
			keys[id] = ring
		}
		s := &ring[n%passiveSlots]
		if s.n != n {
			*s = slot{n: n}
		}
		s.c.Success += c.Success
		s.c.Failure += c.Failure
	}
	return true
}

// counts returns a provider's sums over the window ending at now: in
// total and by key id (keys without attempts left out; nil when none).
func (w *passiveWindow) counts(now time.Time, provider string) (total health.PassiveCounts, byKey map[string]health.PassiveCounts) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.step(now)
	for id, ring := range w.provs[provider] {
		var c health.PassiveCounts
		for _, s := range ring {
			if s.n > n-passiveSlots && s.n <= n {
				c.Success += s.c.Success
				c.Failure += s.c.Failure
			}
		}
		if c.IsZero() {
			continue
		}
		if byKey == nil {
			byKey = map[string]health.PassiveCounts{}
		}
		byKey[id] = c
		total.Success += c.Success
		total.Failure += c.Failure
	}
	return total, byKey
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

// fillPassive sets a record's passive counts from the window: a key
// record its key's, a provider record the sum of its keys with the
// breakdown by key.
func (s *Service) fillPassive(rec *health.Record, now time.Time) {
	total, byKey := s.passive.counts(now, rec.Provider)
	if rec.Key != "" {
		c := byKey[rec.Key]
		rec.PassiveSuccess, rec.PassiveFailure, rec.PassiveByKey = c.Success, c.Failure, nil
		return
	}
	rec.PassiveSuccess, rec.PassiveFailure, rec.PassiveByKey = total.Success, total.Failure, byKey
}

// refreshPassive rewrites the unit's record between checks when its
// passive counts moved (new reports, or old ones leaving the window).
// runUnit calls it at each lease renewal while it owns the unit.
func (s *Service) refreshPassive(ctx context.Context, u *unit) {
	if u.rec.Provider == "" {
		return // nothing written yet: the first check writes the record
	}
	rec := u.rec
	s.fillPassive(&rec, time.Now())
	if rec.PassiveSuccess == u.rec.PassiveSuccess && rec.PassiveFailure == u.rec.PassiveFailure &&
		maps.Equal(rec.PassiveByKey, u.rec.PassiveByKey) {
		return
	}
	s.write(ctx, u, rec)
}
