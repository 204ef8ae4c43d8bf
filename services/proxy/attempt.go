package proxy

// One attempt, from its start to its end: made by the failover loop
// (tryTargets) for one key of one step, begun (runAttempt), sent (send: the
// upstream exchange, the answer read, checked and given to the caller, or
// a relay prepared), then ended: given back its headroom, counted, noted
// in the debug bundle and reported to the hold engine (endAttempt,
// reportServed, attemptFailed). What a failure becomes is upstreamerror.go.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/services/proxy/internal/translate"
	"switchyard.dev/services/proxy/internal/upstream"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/headroom"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/usage"
)

// target is what one attempt is sent to.
type target struct {
	step *route.Step
	key  *route.Key
}

// attempt is what one attempt needs, made per attempt by tryTargets: what
// it is sent to, with what, and what is learnt of it as it goes. The
// request keeps what the whole request needs.
type attempt struct {
	target
	body     []byte
	probe    bool          // the one probe of a due hold
	forward  bool          // a passthrough call (forward), not an inference request (send)
	gen      uint64        // the generation of the key's secret it sends
	probeEnd time.Time     // when a probe must end (probeDeadline); zero: not a probe
	sent     time.Time     // when it went upstream: a failure of one sent before an operator's release does not hold again
	latency  time.Duration // to the upstream's response headers (0: none yet)
	trace    int           // its entry in the debug bundle (beginAttempt; -1: none)
	begun    time.Time     // for its duration (switchyard_upstream_attempt_duration_seconds)
	// tickets are its charges on the key's and the model's headroom,
	// given back when its answer comes (observeRoom) or it fails.
	tickets route.Tickets
}

// attemptResult is the result of one attempt: done (a response was
// written or a relay prepared) or a failure to act on.
type attemptResult struct {
	done    bool
	outcome outcome
	failure *attemptError
}

// runAttempt makes one attempt: counted, noted in the debug bundle,
// bounded by its probe lease (a probe), charged on its key's headroom, sent
// (sendTo). A served one ends here (endAttempt, reportServed); a failed
// one when the failover loop has decided what comes next (attemptFailed).
func (r *request) runAttempt(c *fiber.Ctx, x *exchange, at *attempt, soft bool, sel *route.Request) attemptResult {
	step, key := at.step, at.key
	r.tally.attempts++
	if r.idem.provider == "" {
		r.idem.provider = step.Provider.Name // the Idempotency-Key goes to this provider only
	}
	at.gen, at.begun = key.Generation(), time.Now()
	at.trace = r.beginAttempt(step, key, at.probe, soft)
	at.probeEnd = r.probeDeadline(step.Provider.Name, key.HoldKey(), step.Model, at.probe)
	if sel != nil {
		at.tickets = step.Charge(key, sel.Room)
	}
	res := r.sendTo(c, x, at)
	r.caller.sending.Store(0) // the exchange is over (a stream's relay is not interrupted by the watch)
	if res.done {
		r.endAttempt(at, nil, "served")
		r.reportServed(at, res.outcome.relay != nil)
	}
	return res
}

// sendTo sends one attempt to t: the inference request (attempt), or the
// passthrough call (forward).
func (r *request) sendTo(c *fiber.Ctx, x *exchange, at *attempt) attemptResult {
	if at.forward {
		if ae := r.forward(c, at, x.method, x.rest); ae != nil {
			return attemptResult{failure: ae}
		}
		return attemptResult{done: true}
	}
	return r.send(c, at, at.step.Provider.Name == r.idem.provider)
}

// reportServed reports a target that answered. A stream's (relay) settles only
// its probe now: the breaker and the passive counts wait for the stream's
// end (relay.settle: a stream the upstream cuts mid-way fails the target).
// A passthrough call names no model of the route table: it feeds the hold
// engine only.
func (r *request) reportServed(at *attempt, relay bool) {
	step, key := at.step, at.key
	if !at.forward && !relay {
		r.report(at, hold.Outcome{OK: true})
		return
	}
	if at.forward || at.probe {
		r.s.engine.Report(step.Provider.Name, key.HoldKey(), step.Model, at.probe, hold.Outcome{OK: true, RequestID: r.id})
	}
	if relay {
		r.observeLatency(step, key, at.latency)
	}
}

