package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/telemetry"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/redact"
	"switchyard.dev/shared/usage"
)

// Debug bundles. The request path notes what happened in fixed-size fields
// of the request (attempts in a small inline array, digests as raw sums,
// the cursor's order and reasons), with no I/O and no JSON. When the
// request ends, the request itself is queued (a bounded channel: a full
// queue drops the bundle, counted); a background worker builds the bundle,
// looks up the holds of the keys the request skipped, publishes it to
// SWITCHYARD_DEBUG and hands it to the trace exporter.

// headerDebug asks for a bundle of this request whatever the sampling.
const headerDebug = "X-Switchyard-Debug"

// maxErrorMessage bounds a provider error message kept in a bundle.
const maxErrorMessage = 300

// attemptRec is one attempt as the request path notes it.
type attemptRec struct {
	step      *route.Step
	key       *route.Key
	start     time.Duration // from the request's arrival
	dur       time.Duration
	ttft      time.Duration
	status    int
	class     failure.Class
	failed    bool
	code      string
	reason    string // unmasked: masked when the bundle is built
	body      []byte // the provider's error body (its own copy), read when the bundle is built
	action    string
	backoff   time.Duration
	probe     bool
	soft      bool
	completed bool // a stream reached its terminal event
	span      trace.SpanID
}

// bundleTrace is what a request notes for its bundle (on the request: no
// allocation until more than four attempts).
type bundleTrace struct {
	on        bool // bundles or traces are on for this proxy
	forced    bool
	sampled   string // why its bundle is kept (bundler.sample); "": not kept
	reqSum    [sha256.Size]byte
	reqPrefix [sha256.Size]byte
	reqLen    int
	resp      hash.Hash // a stream's relayed bytes (nil: not hashed)
	respHead  hash.Hash // their first debug.PrefixBytes
	respBody  []byte    // a plain response (the handler's buffer) until done hashes it
	respSum   [sha256.Size]byte
	respPre   [sha256.Size]byte
	respLen   int
	respOK    bool
	errCode   string
	limits    *debug.LimitDecision
	access    string
	log       []attemptRec
	// The request's final status and duration, and its usage record.
	status int
	ended  time.Duration
	rec    *usage.Record
}

// startTrace starts a request's trace when bundles or traces are on:
// X-Switchyard-Debug is read at once, so that a request refused before
// its body is read keeps its bundle when its caller asked for it.
func (r *request) startTrace(c *fiber.Ctx, on bool) {
	r.trace.on = on
	r.trace.forced = on && strings.EqualFold(c.Get(headerDebug), "true")
}

// noteRequest notes the request's body once it is known.
func (r *request) noteRequest(c *fiber.Ctx) {
	t := &r.trace
	if !t.on {
		return
	}
	t.reqLen = len(r.body)
	t.reqSum = sha256.Sum256(r.body)
	t.reqPrefix = sha256.Sum256(r.body[:min(len(r.body), debug.PrefixBytes)])
	t.log = make([]attemptRec, 0, 4) // made only when tracing: a request without it stays small
}

// beginAttempt notes an attempt about to be sent; the index is for
// endAttempt.
func (r *request) beginAttempt(step *route.Step, key *route.Key, probe, soft bool) int {
	t := &r.trace
	if !t.on {
		return -1
	}
	t.log = append(t.log, attemptRec{step: step, key: key, start: time.Since(r.started), probe: probe, soft: soft, span: r.newAttemptSpan()})
	return len(t.log) - 1
}

// endAttempt notes how an attempt ended: served, or failed and what the
// proxy does next.
func (r *request) endAttempt(at *attempt, ae *attemptError, action string) {
	r.noteAttemptEnd(at, ae)
	if at.trace < 0 {
		return
	}
	a := &r.trace.log[at.trace]
	a.dur = time.Since(r.started) - a.start
	a.ttft = at.latency
	a.action = action
	if ae == nil {
		a.status = 200
		return
	}
	a.failed, a.status, a.class, a.code = true, ae.status, ae.result.Class, ae.result.Code
	a.reason, a.body = ae.reason(), ae.body
}

