package proxy

// The bundle worker: the bounded queue finished requests wait in, the
// sampling that decides which bundles are kept, and their publication to
// SWITCHYARD_DEBUG and the trace exporter.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/hold"
)

// bundler queues finished requests and publishes their bundles.
type bundler struct {
	enabled  bool    // bundles are published
	share    float64 // of successes kept
	ch       chan *request
	js       jetstream.JetStream
	instance string
	engine   *hold.Engine
	// export hands every request's bundle to the trace exporter (nil:
	// tracing off).
	export  func(*debug.Bundle)
	log     *slog.Logger
	results *prometheus.CounterVec
	pending atomic.Int64
}

func newBundler(cfg *config.Config, reg *prometheus.Registry, nc *nats.Conn, instance string, engine *hold.Engine,
	export func(*debug.Bundle), log *slog.Logger) *bundler {
	b := &bundler{enabled: cfg.Debug.IsEnabled() && nc != nil, share: cfg.Debug.SuccessShare(), instance: instance,
		engine: engine, export: export, log: log.With("component", "debug")}
	b.results = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricNamespace, Name: "debug_bundles_total",
		Help: "Request debug bundles, by result: published, dropped (the queue was full), failed (NATS refused it), sampled_out (a success not sampled)."},
		[]string{"result"})
	reg.MustRegister(b.results)
	if !b.enabled && export == nil {
		return b
	}
	b.ch = make(chan *request, max(cfg.Debug.Buffer, 1))
	if b.enabled {
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256),
			jetstream.WithPublishAsyncTimeout(bundleAckTimeout),
			jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
				b.results.WithLabelValues("failed").Inc()
				b.log.Debug("bundle not stored", "err", err)
			}))
		if err != nil {
			b.enabled = false
		} else {
			b.js = js
		}
	}
	return b
}

// bundleAckTimeout is how long a published bundle's acknowledgement may
// take before it counts as failed. Without it an acknowledgement that never
// comes (the stream leaderless while the connection stays up) would keep
// its place among the 256 pending for ever: once they are all taken, every
// bundle would wait and fail, and the trace export behind it would slow to
// a crawl.
var bundleAckTimeout = 5 * time.Second

// on reports whether requests note a trace.
func (b *bundler) on() bool { return b.ch != nil }

// done queues a finished request (never blocks: a full queue drops it).
func (b *bundler) done(r *request) {
	if b.ch == nil {
		return
	}
	t := &r.trace
	t.sampled = b.sample(r)
	if t.respBody != nil { // still the handler's: hash it now or never
		if t.sampled != "" || b.export != nil {
			t.respSum = sha256.Sum256(t.respBody)
			t.respPre = sha256.Sum256(t.respBody[:min(len(t.respBody), debug.PrefixBytes)])
		}
		t.respBody = nil
	}
	if t.sampled == "" && b.export == nil {
		b.results.WithLabelValues("sampled_out").Inc() // nothing to build: not queued
		return
	}
	select {
	case b.ch <- r:
		b.pending.Add(1)
	default:
		b.results.WithLabelValues("dropped").Inc()
	}
}

// bundleLinger is how long finished requests wait in the queue before the
// worker builds and publishes their bundles, all at once: the worker is
// not woken by every request (a context switch each), and the bundles of a
// linger go out in a few writes, their acknowledgements come back in a few
// reads (a write and a read per bundle cost the proxy and the NATS server
// more than building it).
const bundleLinger = 50 * time.Millisecond

// run builds and publishes bundles every bundleLinger until ctx ends, then
// those still queued.
func (b *bundler) run(ctx context.Context) {
	if b.ch == nil {
		return
	}
	t := time.NewTicker(bundleLinger)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			b.drain()
		case <-ctx.Done():
			b.drain()
			if b.js != nil {
				select {
				case <-b.js.PublishAsyncComplete():
				case <-time.After(2 * time.Second):
				}
			}
			return
		}
	}
}

// drain handles the requests queued now.
func (b *bundler) drain() {
	for n := len(b.ch); n > 0; n-- {
		b.handle(<-b.ch)
	}
}

// sample is why a finished request's bundle is kept ("" when it is not):
// asked for, a failure, retried, or the share of other successes.
func (b *bundler) sample(r *request) string {
	switch {
	case !b.enabled:
		return ""
	case r.trace.forced:
		return "forced"
	case r.class == classLimited:
		// Refused by the caller's own plan: a client retrying against
		// its limit would write a bundle per refusal and push every other
		// request's out of the stream (the counters and the usage
		// records say it all).
		return ""
	case r.class == classRejected && r.tally.attempts == 0:
		// Refused before any upstream attempt (a malformed body, an
		// unknown or forbidden model): the answer
		// says why, and a caller looping on its mistake would flush
		// everyone else's bundles out of the stream.
		return ""
	case debug.OutcomeOf(r.trace.status, r.class == classStreamIncomplete) != debug.OutcomeOK:
		return "failure"
	case len(r.trace.log) > 1:
		return "retried" // served, but not at the first attempt
	case b.share > 0 && rand.Float64() < b.share:
		return "sampled"
	}
	return ""
}

func (b *bundler) handle(r *request) {
	defer b.pending.Add(-1)
	bd := r.bundle(b.instance, b.engine)
	bd.Sampled = r.trace.sampled
	if bd.Sampled == "" && b.enabled {
		b.results.WithLabelValues("sampled_out").Inc() // built for the trace exporter only
	}
	if bd.Sampled != "" {
		data, err := json.Marshal(bd)
		if err == nil {
			_, err = b.js.PublishAsync(debug.Subject(bd.Outcome, bd.Provider, bd.RequestID), data)
		}
		if err != nil {
			b.results.WithLabelValues("failed").Inc()
			b.log.Debug("bundle not published", "request_id", bd.RequestID, "err", err)
		} else {
			b.results.WithLabelValues("published").Inc()
		}
	}
	if b.export != nil {
		b.export(bd)
	}
}
