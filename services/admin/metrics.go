package admin

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
)

// metrics are the admin service's Prometheus metrics, on its own registry.
// Besides its own HTTP traffic it exports the fleet's state as its hold
// table sees it (holds by class, scope and state; circuit breaker states)
// and what the event subjects carry (events by kind, probe outcomes, the
// lag from an event's time to its arrival here).
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	streams   prometheus.Gauge
	rotations *prometheus.CounterVec
	events    *prometheus.CounterVec
	probes    *prometheus.CounterVec
	lag       *prometheus.HistogramVec
}

func newMetrics(s *Service) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_admin_http_requests_total",
			Help: "Admin API requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_admin_event_streams",
			Help: "Open /admin/events streams.",
		}),
		rotations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_credential_rotations_total",
			Help: "Secrets rotated through this admin instance, by provider.",
		}, []string{"provider"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_events_total",
			Help: "Events seen on switchyard.events.>, by kind.",
		}, []string{"kind"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_probe_outcomes_total",
			Help: "Probe outcomes seen on the event subjects, by provider and outcome (released, escalated, same_rung, settled).",
		}, []string{"provider", "outcome"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_hold_propagation_lag_seconds",
			Help:    "Time from an event's recorded time (the writer's clock) to its arrival at the admin service, by kind.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"kind"}),
	}
	m.reg.MustRegister(m.requests, m.streams, m.rotations, m.events, m.probes, m.lag,
		&fleetCollector{s: s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) handler() fiber.Handler {
	return adaptor.HTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
}

// middleware counts requests by route pattern (not by path: hold ids
// would make unbounded label values).
func (m *metrics) middleware(c *fiber.Ctx) error {
	err := c.Next()
	status := c.Response().StatusCode()
	if err != nil {
		if fe, ok := err.(*fiber.Error); ok {
			status = fe.Code
		}
	}
	route := c.Route().Path
	if status == fiber.StatusNotFound && (route == "/" && c.Path() != "/" || route == "/admin") {
		route = "unmatched"
	}
	m.requests.WithLabelValues(route, c.Method(), strconv.Itoa(status)).Inc()
	return err
}

// followEvents feeds the event metrics from a core subscription on
// switchyard.events.> until ctx ends.
func (m *metrics) followEvents(ctx context.Context, nc *nats.Conn) {
	sub, err := nc.Subscribe(bus.EventsSubjects, func(msg *nats.Msg) {
		var ev hold.Event
		if json.Unmarshal(msg.Data, &ev) != nil {
			return
		}
		m.events.WithLabelValues(string(ev.Kind)).Inc()
		if !ev.At.IsZero() {
			if d := time.Since(ev.At); d >= 0 {
				m.lag.WithLabelValues(string(ev.Kind)).Observe(d.Seconds())
			}
		}
		if ev.Kind == hold.EventProbe && ev.Outcome != "" {
			m.probes.WithLabelValues(ev.Scope.Provider, ev.Outcome).Inc()
		}
	})
	if err != nil {
		return
	}
	<-ctx.Done()
	_ = sub.Unsubscribe()
}

// fleetCollector exports the hold table and breaker states at scrape time.
type fleetCollector struct{ s *Service }

var (
	holdsDesc = prometheus.NewDesc("switchyard_holds",
		"Hold records in the fleet's hold table, by class, scope kind and state.",
		[]string{"class", "scope", "state"}, nil)
	breakerDesc = prometheus.NewDesc("switchyard_circuit_breaker_state",
		"Circuit breaker state per provider (or provider/model): 0 closed, 1 half-open, 2 open.",
		[]string{"provider"}, nil)
	natsDesc = prometheus.NewDesc("switchyard_admin_nats_up",
		"1 while the admin service reaches NATS and its buckets are bound.", nil, nil)
)

func (f *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- holdsDesc
	ch <- breakerDesc
	ch <- natsDesc
}

func (f *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	type k struct{ class, scope, state string }
	counts := map[k]int{}
	for _, r := range f.s.engine.Holds() {
		counts[k{r.Class.String(), string(r.Scope.Kind), string(r.State)}]++
	}
	for key, n := range counts {
		ch <- prometheus.MustNewConstMetric(holdsDesc, prometheus.GaugeValue, float64(n), key.class, key.scope, key.state)
	}
	for name, st := range f.s.engine.BreakerStates() {
		v := 0.0
		switch st {
		case "half-open":
			v = 1
		case "open":
			v = 2
		}
		ch <- prometheus.MustNewConstMetric(breakerDesc, prometheus.GaugeValue, v, name)
	}
	up := 0.0
	if f.s.natsUp() {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(natsDesc, prometheus.GaugeValue, up)
}