// noteBackoff adds a backoff waited after attempt i.
func (r *request) noteBackoff(i int, d time.Duration) {
	if i >= 0 {
		r.trace.log[i].backoff += d
	}
}

// noteResponse keeps the digest of a plain response and the error code of
// a refusal (in the handler: the response buffer is reused after it).
func (r *request) noteResponse(c *fiber.Ctx) {
	t := &r.trace
	if !t.on {
		return
	}
	body := c.Response().Body()
	t.respLen, t.respOK = len(body), true
	t.respBody = body // hashed in bundler.done, only for a bundle that is kept
	if c.Response().StatusCode() >= 400 {
		if e, _, _, ok := jsonfield.Find(body, "error"); ok {
			code, _ := jsonfield.String(e, "code")
			if code == "" {
				code, _ = jsonfield.String(e, "type")
			}
			t.errCode = code
		}
	}
}

// noteStream hashes bytes relayed to the caller.
func (r *request) noteStream(b []byte) {
	t := &r.trace
	if !t.on {
		return
	}
	if t.resp == nil {
		t.resp, t.respHead = sha256.New(), sha256.New()
	}
	t.resp.Write(b)
	if t.respLen < debug.PrefixBytes {
		t.respHead.Write(b[:min(len(b), debug.PrefixBytes-t.respLen)])
	}
	t.respLen += len(b)
}

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

// bundle builds the request's bundle (off the request path).
func (r *request) bundle(instance string, engine *hold.Engine) *debug.Bundle {
	t := &r.trace
	status := r.trace.status
	label := r.resolved
	if label == "" {
		label = modelUnknown
	}
	bd := &debug.Bundle{
		ModelLabel: label,
		V:          debug.SchemaVersion, RequestID: r.id, At: r.started.UTC(), Instance: instance, Endpoint: r.ep.path,
		Stream: r.stream, ClientType: r.use.clientType, Access: t.access, Limits: t.limits, Model: r.model,
		Attempts: make([]debug.Attempt, 0, len(t.log)), Status: status, ErrorCode: t.errCode,
		LatencyMS: ms(r.trace.ended), TTFTMS: ms(r.use.ttft), StreamCompleted: r.use.streamDone, Cancelled: r.use.cancelled || r.caller.gone.Load(),
		Request: digest(t.reqLen, t.reqSum, t.reqPrefix),
	}
	if tc := &r.tc; tc.caller || tc.export {
		bd.TraceID = tc.traceID.String()
		if tc.caller {
			var b [55]byte
			bd.TraceParent, bd.TraceState = string(telemetry.AppendTraceParent(b[:0], tc.traceID, tc.parent, tc.flags)), tc.state
		}
	}
	streamCut := r.class == classStreamIncomplete
	bd.Outcome = debug.OutcomeOf(status, streamCut)
	if streamCut && bd.ErrorCode == "" {
		bd.ErrorCode = gwerror.StreamIncomplete
	}
	if class := r.outcomeClass(status); class != classOK {
		bd.Class = class
	}
	if bd.Access == "" {
		bd.Access = "allowed"
	}
	if r.client != nil {
		bd.Client, bd.Plan = r.client.id, r.client.plan
	}
	if t.respOK {
		d := digest(t.respLen, t.respSum, t.respPre)
		bd.Response = &d
	} else if t.resp != nil {
		d := debug.Digest{Bytes: t.respLen, SHA256: hex.EncodeToString(t.resp.Sum(nil)), PrefixBytes: min(t.respLen, debug.PrefixBytes),
			PrefixSHA256: hex.EncodeToString(t.respHead.Sum(nil))}
		bd.Response = &d
	}
	if r.by.provider != "" {
		bd.Provider, bd.ServedModel, bd.KeyID = r.by.provider, r.by.upModel, r.by.keyID
	} else if r.tally.last != nil {
		bd.Provider = r.tally.last.t.step.Provider.Name
	}
	if r.trace.rec != nil {
		tk := r.trace.rec.Tokens
		bd.Tokens = &debug.Tokens{Input: tk.Input, Output: tk.Output, CachedInput: tk.CachedInput, CacheWrite: tk.CacheWrite,
			Reasoning: tk.Reasoning, Estimated: r.trace.rec.TokensEstimated}
		bd.CostUSD = r.trace.rec.CostUSD
	}
	for i := range t.log {
		a := &t.log[i]
		da := debug.Attempt{N: i + 1, Provider: a.step.Provider.Name, Model: a.step.Upstream, KeyID: a.key.ID,
			Fingerprint: a.key.Fingerprint(), StartMS: ms(a.start), DurationMS: ms(a.dur), TTFTMS: ms(a.ttft),
			Status: a.status, Action: a.action, BackoffMS: ms(a.backoff), Probe: a.probe, Soft: a.soft}
		if a.span.IsValid() {
			da.SpanID = a.span.String()
		}
		if a.failed {
			da.Class = a.class.String()
			da.Error = providerError(a)
		}
		if i == len(t.log)-1 && r.stream && !a.failed {
			da.StreamCompleted = r.use.streamDone
		}
		if i == len(t.log)-1 && status != 200 && (a.action == failure.RetrySame.String() || a.action == failure.Rotate.String()) {
			da.Action = "stopped" // out of attempts or time: nothing came next
		}
		bd.Attempts = append(bd.Attempts, da)
	}
	if r.sel.route != nil {
		bd.Route = r.routeTrace(engine)
	}
	return bd
}

