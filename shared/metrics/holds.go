// Package metrics holds the Prometheus collectors every Switchyard service
// exports: the hold engine's state (holds by class, scope and state;
// circuit breaker states), read at scrape time.
package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard.dev/shared/hold"
)

// HoldSource is what the hold collector reads: *hold.Engine.
type HoldSource interface {
	Holds() []hold.Record
	BreakerStates() map[string]string
}

var _ HoldSource = (*hold.Engine)(nil)

// HoldCollector exports a hold engine's table at scrape time:
//
//	switchyard_holds{class,scope,state}            records in the local table
//	switchyard_circuit_breaker_state{provider,model} 0 closed, 1 half-open, 2 open
//
// model is "" for a provider-wide breaker.
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
		holds: prometheus.NewDesc("switchyard_holds",
			"Hold records in this process's table, by failure class, scope kind and state (held, probing, released: ramping back).",
			[]string{"class", "scope", "state"}, nil),
		breaker: prometheus.NewDesc("switchyard_circuit_breaker_state",
			"Circuit breaker state per provider (model is set for per-model breakers): 0 closed, 1 half-open, 2 open.",
			[]string{"provider", "model"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *HoldCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.holds
	ch <- c.breaker
}

// Collect implements prometheus.Collector.
func (c *HoldCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ class, scope, state string }
	counts := map[key]int{}
	for _, r := range c.src.Holds() {
		counts[key{r.Class.String(), string(r.Scope.Kind), string(r.State)}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.holds, prometheus.GaugeValue, float64(n), k.class, k.scope, k.state)
	}
	for name, state := range c.src.BreakerStates() {
		provider, model, _ := strings.Cut(name, "/")
		ch <- prometheus.MustNewConstMetric(c.breaker, prometheus.GaugeValue, BreakerValue(state), provider, model)
	}
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
