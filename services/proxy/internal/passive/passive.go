// Package passive counts the outcomes of the proxy's attempts per target
// for the prober's health records (passive health: what real traffic
// says of a key and a model), and publishes them as reports on
// switchyard.passive.<provider>.
package passive

import (
	"encoding/json"
	"sync/atomic"
	"time"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
)

// Counters count the outcomes of the proxy's attempts per target
// (provider, key id) for the prober's health records. They are built once
// from the route table: counting an attempt is one atomic add on a slot
// found by the provider's and the key's indices, with no lock, no map and
// no allocation; Flush publishes the deltas.
type Counters struct {
	providers []providerCounts // by route.Provider.Index
}

type providerCounts struct {
	name    string
	subject string
	keys    []keyCounts // by route.Key.Index
	models  []keyCounts // by route.Step.ModelIndex
}

// keyCounts counts one key's (or one model's) attempts: latency sums the
// successful ones' latency in microseconds.
type keyCounts struct {
	id                          string
	success, failure, latencyUS atomic.Uint64
}

// New makes the counters of t's providers, keys and models, all zero.
func New(t *route.Table) *Counters {
	n := 0
	for _, p := range t.Providers {
		n = max(n, p.Index+1)
	}
	pc := &Counters{providers: make([]providerCounts, n)}
	for _, p := range t.Providers {
		pp := &pc.providers[p.Index]
		pp.name, pp.subject = p.Name, health.PassiveSubject(p.Name)
		pp.keys = make([]keyCounts, len(p.Keys))
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
				pp.models = append(pp.models, keyCounts{})
			}
			pp.models[st.ModelIndex].id = st.Model
		}
	}
	return pc
}

// Count records one attempt's outcome. A failure counts only when it
// says something about the target: not when the caller went away or ran
// out of time, not for a request the provider refused for what it asked
// (request_rejected), not for an answer the classifier did not recognise.
// A nil receiver (reports off) counts nothing.
func (pc *Counters) Count(step *route.Step, keyIndex int, out hold.Outcome, latency time.Duration) {
	if pc == nil {
		return
	}
	p := &pc.providers[step.Provider.Index]
	k := &p.keys[keyIndex]
	var m *keyCounts // nil for an unlisted model: counted by key only
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

// Publisher is what a passive report is sent through (*nats.Conn).
type Publisher interface {
	IsConnected() bool
	Publish(subject string, data []byte) error
}

// Flush takes the counts since the previous flush and publishes one
// report per provider that has any. A report that cannot be sent (NATS
// down) is dropped: its counts are lost, never retried into a later
// interval.
func (pc *Counters) Flush(pub Publisher, instance string, now time.Time, interval time.Duration) (sent, dropped int) {
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
func takeCounts(ks []keyCounts) map[string]health.PassiveCounts {
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

// Pending is what provider p's keys counted since the last Flush (for
// tests: Flush takes them).
func (pc *Counters) Pending(p int) (success, failure uint64) {
	for i := range pc.providers[p].keys {
		k := &pc.providers[p].keys[i]
		success, failure = success+k.success.Load(), failure+k.failure.Load()
	}
	return success, failure
}
