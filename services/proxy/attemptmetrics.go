package proxy

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

)

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
