package proxy

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/usage"
)

// meter turns each routed request into one usage record: published to
// the SWITCHYARD_USAGE stream (when NATS and metering are on) and counted
// in Prometheus (tokens and cost by provider, model and client). The
// request path only fills a record and queues it: nothing waits on NATS.
type meter struct {
	pub    *usagePublisher // nil: records are not published
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
		m.pub = newUsagePublisher(nc, cfg.Metering.Buffer, reg, log)
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
		m.pub.add(rec)
	}
}

// usagePublisher publishes usage records to the SWITCHYARD_USAGE stream
// from a bounded queue, with JetStream acknowledgements: a record that was
// not acknowledged is published again (the stream's duplicate window on
// the request id keeps it once). While NATS does not take records they
// wait in the queue; when the queue is full new records are dropped and
// counted.
type usagePublisher struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	log   *slog.Logger
	queue chan *usage.Record // pointers: a full buffer of 100,000 values would hold 30 MiB
	// unsent are messages not acknowledged when the publisher stopped,
	// for the drain (the run goroutine's own).
	unsent []usageMsg
	// msgID makes each message's JetStream id (idPrefix, then a count):
	// the stream drops a repeated id (a retry whose first send landed),
	// so an id never comes from a caller (a request id it chose, sent
	// again and again, kept one message in ten minutes).
	idPrefix string
	msgSeq   atomic.Uint64

	published, dropped prometheus.Counter
}

// usageBatch is how many records one round of publishing sends at most
// (as a message per provider and client); usageLinger how long the
// publisher lets a batch gather before sending it.
const (
	usageBatch  = 256
	usageLinger = 100 * time.Millisecond
)

func newUsagePublisher(nc *nats.Conn, buffer int, reg *prometheus.Registry, log *slog.Logger) *usagePublisher {
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(usageBatch),
		jetstream.WithPublishAsyncTimeout(5*time.Second))
	p := &usagePublisher{nc: nc, js: js, log: log.With("component", "metering"), queue: make(chan *usage.Record, buffer),
		idPrefix: strconv.FormatUint(rand.Uint64(), 36) + "-"}
	records := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNamespace, Name: "usage_records_total",
		Help: "Usage records acknowledged by the SWITCHYARD_USAGE stream (published), or dropped because metering.buffer was full.",
	}, []string{"outcome"})
	p.published, p.dropped = records.WithLabelValues("published"), records.WithLabelValues("dropped")
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metricNamespace, Name: "usage_records_pending",
		Help: "Usage records waiting to be published (at most metering.buffer).",
	}, func() float64 { return float64(len(p.queue)) })
	reg.MustRegister(records, pending)
	return p
}

// add queues a copy of the record, or drops it when the queue is full.
// It never blocks. (The copy is the record's one allocation: a proxy
// that does not publish builds its records on the stack.)
func (p *usagePublisher) add(rec *usage.Record) {
	c := *rec
	select {
	case p.queue <- &c:
	default:
		p.dropped.Inc()
	}
}

// run publishes queued records once the stream exists (bound) until ctx
// ends, then for up to two seconds more: what is left then is lost with
// the process, and logged.
func (p *usagePublisher) run(ctx context.Context, bound <-chan struct{}) {
	select {
	case <-bound:
	case <-ctx.Done():
		p.drain(bound)
		return
	}
	batch := make([]*usage.Record, 0, usageBatch)
	linger := time.NewTimer(usageLinger)
	linger.Stop()
	for {
		select {
		case <-ctx.Done():
			p.drain(bound)
			return
		case rec := <-p.queue:
			batch = append(batch[:0], rec)
		}
		// Let records gather for usageLinger without taking them one by
		// one (a receiver waiting on the queue would be woken by every
		// request: a context switch per request), then send all that
		// came, a batch at a time.
		linger.Reset(usageLinger)
		select {
		case <-linger.C:
		case <-ctx.Done():
			linger.Stop()
		}
		for {
			batch = p.fill(batch)
			p.deliver(ctx, batch)
			if len(p.queue) == 0 || ctx.Err() != nil {
				break
			}
			batch = batch[:0]
		}
	}
}