// attemptFailed ends a failed attempt once the failover loop has decided
// what the proxy does next (taken): reported (to the hold engine and the
// passive counts, a passthrough call's to the hold engine only), ended
// and logged.
func (r *request) attemptFailed(at *attempt, ae *attemptError, out hold.Outcome, taken failure.Action) {
	r.reportFailure(at, out)
	r.endAttempt(at, ae, taken.String())
	r.logFailure(at, ae, taken)
}

func (r *request) reportFailure(at *attempt, out hold.Outcome) {
	if at.forward {
		out.RequestID = r.id
		r.s.engine.Report(at.step.Provider.Name, at.key.HoldKey(), at.step.Model, at.probe, out)
		return
	}
	r.report(at, out)
}

// logFailure logs a failed attempt and what the proxy does next.
func (r *request) logFailure(at *attempt, ae *attemptError, taken failure.Action) {
	t, probe := at.target, at.probe
	if at.forward {
		r.logger().Warn("passthrough attempt failed", "provider", t.step.Provider.Name, "key_id", t.key.ID, "path", t.step.Upstream,
			"status", ae.status, "class", ae.result.Class.String(), "action", taken.String())
		return
	}
	r.logger().Warn("attempt failed",
		"provider", t.step.Provider.Name, "key_id", t.key.ID, "model", t.step.Model,
		"attempt", r.tally.attempts, "status", ae.status, "class", ae.result.Class.String(),
		"code", ae.result.Code, "reason", ae.reason(), "action", taken.String(), "probe", probe)
}

// report gives one attempt's outcome to the hold engine and to the
// passive counters (one call per attempt); a success's latency also feeds
// the target's and the key's averages.
func (r *request) report(at *attempt, out hold.Outcome) {
	step, key := at.step, at.key
	out.RequestID = r.id
	out.Operation = r.ep.op.String()
	r.s.engine.Report(step.Provider.Name, key.HoldKey(), step.Model, at.probe, out)
	if out.OK {
		r.observeLatency(step, key, at.latency)
	}
	r.rt.passive.Count(step, key.Index(), out, at.latency)
}

// observeLatency folds an attempt's latency into its target's and its
// key's averages.
func (r *request) observeLatency(step *route.Step, key *route.Key, latency time.Duration) {
	if latency <= 0 {
		return
	}
	ms, now := float64(latency.Microseconds())/1000, time.Now().UnixNano()
	alpha := r.rt.latencyAlpha
	step.Latency.Observe(ms, alpha, now)
	key.Latency.Observe(ms, alpha, now)
}

// endAttempt ends an attempt, served or failed: its headroom charges
// given back, counted (noteAttemptEnd), noted in the debug bundle with
// what the proxy does next (action).
func (r *request) endAttempt(at *attempt, ae *attemptError, action string) {
	at.tickets.Release() // a transport failure's: an answer's was given back as it came (observeRoom)
	r.noteAttemptEnd(at, ae)
	r.trace.attemptEnded(at, ae, action, time.Since(r.started))
}

// noteAttemptEnd counts the attempt as ended (endAttempt), and notes a
// failed one for the usage record (failedAttempts).
func (r *request) noteAttemptEnd(at *attempt, ae *attemptError) {
	cancelled := ae != nil && r.expired()
	if ae != nil && at.step != nil && at.step.Provider != nil {
		f := usage.FailedAttempt{Provider: at.step.Provider.Name, Model: at.step.Upstream, Class: ae.result.Class.String(), Cancelled: cancelled}
		if at.key != nil {
			f.KeyID = at.key.ID
		}
		r.tally.failed = append(r.tally.failed, f)
	}
	if r.s.metrics != nil {
		r.s.metrics.attempt.ended(at, ae, cancelled)
	}
}

