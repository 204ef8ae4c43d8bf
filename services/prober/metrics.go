package prober

import (
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	sharedmetrics "switchyard.dev/shared/metrics"
)

// metrics are the prober's Prometheus metrics, on its own registry (GET
// /metrics): its checks, probes, discoveries, leases and passive reports,
// and its hold engine's table through the collector of package
// shared/metrics (the same series and labels as the proxy's and the admin
// service's).
type metrics struct {
	reg         *prometheus.Registry
	checks      *prometheus.CounterVec
	checkSecs   *prometheus.HistogramVec
	probes      *prometheus.CounterVec
	discoveries *prometheus.CounterVec
	leases      prometheus.Gauge
	passive     *prometheus.CounterVec
}

func newMetrics(holds sharedmetrics.HoldSource, nc *nats.Conn) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_prober_checks_total",
			Help: "Active checks by provider and outcome (ok, or the failure class).",
		}, []string{"provider", "outcome"}),
		checkSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_prober_check_duration_seconds",
			Help:    "Latency of active checks and probes, by provider.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"provider"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_prober_probes_total",
			Help: "Due holds settled by the prober, by hold class and check outcome (ok, or the failure class).",
		}, []string{"class", "outcome"}),
		discoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_prober_discoveries_total",
			Help: "Model discoveries by provider and outcome (ok or failed).",
		}, []string{"provider", "outcome"}),
		leases: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_prober_leases_held",
			Help: "Check leases this replica holds.",
		}),
		passive: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_prober_passive_reports_total",
			Help: "Passive reports received from proxies, by outcome (ok, invalid, unknown_provider).",
		}, []string{"outcome"}),
	}
	m.reg.MustRegister(m.checks, m.checkSecs, m.probes, m.discoveries, m.leases, m.passive,
		sharedmetrics.NewHoldCollector(holds),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if nc != nil {
		m.reg.MustRegister(sharedmetrics.NewNATSUp("prober", nc))
	}
	return m
}

func outcomeOf(r result) string {
	if r.ok {
		return "ok"
	}
	return r.res.Class.String()
}
