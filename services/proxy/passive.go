package proxy

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
)

// passiveCounters count the outcomes of the proxy's attempts per target
// (provider, key id) for the prober's health records. They are built once
// from the route table: counting an attempt is one atomic add on a slot
// found by the provider's and the key's indices, with no lock, no map and
// no allocation. runPassive publishes the deltas.
type passiveCounters struct {
	providers []passiveProvider // by route.Provider.Index
}

type passiveProvider struct {
	name    string
	subject string
	keys    []passiveKey // by route.Key.Index
	models  []passiveKey // by route.Step.ModelIndex
}

// passiveKey counts one key's (or one model's) attempts: latency sums the
// successful ones' latency in microseconds.
type passiveKey struct {
	id                          string
	success, failure, latencyUS atomic.Uint64
}

func newPassiveCounters(t *route.Table) *passiveCounters {
	n := 0
	for _, p := range t.Providers {
		n = max(n, p.Index+1)
	}
	pc := &passiveCounters{providers: make([]passiveProvider, n)}
	for _, p := range t.Providers {
		pp := &pc.providers[p.Index]
		pp.name, pp.subject = p.Name, health.PassiveSubject(p.Name)
		pp.keys = make([]passiveKey, len(p.Keys))
		for _, k := range p.Keys {
			pp.keys[k.Index()].id = k.ID
		}
	}
	for _, n := range t.Names {
		rt, _ := t.Resolve(n.ID)
		for i := range rt.Steps {
			st := &rt.Steps[i]
			if st.Provider == nil {
				continue
			}
			pp := &pc.providers[st.Provider.Index]
			for len(pp.models) <= st.ModelIndex {
				pp.models = append(pp.models, passiveKey{})
			}
			pp.models[st.ModelIndex].id = st.Model
		}
	}
	return pc
}

// count records one attempt's outcome. A failure counts only when it
// says something about the target: not when the caller went away or ran
// out of time, not for a request the provider refused for what it asked
// (request_rejected), not for an answer the classifier did not recognise.
// A nil receiver (reports off) counts nothing.
func (pc *passiveCounters) count(step *route.Step, keyIndex int, out hold.Outcome, latency time.Duration) {
	if pc == nil {
		return
	}
	p := &pc.providers[step.Provider.Index]
	k := &p.keys[keyIndex]
	var m *passiveKey // nil for an unlisted model: counted by key only
	if step.ModelIndex >= 0 {
		m = &p.models[step.ModelIndex]
	}
	switch {
	case out.OK:
		us := uint64(max(latency.Microseconds(), 0))
		k.success.Add(1)
		k.latencyUS.Add(us)
		if m != nil {
			m.success.Add(1)
			m.latencyUS.Add(us)
		}
	case countsAgainstTarget(out):
		k.failure.Add(1)
		if m != nil {
			m.failure.Add(1)
		}
	}
}

func countsAgainstTarget(out hold.Outcome) bool {
	if out.Cancelled {
		return false
	}
	return out.Result.Class.Meaning().Blames
}

// publisher is what a passive report is sent through (*nats.Conn).
type publisher interface {
	IsConnected() bool
	Publish(subject string, data []byte) error
}

// flush takes the counts since the previous flush and publishes one
// report per provider that has any. A report that cannot be sent (NATS
// down) is dropped: its counts are lost, never retried into a later
// interval.
func (pc *passiveCounters) flush(pub publisher, instance string, now time.Time, interval time.Duration) (sent, dropped int) {
	for i := range pc.providers {
		p := &pc.providers[i]
		keys, models := takeCounts(p.keys), takeCounts(p.models)
		if keys == nil {
			continue
		}
		data, err := json.Marshal(health.PassiveReport{
			Version: health.PassiveVersion, Provider: p.name, Instance: instance,
			At: now.UTC(), IntervalMS: interval.Milliseconds(), Keys: keys, Models: models,
		})
		if err != nil || !pub.IsConnected() || pub.Publish(p.subject, data) != nil {
			dropped++
			continue
		}
		sent++
	}
	return sent, dropped
}

// takeCounts takes the counts since the previous flush, by id (nil when
// none).
func takeCounts(ks []passiveKey) map[string]health.PassiveCounts {
	var out map[string]health.PassiveCounts
	for j := range ks {
		k := &ks[j]
		c := health.PassiveCounts{Success: k.success.Swap(0), Failure: k.failure.Swap(0),
			LatencyMSSum: float64(k.latencyUS.Swap(0)) / 1000}
		if c.IsZero() || k.id == "" {
			continue
		}
		if out == nil {
			out = make(map[string]health.PassiveCounts, len(ks))
		}
		out[k.id] = c
	}
	return out
}

// flushPassive publishes the passive counts of the routing in use and of
// the routings it replaced (of their last requests), over the interval
// since the last report.
func (s *Service) flushPassive(now time.Time, since time.Duration) {
	nc := s.member.Conn()
	sent, dropped := s.rt.Load().passive.flush(nc, s.member.Instance, now, since)
	s.passive.mu.Lock()
	keep := s.passive.retired[:0]
	for _, old := range s.passive.retired {
		idle := old.active.Load() == 0 // before the flush: nothing counts after it
		n, d := old.passive.flush(nc, s.member.Instance, now, since)
		sent, dropped = sent+n, dropped+d
		if !idle {
			keep = append(keep, old)
		}
	}
	clear(s.passive.retired[len(keep):])
	s.passive.retired = keep
	s.passive.mu.Unlock()
	s.metrics.passiveReports(sent, dropped)
	if dropped > 0 {
		s.log.Debug("passive reports dropped", "count", dropped, "nats_connected", nc.IsConnected())
	}
}

// runPassive publishes the passive counters every
// proxy.passive_report_interval until ctx ends, then once more for the
// last requests. Serve runs it beside the fleet member when the proxy has
// a NATS connection and the reports are on.
func (s *Service) runPassive(ctx context.Context) {
	every := s.cfg.Proxy.PassiveReportInterval
	last := time.Now()
	flush := func(now time.Time) {
		s.flushPassive(now, now.Sub(last))
		last = now
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			flush(time.Now())
			return
		case now := <-t.C:
			flush(now)
		}
	}
}