// send sends one attempt of an inference request to its target. The
// attempt timeout (and the caller's deadline, when sooner) bounds the whole
// exchange for a plain response, and the headers and opening events of a
// stream.
func (r *request) send(c *fiber.Ctx, at *attempt, withIdem bool) attemptResult {
	t := at.target
	a := t.step.Provider.Adapter
	up := r.rt.upstreams[t.step.Provider.Index]

	timeout, deadline, callerDeadline := r.attemptDeadline(up, at.probeEnd)

	upOp := r.upstreamOp(a)
	req := fasthttp.AcquireRequest()
	req.SetRequestURI(a.URL(upOp, t.step.Upstream))
	req.Header.SetMethod(fasthttp.MethodPost)
	switch {
	case r.ep.op == provider.OpTranscriptions:
		req.Header.SetContentType(r.contentType) // multipart, with its boundary
	default:
		req.Header.SetContentTypeBytes(acceptJSON)
	}
	switch {
	case r.stream:
		req.Header.SetCanonical(hdrAccept, acceptEventStream)
	case r.ep.op == provider.OpSpeech || r.ep.op == provider.OpTranscriptions:
		req.Header.SetCanonical(hdrAccept, acceptAny)
	default:
		req.Header.SetCanonical(hdrAccept, acceptJSON)
	}
	req.Header.SetUserAgent(userAgent)
	req.Header.SetCanonical(hdrRequestID, bytesOf(r.id)) // visible ASCII (requestID)
	r.tc.SetHeaders(&req.Header)
	if withIdem && r.idem.key != "" {
		req.Header.Set("Idempotency-Key", r.idem.key)
	}
	if a.Format() == provider.FormatAnthropic && r.ep.format == provider.FormatAnthropic {
		for _, name := range [...]string{"Anthropic-Version", "Anthropic-Beta"} {
			if v := c.Request().Header.Peek(name); len(v) > 0 {
				req.Header.SetBytesV(name, v)
			}
		}
	}
	up.SetAuth(req, a, t.key.Index(), t.key.Secret())
	req.SetBodyRaw(at.body) // the caller's body outlives the exchange

	resp := fasthttp.AcquireResponse()
	resp.StreamBody = r.stream || r.ep.op == provider.OpSpeech
	r.caller.sending.Store(int64(upstream.SendingNow()))
	sent := time.Now()
	at.sent = sent
	err := up.Do(req, resp, deadline)
	if !resp.StreamBody {
		r.caller.sending.Store(0) // the answer is read: the connection is back in the pool
	}
	fasthttp.ReleaseRequest(req)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		return r.fail(t, &attemptError{err: upstream.TransportError(err, timeout, callerDeadline)})
	}
	status := resp.StatusCode()
	at.latency = time.Since(sent)
	up.Latency().Observe(at.latency.Seconds())
	r.observeRoom(at, &resp.Header)
	if r.stream && status == http.StatusOK && upstream.IsEventStream(resp.Header.ContentType()) {
		return r.startStream(at, resp, deadline)
	}
	if r.ep.op == provider.OpSpeech && status == http.StatusOK && !bytes.HasPrefix(resp.Header.ContentType(), []byte("application/json")) {
		return r.startAudio(t, resp, up)
	}
	if r.stream || r.ep.op == provider.OpSpeech {
		// Error responses to a stream request come as a plain body.
		b, err := upstream.ReadStreamBody(resp)
		if err != nil {
			fasthttp.ReleaseResponse(resp)
			return r.fail(t, &attemptError{err: fmt.Errorf("read response: %w", upstream.TransportError(err, timeout, callerDeadline))})
		}
		ae := &attemptError{status: status, header: upstream.HeaderOf(&resp.Header), body: b}
		if status == http.StatusOK {
			// Asked for a stream, got a plain 200 body: not what was asked.
			ae.status = http.StatusBadGateway
			ae.err = fmt.Errorf("expected an event stream, got %q", resp.Header.ContentType())
			if st, isErr := provider.ErrorIn200(b); isErr {
				ae.status, ae.err = st, nil
			}
		}
		fasthttp.ReleaseResponse(resp)
		return r.fail(t, ae)
	}
	defer fasthttp.ReleaseResponse(resp)
	respBody := resp.Body()
	if status != http.StatusOK {
		return r.fail(t, &attemptError{status: status, header: upstream.HeaderOf(&resp.Header), body: bytes.Clone(respBody)})
	}
	// One walk of the answer's fields (and one validation) for every check.
	ans := provider.CheckAnswer(a.Format(), upOp, r.upFormat(a), respBody)
	if ans.ErrorStatus != 0 {
		return r.fail(t, &attemptError{status: ans.ErrorStatus, header: upstream.HeaderOf(&resp.Header), body: bytes.Clone(respBody)})
	}
	if r.ep.op == provider.OpTranscriptions {
		// A transcript is JSON or text, as the caller's response_format asked.
		return r.served(c, t, respBody, string(resp.Header.ContentType()))
	}
	if ans.Invalid != nil {
		// A 200 that is not an answer (an HTML page, text, cut JSON) is a
		// failure of the target, like a 5xx.
		return r.fail(t, &attemptError{status: http.StatusBadGateway, header: upstream.HeaderOf(&resp.Header), err: ans.Invalid})
	}
	if ans.NoChoices {
		return r.fail(t, &attemptError{status: http.StatusBadGateway, header: upstream.HeaderOf(&resp.Header), body: bytes.Clone(respBody),
			err: errors.New("completion with no choices")})
	}
	out, err := translate.Answer(r.ep.format, r.upFormat(a), r.ep.op, respBody, r.model)
	if err != nil {
		return r.fail(t, &attemptError{status: http.StatusBadGateway, body: bytes.Clone(respBody), err: err})
	}
	r.use.tokens, r.use.tokensOK = ans.Tokens, ans.TokensOK
	out, blocked := r.checkAnswer(out)
	if blocked != nil {
		// The target answered well; what it answered may not be relayed.
		r.setServedBy(c, t)
		r.class = classRejected
		return attemptResult{done: true, outcome: outcome{err: sendError(c, r.ep.format, gwerror.GuardrailBlocked, blocked.AnswerMessage())}}
	}
	return r.served(c, t, out, fiber.MIMEApplicationJSON)
}

