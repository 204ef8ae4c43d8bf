package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unsafe"

	"switchyard.dev/services/proxy/internal/gwerror"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/services/proxy/internal/translate"
	"switchyard.dev/services/proxy/internal/upstream"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/redact"
)

// target is what one attempt is sent to.
type target struct {
	step *route.Step
	key  *route.Key
}

// attemptError is one failed attempt.
type attemptError struct {
	t      target
	status int // 0 for transport errors
	header http.Header
	body   []byte
	stream bool
	err    error
	result failure.Result
}

func (e *attemptError) reason() string {
	if e.result.Reason != "" {
		return redact.String(e.result.Reason)
	}
	if e.err != nil {
		return e.err.Error()
	}
	return http.StatusText(e.status)
}

// summary names the target by provider, key id and model (never the
// secret) with what went wrong, masked for anything credential-shaped.
func (e *attemptError) summary() string {
	return maskAddrs(redact.String(e.rawSummary()))
}

// addrRE matches network addresses in an error's text (Go's "read tcp
// 10.0.0.7:51234->10.0.3.9:443: connection reset by peer", "lookup x on
// 10.0.0.2:53"): IPv4 with its port, bracketed IPv6.
var addrRE = regexp.MustCompile(`\b(?:\d{1,3}\.){3}\d{1,3}:\d+\b|\[[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[0-9A-Za-z]+)?\](?::\d+)?`)

// maskAddrs replaces the network addresses in text a caller is given: the
// gateway's and its upstreams' internal addresses are the operator's
// (the logs keep them).
func maskAddrs(s string) string {
	if !strings.ContainsAny(s, ".[") {
		return s
	}
	return addrRE.ReplaceAllString(s, "[address]")
}

func (e *attemptError) rawSummary() string {
	s := fmt.Sprintf("%s/%s key %s: ", e.t.step.Provider.Name, e.t.step.Model, e.t.key.ID)
	if e.status != 0 {
		s += fmt.Sprintf("HTTP %d ", e.status)
	}
	s += e.result.Class.String()
	if e.result.Code != "" {
		s += " (" + e.result.Code + ")"
	}
	if e.err != nil && e.status == 0 {
		s += ": " + e.err.Error()
	}
	return s
}

// attemptResult is the result of one attempt: done (a response was
// written or a relay prepared) or a failure to act on.
type attemptResult struct {
	done    bool
	outcome outcome
	failure *attemptError
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

	req := fasthttp.AcquireRequest()
	req.SetRequestURI(a.URL(r.upstreamOp(a), t.step.Upstream))
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
	r.setTraceHeaders(&req.Header)
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
	upOp := r.upstreamOp(a)
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
	out, err := translateResponse(r.ep.format, r.upFormat(a), r.ep.op, respBody, r.model)
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

// fail classifies a failed attempt.
func (r *request) fail(t target, ae *attemptError) attemptResult {
	ae.t = t
	ae.result = r.rt.classifier.Classify(failure.Input{
		Provider: t.step.Provider.Adapter.Type(),
		Status:   ae.status,
		Header:   ae.header,
		Body:     ae.body,
		Stream:   ae.stream,
		Err:      ae.err,
	}, t.step.Provider.Name)
	// The reason travels into hold records, events and logs: the
	// provider's own secrets are masked by value (shapes are masked where
	// those are written).
	if ae.result.Reason != "" {
		ae.result.Reason = string(redact.Text([]byte(ae.result.Reason), providerSecrets(t.step.Provider)...))
	}
	if ae.status == 0 && !ae.stream && ae.result.Class != failure.Transient {
		ae.result.Class = failure.Transient // a transport error says nothing about the target
	}
	if errors.Is(ae.err, fasthttp.ErrBodyTooLarge) {
		// The target answered; the answer is too large for the gateway to
		// hold (upstream.MaxResponseBytes). Another target would answer as
		// much: the caller gets it at once, and the target is not blamed.
		ae.result = failure.Result{Class: failure.RequestRejected, Code: codeResponseTooLarge, Reason: "answer larger than the gateway holds"}
	}
	return attemptResult{failure: ae}
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
	h.SetCanonical(hdrAttempts, bytesOf(itoa(r.tally.attempts)))
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

// decide maps a failure to the proxy's next move: a transport error per
// retry.on_transport_errors (a timeout always rotates), then the operator's retry.on_statuses and
// retry.rotate_on_statuses (a class that no backoff fixes is never retried
// in place), then the class's action (failure.Meaning).
func (s *Service) decide(ae *attemptError) failure.Action {
	return ae.result.ActionFor(ae.status, ae.stream, s.cfg.Retry.Policy())
}

// returnUpstreamError gives the caller the upstream's own error, in the
// endpoint's format.
func (r *request) returnUpstreamError(c *fiber.Ctx, t target, ae *attemptError) error {
	r.setServedBy(c, t)
	status := ae.status
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
		if ae.result.Class == failure.RequestRejected && ae.result.Code != codeResponseTooLarge {
			status = http.StatusBadRequest // an error event refusing the request
		}
	}
	// Providers echo keys: the upstream's body is masked before anything
	// else (a translation may cut a long message, and a secret cut in two
	// is no longer recognisable), the gateway's summary of it as it is
	// made.
	secrets := providerSecrets(t.step.Provider)
	body := redact.Body(ae.body, secrets...)
	if len(body) == 0 || !jsonObject(body) {
		body = withRequestID(c, r.ep.format, redact.Body(errorBody(r.ep.format, status, gwerror.ProviderError, "upstream error: "+ae.summary()), secrets...))
	} else if up := r.upFormat(t.step.Provider.Adapter); errorShape(up) != errorShape(r.ep.format) {
		body = withRequestID(c, r.ep.format, translateError(r.ep.format, status, body)) // Anthropic's own carry Anthropic's
	} else if errorShape(r.ep.format) == provider.FormatOpenAI {
		// OpenAI-compatible providers (and the Responses API's error
		// events) spell errors more loosely than OpenAI's SDKs read them:
		// the caller would get the status without the message.
		body = translate.CanonicalOpenAIError(status, body)
	}
	r.class = ae.result.Class.String()
	r.logInfo("request rejected upstream", t, slog.Int("status", status), slog.String("class", r.class))
	c.Status(status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(body)
}

// providerSecrets returns the secrets of a provider's keys, current and
// rotated away (route.Key.AppendSecrets): what the provider might echo
// back in an error.
func providerSecrets(p *route.Provider) []string {
	out := make([]string, 0, len(p.Keys))
	for _, k := range p.Keys {
		out = k.AppendSecrets(out)
	}
	return out
}

func jsonObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 1 && (b[0] == '{' || b[0] == '[')
}

// upFormat is the wire format of the upstream's answer: the provider's,
// or the Responses API's.
func (r *request) upFormat(a *provider.Adapter) provider.Format {
	if r.ep.op == provider.OpResponses && a.Supports(provider.OpResponses) {
		return provider.FormatResponses
	}
	return a.Format()
}
