package proxy

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"switchyard.dev/services/proxy/internal/cache"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/metrics"
)

// Outcome classes of switchyard_requests_total besides the failure
// classes of an upstream's error: served, refused by the gateway itself
// (bad input, authentication, overload), a stream cut after its first
// byte, no target available (all held or none usable), and a caller that
// went away before the answer.
const (
	classOK               = "ok"
	classRejected         = "rejected"
	classStreamIncomplete = "stream_incomplete"
	classUnavailable      = "unavailable"
	classCallerGone       = "caller_gone"
	classLimited          = "plan_limited" // refused by the caller's plan (429)
)

const (
	modelUnknown    = debug.ModelUnknown
	providerNone    = "none"
	metricNamespace = "switchyard"
)

// proxyMetrics are one proxy's Prometheus series, on a registry of its own
// (never the global default), so several proxies can live in one process.
type proxyMetrics struct {
	reg      *prometheus.Registry
	guards   *prometheus.CounterVec // guardrail decisions
	guardErr *prometheus.CounterVec // guardrail checks that failed (moderation, webhook)
	// the response cache: requests by result, answers by what became of them
	cacheReqs, cacheStores *prometheus.CounterVec
	requests               *prometheus.CounterVec
	attempts               prometheus.Histogram
	duration               *prometheus.HistogramVec // by endpoint
	latency                *prometheus.HistogramVec
	ttft                   *prometheus.HistogramVec
	// propagation: from a hold's recorded_at (by another instance) to
	// this proxy applying it.
	propagation prometheus.Histogram
	// passive reports published and dropped (NATS down)
	passiveSent, passiveDropped prometheus.Counter
	models                      sync.Map // resolved model name -> label value (a string of its own)
	statuses                    [600]string
	// The series in use, by label values: a vector's own lookup hashes
	// every value byte by byte and takes a lock on each call; these are
	// one map read. Their label values are the vectors': bounded by the
	// configuration (caller-named models and paths share one label).
	requestSeries  sync.Map // requestLabels -> prometheus.Counter
	durationSeries sync.Map // endpoint name -> prometheus.Observer
	attempt        *attemptMetrics
}

// requestLabels are switchyard_requests_total's label values.
type requestLabels struct{ endpoint, model, provider, status, class string }

// series returns the vector's child for key, made once by with.
func series[K comparable, V any](m *sync.Map, key K, with func() V) V {
	if v, ok := m.Load(key); ok {
		return v.(V)
	}
	v, _ := m.LoadOrStore(key, with())
	return v.(V)
}