// fill adds what is queued to batch, up to usageBatch records.
func (p *usagePublisher) fill(batch []*usage.Record) []*usage.Record {
	for len(batch) < usageBatch {
		select {
		case rec := <-p.queue:
			batch = append(batch, rec)
		default:
			return batch
		}
	}
	return batch
}

// usageMsg is one message of the usage stream: the records of a batch
// that share a subject (provider and client), one JSON record per line.
// Its id (the stream's duplicate detection) is the publisher's own and
// kept across retries, so a message published again is stored once.
type usageMsg struct {
	subject, id string
	data        []byte
	records     int
}

// maxUsageMsg bounds a message's size, well under NATS's default maximum
// payload (1 MiB).
const maxUsageMsg = 256 << 10

// pack encodes batch as messages, one per subject (more when one would
// exceed maxUsageMsg), records in their order.
func (p *usagePublisher) pack(batch []*usage.Record) []usageMsg {
	var msgs []usageMsg
	open := map[string]int{} // subject -> index of its message being filled
	for _, rec := range batch {
		subject := usage.Subject(rec.Provider, rec.ClientID)
		i, ok := open[subject]
		if !ok || len(msgs[i].data) >= maxUsageMsg-4096 { // a record is well under 4 KiB
			msgs = append(msgs, usageMsg{subject: subject, id: p.idPrefix + strconv.FormatUint(p.msgSeq.Add(1), 36), data: make([]byte, 0, 4096)})
			i = len(msgs) - 1
			open[subject] = i
		}
		m := &msgs[i]
		if m.records > 0 {
			m.data = append(m.data, '\n')
		}
		m.data = rec.AppendJSON(m.data)
		m.records++
	}
	return msgs
}

// deliver publishes batch until every message is acknowledged or ctx
// ends (what is left then goes to the drain), backing off while NATS does
// not answer.
func (p *usagePublisher) deliver(ctx context.Context, batch []*usage.Record) {
	msgs := p.pack(batch)
	wait := 100 * time.Millisecond
	for len(msgs) > 0 {
		left := p.send(ctx, msgs)
		if len(left) == 0 {
			return
		}
		if len(left) == len(msgs) && wait == 100*time.Millisecond {
			p.log.Warn("usage records not acknowledged by the stream; keeping them and retrying",
				"records", countRecords(left), "queued", len(p.queue), "nats_connected", p.nc.IsConnected())
		}
		msgs = left
		select {
		case <-ctx.Done():
			p.unsent = append(p.unsent, msgs...)
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

func countRecords(msgs []usageMsg) int {
	n := 0
	for _, m := range msgs {
		n += m.records
	}
	return n
}

// send publishes msgs asynchronously and waits for the acknowledgements;
// it returns the messages that were not acknowledged (compacted into
// msgs).
func (p *usagePublisher) send(ctx context.Context, msgs []usageMsg) []usageMsg {
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i := range msgs {
		msg := &nats.Msg{Subject: msgs[i].subject, Data: msgs[i].data}
		if f, err := p.js.PublishMsgAsync(msg, jetstream.WithMsgID(msgs[i].id)); err == nil {
			futures[i] = f
		}
	}
	left := msgs[:0]
	for i, f := range futures {
		if f == nil {
			left = append(left, msgs[i])
			continue
		}
		select {
		case <-f.Ok():
			p.published.Add(float64(msgs[i].records))
		case <-f.Err():
			left = append(left, msgs[i])
		case <-ctx.Done():
			left = append(left, msgs[i])
		}
	}
	return left
}

// drain publishes what is left and queued for up to two seconds after
// shutdown.
func (p *usagePublisher) drain(bound <-chan struct{}) {
	select {
	case <-bound:
	default:
		if n := len(p.queue); n > 0 {
			p.log.Warn("usage records lost at shutdown: the stream was never reachable", "records", n)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	msgs := p.unsent
	p.unsent = nil
	for {
		if len(msgs) == 0 {
			if len(p.queue) == 0 {
				return
			}
			msgs = p.pack(p.fill(make([]*usage.Record, 0, usageBatch)))
		}
		if left := p.send(ctx, msgs); len(left) > 0 || ctx.Err() != nil {
			p.log.Warn("usage records lost at shutdown", "records", countRecords(left)+len(p.queue))
			return
		}
		msgs = nil
	}
}
