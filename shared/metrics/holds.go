// Package metrics holds the Prometheus collectors every Switchyard service
// exports: the hold engine's state (holds by class, scope and state;
// circuit breaker states), read at scrape time. The proxy, the prober and
// the admin service each register one HoldCollector over their own engine,
// so the series have the same names, help and labels everywhere.
package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard.dev/shared/hold"
)

// The metric names and labels of HoldCollector. They are a documented
// contract (the services' README files list them): change them only with
// every README.
const (
	HoldsName   = "switchyard_holds"
	BreakerName = "switchyard_circuit_breaker_state"
)

// HoldsLabels and BreakerLabels are the label names of the two series, in
// order.
var (
	HoldsLabels   = []string{"class", "scope", "state"}
	BreakerLabels = []string{"provider", "model"}
)

// HoldSource is what the hold collector reads: *hold.Engine.
type HoldSource interface {
	HoldCounts() map[hold.Group]int
	BreakerStates() map[string]string
}

var _ HoldSource = (*hold.Engine)(nil)

// HoldCollector exports a hold engine's table at scrape time:
//
//	switchyard_holds{class,scope,state}               records in the local table
//	switchyard_circuit_breaker_state{provider,model}  0 closed, 1 half-open, 2 open
//
// class is the failure class, scope the scope kind (provider,
// provider+model, key, key+model) and state held, probing or released;
// model is "" for a provider-wide breaker. Label values are provider and
// model names, classes, scope kinds and states: never a key id, a
// fingerprint, a reason or a secret. The collector keeps no strings
// between scrapes, and a scrape costs the number of groups, not of holds
// (the engine keeps the counts as records come and go).
type HoldCollector struct {
	src     HoldSource
	holds   *prometheus.Desc
	breaker *prometheus.Desc
}

var _ prometheus.Collector = (*HoldCollector)(nil)

// NewHoldCollector returns a collector over src.
func NewHoldCollector(src HoldSource) *HoldCollector {
	return &HoldCollector{
		src: src,
		holds: prometheus.NewDesc(HoldsName,
			"Hold records in this process's table, by failure class, scope kind and state (held, probing, released: ramping back).",
			HoldsLabels, nil),
		breaker: prometheus.NewDesc(BreakerName,
			"Circuit breaker state per provider (model is set for per-model breakers, empty for a provider-wide one): 0 closed, 1 half-open, 2 open.",
			BreakerLabels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *HoldCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.holds
	ch <- c.breaker
}

// Collect implements prometheus.Collector. A label value Prometheus
// refuses (not UTF-8: a record written by something else than Switchyard)
// drops that one series instead of failing the scrape.
func (c *HoldCollector) Collect(ch chan<- prometheus.Metric) {
	for g, n := range c.src.HoldCounts() {
		if m, err := prometheus.NewConstMetric(c.holds, prometheus.GaugeValue, float64(n), g.Class.String(), string(g.Kind), string(g.State)); err == nil {
			ch <- m
		}
	}
	for name, state := range c.src.BreakerStates() {
		provider, model := SplitBreakerName(name)
		if m, err := prometheus.NewConstMetric(c.breaker, prometheus.GaugeValue, BreakerValue(state), provider, model); err == nil {
			ch <- m
		}
	}
}

// SplitBreakerName splits a name of hold.Engine.BreakerStates, "provider"
// or "provider/model", into its labels. Provider names never contain '/'
// (config validation); model names may ("meta-llama/Llama-3"), so the
// first '/' separates them.
func SplitBreakerName(name string) (provider, model string) {
	provider, model, _ = strings.Cut(name, "/")
	return provider, model
}

// BreakerValue maps a breaker state name to the gauge value: 0 closed,
// 1 half-open, 2 open.
func BreakerValue(state string) float64 {
	switch state {
	case "open":
		return 2
	case "half-open":
		return 1
	}
	return 0
}