func newProxyMetrics(s *Service) *proxyMetrics {
	m := &proxyMetrics{reg: prometheus.NewRegistry()}
	for i := range m.statuses {
		m.statuses[i] = strconv.Itoa(i)
	}
	latencyBuckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNamespace, Name: "requests_total",
		Help: "Inference requests by endpoint, gateway model the caller asked for (model and requested_model, the same value; unknown when it did not resolve), provider that answered (none), HTTP status and outcome class.",
	}, []string{"endpoint", "model", "requested_model", "provider", "status", "class"})
	m.attempts = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metricNamespace, Name: "request_attempts",
		Help:    "Upstream attempts per request whose model resolved.",
		Buckets: []float64{0, 1, 2, 3, 4, 5, 6, 8, 10},
	})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricNamespace, Name: "request_duration_seconds",
		Help:    "Time from a request's arrival to the end of its answer (a stream's last event), by endpoint.",
		Buckets: latencyBuckets,
	}, []string{"endpoint"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricNamespace, Name: "upstream_latency_seconds",
		Help:    "Time from sending an attempt upstream to its response: the whole body for a plain response, the headers for a stream.",
		Buckets: latencyBuckets,
	}, []string{"provider"})
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: metricNamespace, Name: "time_to_first_token_seconds",
		Help:    "Time from sending a streaming attempt upstream to its first content event.",
		Buckets: latencyBuckets,
	}, []string{"provider"})
	m.propagation = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: metricNamespace, Name: "hold_propagation_seconds",
		Help:    "Time from a hold record written by another instance (its recorded_at) to this proxy applying it from the KV watch.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .1, 1},
	})
	m.guards = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNamespace, Name: "guardrail_decisions_total",
		Help: "Guardrail decisions on requests, by guardrail, stage (input, output) and action taken (pass, block, redact, warn).",
	}, []string{"guardrail", "stage", "action"})
	m.guardErr = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNamespace, Name: "guardrail_check_errors_total",
		Help: "Guardrail checks that call out (check: moderation, webhook) and failed or answered late: the guardrail's on_error decided.",
	}, []string{"guardrail", "check"})
	m.cacheReqs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNamespace, Name: "cache_requests_total",
		Help: "Requests of routes with a cache policy, by result: hit (answered from the cache), miss (sent upstream), bypass (the caller's no-store, a stream, the bucket unreadable).",
	}, []string{"result"})
	m.cacheStores = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNamespace, Name: "cache_stores_total",
		Help: "Answers of requests that missed the cache, by what became of them: stored, memory_only (the bucket's queue was full), too_large (over cache.max_entry_bytes), tool_calls (not kept).",
	}, []string{"result"})
	m.reg.MustRegister(m.guards, m.guardErr, m.cacheReqs, m.cacheStores)
	passive := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNamespace, Name: "passive_reports_total",
		Help: "Passive reports (attempt outcomes per target, for the prober's health records) published on switchyard.passive.<provider>, or dropped while NATS was down.",
	}, []string{"outcome"})
	m.passiveSent, m.passiveDropped = passive.WithLabelValues("sent"), passive.WithLabelValues("dropped")
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metricNamespace, Name: "requests_in_flight",
		Help: "Inference requests being served (streams until their last event).",
	}, func() float64 { return float64(s.life.inFlight.Load()) })
	m.reg.MustRegister(m.requests, m.attempts, m.duration, m.latency, m.ttft, m.propagation, passive, inFlight,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(metrics.NewHoldCollector(s.engine), metrics.NewHeadroomCollector(s.room))
	m.attempt = newAttemptMetrics(m.reg, latencyBuckets)
	return m
}

// handler serves GET /metrics.
func (m *proxyMetrics) handler() fiber.Handler {
	return adaptor.HTTPHandler(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}

// modelLabel is the label value of a model name that resolved: the set is
// bounded by the configuration (models, aliases, chains, provider/model).
func (m *proxyMetrics) modelLabel(model string) string {
	if v, ok := m.models.Load(model); ok {
		return v.(string)
	}
	v, _ := m.models.LoadOrStore(strings.Clone(model), strings.Clone(model))
	return v.(string)
}

func (m *proxyMetrics) request(r *request, status int) {
	model, provider, class := r.resolved, r.by.provider, r.outcomeClass(status)
	if model == "" {
		model = modelUnknown
	} else {
		m.attempts.Observe(float64(r.tally.attempts))
	}
	if provider == "" {
		provider = providerNone
	}
	st := "other"
	if status >= 0 && status < len(m.statuses) {
		st = m.statuses[status]
	}
	k := requestLabels{r.ep.name, model, provider, st, class}
	series(&m.requestSeries, k, func() prometheus.Counter {
		return m.requests.WithLabelValues(k.endpoint, k.model, k.model, k.provider, k.status, k.class)
	}).Inc()
	series(&m.durationSeries, r.ep.name, func() prometheus.Observer {
		return m.duration.WithLabelValues(r.ep.name)
	}).Observe(time.Since(r.started).Seconds())
}

// providerSeries are a provider's upstream latency and time-to-first-token
// series, which its upstream keeps (no lookup per request).
func (m *proxyMetrics) providerSeries(provider string) (latency, ttft prometheus.Observer) {
	return m.latency.WithLabelValues(provider), m.ttft.WithLabelValues(provider)
}

func (m *proxyMetrics) passiveReports(sent, dropped int) {
	m.passiveSent.Add(float64(sent))
	m.passiveDropped.Add(float64(dropped))
}

// holdApplied observes the propagation lag of a hold another instance
// recorded (called by the hold engine as it applies the record).
func (s *Service) holdApplied(rec hold.Record) {
	if s.metrics == nil || rec.RecordedAt.IsZero() {
		return
	}
	s.metrics.propagation.Observe(max(0, time.Since(rec.RecordedAt).Seconds()))
}

// guardrail counts one guardrail decision (guardrail names are the
// configuration's: a bounded set).
func (m *proxyMetrics) guardrail(name, stage, verdict string) {
	m.guards.WithLabelValues(name, stage, verdict).Inc()
}

// cacheResult counts what the cache did for a request (hit, miss,
// bypass).
func (m *proxyMetrics) cacheResult(result string) {
	m.cacheReqs.WithLabelValues(result).Inc()
}

// cacheStored counts what became of an answer that missed: stored,
// memory_only (the bucket's queue was full), too_large, tool_calls.
func (m *proxyMetrics) cacheStored(result string) {
	m.cacheStores.WithLabelValues(result).Inc()
}

// cacheMemory exports the bytes of the cache's memory.
func (m *proxyMetrics) cacheMemory(mem *cache.Memory) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metricNamespace, Name: "cache_memory_bytes",
		Help: "Bytes of cached answers this proxy keeps in memory, in front of the switchyard_cache bucket.",
	}, func() float64 { return float64(mem.Bytes()) }))
}