// routeTrace is the bundle's route: every step, the order the request
// tried them, why the others were not, and the keys it skipped as held.
func (r *request) routeTrace(engine *hold.Engine) *debug.Route {
	rte := r.sel.route
	rt := &debug.Route{Name: rte.Name, Kind: rte.Kind, Strategy: rte.Policy.Strategy.String(), Needs: r.sel.req.Needs.Names(),
		Region: r.sel.req.Region, RegionRequired: r.sel.req.RegionRequired, Steps: make([]debug.Step, len(rte.Steps))}
	for i := range rte.Steps {
		st := &rte.Steps[i]
		ds := debug.Step{Step: i, Reason: r.sel.cur.Reason(i).String()}
		if st.Provider == nil {
			ds.Target = "-/" + st.Model
		} else {
			ds.Target = st.Provider.Name + "/" + st.Model
		}
		rt.Steps[i] = ds
	}
	for n, i := range r.sel.cur.Order() {
		ds := &rt.Steps[i]
		ds.Tried, ds.Reason = n+1, ""
		st := &rte.Steps[i]
		tried := false
		for _, k := range st.Provider.Keys {
			if r.triedKey(k) {
				tried = true
				continue
			}
			for _, h := range engine.Covering(st.Provider.Name, k.HoldKey(), st.Model) {
				if h.State != hold.StateReleased {
					ds.Held = append(ds.Held, debug.HeldKey{KeyID: k.ID, HoldID: h.ID, Class: h.Class.String()})
					break
				}
			}
		}
		if !tried && len(ds.Held) > 0 {
			ds.Reason = "held"
		}
	}
	return rt
}

// providerError is what a bundle keeps of an attempt's error: the
// provider's code and type, and its message (else the classifier's
// reason), masked by value for the provider's secrets and by shape for
// anything credential-like, and bounded.
func providerError(a *attemptRec) *debug.ProviderError {
	code, typ, msg := failure.Describe(a.body)
	if code == "" {
		code = a.code
	}
	if msg == "" {
		msg = a.reason
	}
	msg = string(redact.Text([]byte(msg), providerSecrets(a.step.Provider)...))
	if len(msg) > maxErrorMessage {
		msg = msg[:maxErrorMessage] + "..."
	}
	return &debug.ProviderError{Code: code, Type: typ, Message: msg}
}

// triedKey reports whether an attempt of the request went to k.
func (r *request) triedKey(k *route.Key) bool {
	for i := range r.trace.log {
		if r.trace.log[i].key == k {
			return true
		}
	}
	return false
}

func digest(n int, sum, prefix [sha256.Size]byte) debug.Digest {
	return debug.Digest{Bytes: n, SHA256: hex.EncodeToString(sum[:]), PrefixBytes: min(n, debug.PrefixBytes),
		PrefixSHA256: hex.EncodeToString(prefix[:])}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
