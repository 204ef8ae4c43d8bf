// Package usagepub publishes the proxy's usage records to the
// SWITCHYARD_USAGE stream: batched per provider and client, acknowledged,
// sent again until the stream has them, from a bounded queue that never
// blocks the request path.
package usagepub

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"switchyard.dev/shared/usage"
)

// Publisher publishes usage records to the SWITCHYARD_USAGE stream
// from a bounded queue, with JetStream acknowledgements: a record that was
// not acknowledged is published again (the stream's duplicate window on
// the request id keeps it once). While NATS does not take records they
// wait in the queue; when the queue is full new records are dropped and
// counted.
type Publisher struct {
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

func New(nc *nats.Conn, buffer int, reg *prometheus.Registry, log *slog.Logger) *Publisher {
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(usageBatch),
		jetstream.WithPublishAsyncTimeout(5*time.Second))
	p := &Publisher{nc: nc, js: js, log: log.With("component", "metering"), queue: make(chan *usage.Record, buffer),
		idPrefix: strconv.FormatUint(rand.Uint64(), 36) + "-"}
	records := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Name: "usage_records_total",
		Help: "Usage records acknowledged by the SWITCHYARD_USAGE stream (published), or dropped because metering.buffer was full.",
	}, []string{"outcome"})
	p.published, p.dropped = records.WithLabelValues("published"), records.WithLabelValues("dropped")
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "switchyard", Name: "usage_records_pending",
		Help: "Usage records waiting to be published (at most metering.buffer).",
	}, func() float64 { return float64(len(p.queue)) })
	reg.MustRegister(records, pending)
	return p
}

// Add queues a copy of the record, or drops it when the queue is full.
// It never blocks. (The copy is the record's one allocation: a proxy
// that does not publish builds its records on the stack.)
func (p *Publisher) Add(rec *usage.Record) {
	c := *rec
	select {
	case p.queue <- &c:
	default:
		p.dropped.Inc()
	}
}

// Run publishes queued records once the stream exists (bound) until ctx
// ends, then for up to two seconds more: what is left then is lost with
// the process, and logged.
func (p *Publisher) Run(ctx context.Context, bound <-chan struct{}) {
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
func (p *Publisher) fill(batch []*usage.Record) []*usage.Record {
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
func (p *Publisher) pack(batch []*usage.Record) []usageMsg {
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
func (p *Publisher) deliver(ctx context.Context, batch []*usage.Record) {
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
func (p *Publisher) send(ctx context.Context, msgs []usageMsg) []usageMsg {
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
func (p *Publisher) drain(bound <-chan struct{}) {
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

// Published is how many records the stream acknowledged (its
// switchyard_usage_records_total{outcome="published"}).
func (p *Publisher) Published() float64 { return value(p.published) }

// value is a counter's value.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