// guardrailCheckError counts a failed remote check of a guardrail.
func (m *proxyMetrics) guardrailCheckError(name, check string) {
	m.guardErr.WithLabelValues(name, check).Inc()
}

// Attempt metrics: every upstream attempt, served or failed, counted by the
// target it went to, so that failures a failover hid from the caller (and
// from switchyard_requests_total, which names the provider that finally
// answered) are visible per provider and key.

// Outcomes of an attempt: the target answered, it failed, or it ended
// because the caller left, its deadline passed or the proxy stopped (not
// the target's fault).
const (
	outcomeServed    = "ok"
	outcomeFailed    = "failed"
	outcomeCancelled = "cancelled"
)

// keyNone is the key label of a provider without keys.
const keyNone = "none"

// attemptLabels are switchyard_upstream_attempts_total's label values.
type attemptLabels struct{ provider, key, model, class, outcome string }

// durationLabels are switchyard_upstream_attempt_duration_seconds'.
type durationLabels struct{ provider, outcome string }

// attemptMetrics are the two attempt series and their children in use.
type attemptMetrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	totals   sync.Map // attemptLabels -> prometheus.Counter
	durs     sync.Map // durationLabels -> prometheus.Observer
}

func newAttemptMetrics(reg prometheus.Registerer, buckets []float64) *attemptMetrics {
	m := &attemptMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricNamespace, Name: "upstream_attempts_total",
			Help: "Upstream attempts by provider, key id, model (the provider's name of a configured model, as in switchyard_tokens_total; * for unlisted models and passthrough), class (ok, or the failure class) and outcome (ok, failed, cancelled).",
		}, []string{"provider", "key", "model", "class", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricNamespace, Name: "upstream_attempt_duration_seconds",
			Help:    "Time from an attempt's start to its end (a stream's headers when it is served), by provider and outcome.",
			Buckets: buckets,
		}, []string{"provider", "outcome"}),
	}
	reg.MustRegister(m.total, m.duration)
	return m
}

// ended counts the attempt a ended: ae nil when it was served; cancelled
// when it failed for the caller's or the proxy's reasons.
func (m *attemptMetrics) ended(a *attempt, ae *attemptError, cancelled bool) {
	if a.step == nil || a.step.Provider == nil {
		return
	}
	l := attemptLabels{provider: a.step.Provider.Name, key: keyNone, model: unlistedModelLabel, class: classOK, outcome: outcomeServed}
	if a.key != nil && a.key.ID != "" {
		l.key = a.key.ID
	}
	if a.step.Model != "" && a.step.ModelIndex >= 0 {
		l.model = a.step.Upstream // the provider's name of a configured model: bounded
	}
	if ae != nil {
		l.class, l.outcome = ae.result.Class.String(), outcomeFailed
		if cancelled {
			l.outcome = outcomeCancelled
		}
	}
	series(&m.totals, l, func() prometheus.Counter {
		return m.total.WithLabelValues(l.provider, l.key, l.model, l.class, l.outcome)
	}).Inc()
	d := durationLabels{l.provider, l.outcome}
	series(&m.durs, d, func() prometheus.Observer {
		return m.duration.WithLabelValues(d.provider, d.outcome)
	}).Observe(time.Since(a.begun).Seconds())
}
