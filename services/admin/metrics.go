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
	sharedmetrics "switchyard.dev/shared/metrics"
)

// metrics are the admin service's Prometheus metrics, on its own registry.
// Besides its own HTTP traffic it exports the fleet's state as its hold
// table sees it (the collector of package shared/metrics, the same series
// and labels as the proxy's and the prober's: holds by class, scope and
// state; circuit breaker states by provider and model) and what the event
// subjects carry (events by kind, probe outcomes, the lag from an event's
// time to its arrival here).
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
		sharedmetrics.NewHoldCollector(s.engine),
		&natsCollector{s: s},
		fleetCollector{s: s},
		backlogCollector{w: s.backlog, rec: s.rec},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) handler() fiber.Handler {
	return adaptor.HTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
}

// middleware counts requests by route pattern (not by path: hold ids
// would make unbounded label values). Every label value is a string of
// its own (a route pattern, a method constant, a formatted status): fiber's
// strings point into the request buffer, reused after the handler.
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
	m.requests.WithLabelValues(route, methodLabel(c.Method()), strconv.Itoa(status)).Inc()
	return err
}

// methodLabel is the method as a constant string (fiber's is not safe to
// keep), "other" for a method the API does not use.
func methodLabel(method string) string {
	for _, m := range [...]string{fiber.MethodGet, fiber.MethodPost, fiber.MethodPut, fiber.MethodDelete,
		fiber.MethodHead, fiber.MethodOptions, fiber.MethodPatch} {
		if method == m {
			return m
		}
	}
	return "other"
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

// natsCollector exports whether the admin service reaches NATS, at scrape
// time.
type natsCollector struct{ s *Service }

var natsDesc = prometheus.NewDesc("switchyard_admin_nats_up",
	"1 while the admin service reaches NATS and its buckets are bound.", nil, nil)

func (n *natsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- natsDesc }

func (n *natsCollector) Collect(ch chan<- prometheus.Metric) {
	up := 0.0
	if n.s.natsUp() {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(natsDesc, prometheus.GaugeValue, up)
}
