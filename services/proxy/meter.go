package proxy

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"switchyard.dev/services/proxy/internal/usagepub"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/usage"
)

// meter turns each routed request into one usage record: published to
// the SWITCHYARD_USAGE stream (when NATS and metering are on) and counted
// in Prometheus (tokens and cost by provider, model and client). The
// request path only fills a record and queues it: nothing waits on NATS.
type meter struct {
	pub    *usagepub.Publisher // nil: records are not published
	tokens *prometheus.CounterVec
	cost   *prometheus.CounterVec
	// unpriced counts requests whose model has no price (cost unknown).
	unpriced *prometheus.CounterVec
	// The series in use, one lookup a request: by provider, model and
	// client.
	series sync.Map // meterLabels -> *meterSeries
}

// meterLabels are the label values the meter's series share (client is
// not one of unpriced's).
type meterLabels struct{ provider, model, client string }

// meterSeries are the series of one provider, model and client, each made
// on first use (a kind of token never reported has no series).
type meterSeries struct {
	tokens   [len(tokenKinds)]atomic.Pointer[prometheus.Counter]
	cost     atomic.Pointer[prometheus.Counter]
	unpriced atomic.Pointer[prometheus.Counter]
}

// counter returns *p, made by with on first use.
func counter(p *atomic.Pointer[prometheus.Counter], with func() prometheus.Counter) prometheus.Counter {
	if c := p.Load(); c != nil {
		return *c
	}
	c := with()
	p.CompareAndSwap(nil, &c) // a racing maker got the same child of the vector
	return c
}

// tokenKinds are the token categories of switchyard_tokens_total.
var tokenKinds = [...]string{"input", "cached_input", "cache_write", "output", "reasoning"}

func newMeter(cfg *config.Config, reg *prometheus.Registry, nc *nats.Conn, log *slog.Logger) *meter {
	m := &meter{}
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNamespace, Name: "tokens_total",
		Help: "Tokens the providers reported (or the gateway estimated), by provider, provider model (* for unlisted models and passthrough), client key id (none) and kind: input (not cached), cached_input, cache_write, output (not reasoning), reasoning.",
	}, []string{"provider", "model", "client", "kind"})
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNamespace, Name: "cost_usd_total",
		Help: "Cost in USD of the tokens above at the price table's prices, by provider, provider model (* for unlisted models and passthrough) and client key id.",
	}, []string{"provider", "model", "client"})
	m.unpriced = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNamespace, Name: "unpriced_requests_total",
		Help: "Requests served by a model without a price (their cost is unknown, not 0), by provider and provider model (* for unlisted models and passthrough).",
	}, []string{"provider", "model"})
	reg.MustRegister(m.tokens, m.cost, m.unpriced)
	if nc != nil && cfg.Metering.IsEnabled() {
		m.pub = usagepub.New(nc, cfg.Metering.Buffer, reg, log)
	}
	return m
}

// priceEntries converts the configured prices to price table entries.
func priceEntries(prices []config.Price) []usage.Entry {
	rate := func(p *float64) usage.Rate {
		if p == nil {
			return usage.Rate{}
		}
		return usage.Given(*p)
	}
	val := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	out := make([]usage.Entry, 0, len(prices))
	for _, p := range prices {
		out = append(out, usage.Entry{Provider: p.Provider, ProviderType: p.ProviderType, Model: p.Model,
			Price: usage.Price{Input: val(p.Input), Output: val(p.Output), CachedInput: rate(p.CachedInput),
				CacheWrite: rate(p.CacheWrite), Reasoning: rate(p.Reasoning)}})
	}
	return out
}

// unlistedModelLabel is the model label of the meter's series for a model
// a provider serves unlisted (allow_unlisted_models) and for passthrough
// requests (whose "model" is the path): callers name those, and a label
// per name would grow without bound.
const unlistedModelLabel = "*"

// observe counts a request's tokens and cost in the series of model (the
// label value of rec.Model) and queues its usage record.
func (m *meter) observe(rec *usage.Record, model string) {
	if rec.Provider != "" && rec.Attempts > 0 {
		client := rec.ClientID
		if client == "" {
			client = providerNone
		}
		k := meterLabels{rec.Provider, model, client}
		ms := series(&m.series, k, func() *meterSeries { return new(meterSeries) })
		t := rec.Tokens
		for i, n := range [...]int64{t.Input, t.CachedInput, t.CacheWrite, t.Output, t.Reasoning} {
			if n > 0 {
				counter(&ms.tokens[i], func() prometheus.Counter {
					return m.tokens.WithLabelValues(k.provider, k.model, k.client, tokenKinds[i])
				}).Add(float64(n))
			}
		}
		switch {
		case rec.CostUSD != nil:
			counter(&ms.cost, func() prometheus.Counter { return m.cost.WithLabelValues(k.provider, k.model, k.client) }).Add(*rec.CostUSD)
		case t != (usage.Tokens{}):
			counter(&ms.unpriced, func() prometheus.Counter { return m.unpriced.WithLabelValues(k.provider, k.model) }).Inc()
		}
	}
	if m.pub != nil {
		m.pub.Add(rec)
	}
}