// observeRoom reads the rate-limit headers of the attempt's answer (any
// status) into its key's or its model's headroom. The attempt's charge is
// given back first: the reading counts it.
func (r *request) observeRoom(at *attempt, h *fasthttp.ResponseHeader) {
	at.tickets.Release()
	var rd headroom.Reading
	if now := time.Now(); upstream.ReadRoom(at.step.Provider.Dialect, h, now, &rd) {
		at.step.Observe(r.s.room, at.key, &rd, now)
	}
}

// served answers the caller with a plain (not streamed) upstream answer.
func (r *request) served(c *fiber.Ctx, t target, out []byte, contentType string) attemptResult {
	r.use.estOut = int64(len(out) / 4)
	r.setServedBy(c, t)
	c.Status(http.StatusOK)
	if contentType == fiber.MIMEApplicationJSON {
		c.Response().Header.SetContentTypeBytes(acceptJSON)
	} else {
		c.Set(fiber.HeaderContentType, contentType) // the upstream's (a transcript): line breaks stripped
	}
	c.Response().SetBody(out) // a copy: the upstream response goes back to its pool
	if contentType == fiber.MIMEApplicationJSON {
		r.cacheStore(t, out, fiber.MIMEApplicationJSON)
	}
	r.logInfo("request served", t)
	return attemptResult{done: true}
}

// logInfo logs an Info line about a served request, building nothing when
// Info is disabled.
func (r *request) logInfo(msg string, t target, extra ...slog.Attr) {
	log := r.s.log
	if !log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := append(make([]slog.Attr, 0, 7+len(extra)), slog.String("request_id", r.id),
		slog.String("model", r.model), slog.String("provider", t.step.Provider.Name),
		slog.String("key_id", t.key.ID), slog.Int("attempts", r.tally.attempts),
		slog.Duration("duration", time.Since(r.started)))
	log.LogAttrs(context.Background(), slog.LevelInfo, msg, append(attrs, extra...)...)
}

// attemptDeadline is when an attempt at up gives up: after the provider's
// attempt timeout, or at the caller's deadline when that is sooner
// (callerDeadline). A probe ends at its lease's end (probeEnd) when that is sooner
// (a timeout of the attempt: the target answered too slowly for it).
func (r *request) attemptDeadline(up *upstream.Client, probeEnd time.Time) (timeout time.Duration, deadline time.Time, callerDeadline bool) {
	now := time.Now()
	timeout = up.AttemptTimeout()
	deadline = now.Add(timeout)
	if !probeEnd.IsZero() && probeEnd.Before(deadline) {
		deadline, timeout = probeEnd, max(probeEnd.Sub(now), 0).Round(time.Millisecond)
	}
	if !r.deadline.IsZero() && r.deadline.Before(deadline) {
		deadline, callerDeadline = r.deadline, true
	}
	if pd := up.RequestDeadline(r.started); !pd.IsZero() && pd.Before(deadline) {
		deadline, callerDeadline = pd, true
	}
	return timeout, deadline, callerDeadline
}

// probeDeadline is when a probe attempt on the target must end: when this
// instance's probe lease ends (resilience.probe.lease after it was
// taken). Past it another instance may take the lease and probe the hold
// too, and this probe's answer would be thrown away. Zero when probe is
// false.
func (r *request) probeDeadline(provider, keyID, model string, probe bool) time.Time {
	if !probe {
		return time.Time{}
	}
	left, ok := r.s.engine.ProbeLeaseLeft(provider, keyID, model)
	if !ok {
		return time.Time{}
	}
	return time.Now().Add(left)
}

func (r *request) setServedBy(c *fiber.Ctx, t target) {
	r.by.provider = t.step.Provider.Name
	r.by.provType, r.by.upModel, r.by.keyID = t.step.Provider.Adapter.Type(), t.step.Upstream, t.key.ID
	h := &c.Response().Header
	// A model name may come from the caller (unlisted models): SetCanonical
	// copies a value with its line breaks replaced, as every setter does.
	h.SetCanonical(hdrProvider, bytesOf(t.step.Provider.Name))
	h.SetCanonical(hdrKeyID, bytesOf(t.key.ID))
	h.SetCanonical(hdrModel, bytesOf(t.step.Model))
	var n [20]byte
	h.SetCanonical(hdrAttempts, strconv.AppendInt(n[:0], int64(r.tally.attempts), 10))
}

// Header names in canonical form and fixed values, set without
// normalizing the name on every call.
var (
	hdrAccept         = []byte("Accept")
	hdrRequestID      = []byte(headerRequestID)
	hdrProvider       = []byte(headerProvider)
	hdrKeyID          = []byte(headerKeyID)
	hdrModel          = []byte(headerModel)
	hdrAttempts       = []byte(headerAttempts)
	hdrCacheControl   = []byte(fiber.HeaderCacheControl)
	hdrAccelBuffering = []byte("X-Accel-Buffering")
	acceptEventStream = []byte("text/event-stream")
	acceptJSON        = []byte("application/json")
	acceptAny         = []byte("*/*")
	valNoCache        = []byte("no-cache")
	valNo             = []byte("no")
)

// bytesOf is s's bytes without a copy, for a fasthttp setter that copies
// what it is given (SetCanonical): never written to, never kept.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// upstreamOp is the operation an attempt asks of the provider: the
// endpoint's, or chat for a Responses request a provider serves through
// translation.
func (r *request) upstreamOp(a *provider.Adapter) provider.Op {
	if r.ep.op == provider.OpResponses && !a.Supports(provider.OpResponses) {
		return provider.OpChat
	}
	return r.ep.op
}

// upFormat is the wire format of the upstream's answer: the provider's,
// or the Responses API's.
func (r *request) upFormat(a *provider.Adapter) provider.Format {
	if r.ep.op == provider.OpResponses && a.Supports(provider.OpResponses) {
		return provider.FormatResponses
	}
	return a.Format()
}
