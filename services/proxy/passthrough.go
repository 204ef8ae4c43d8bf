package proxy

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/services/proxy/internal/telemetry"
	"switchyard.dev/services/proxy/internal/upstream"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/redact"
	"switchyard.dev/shared/usage"
)

// Passthrough: ANY /<provider>/<path> forwards the request to <path> under
// the provider's base URL (/openai/files -> https://api.openai.com/v1/files)
// with the provider's credentials instead of the caller's, for the paths
// the gateway does not serve itself (files, batches, fine-tuning, vector
// stores...). It takes the chat pipeline's steps that apply to any path:
// the caller's gateway key, its right to the provider (clients[].models
// "<provider>/*" or "*"), its plan's limits, a key the hold engine admits,
// failures classified and held, the usage record, the debug bundle. A
// request is sent again (the same key, or another) only when that is safe:
// GET and HEAD, or an Idempotency-Key; any other failure is the caller's
// answer, masked.

// The passthrough endpoints, by the provider's format (errors take it).
var (
	epPassthrough          = &endpoint{name: "passthrough", path: "/:provider/*", format: provider.FormatOpenAI, op: provider.OpChat}
	epPassthroughAnthropic = &endpoint{name: "passthrough", path: "/:provider/*", format: provider.FormatAnthropic, op: provider.OpChat}
)

// hopHeaders are the request and response headers a proxy never forwards
// (connection management, and what fasthttp sets itself).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding",
	"Upgrade", "Host", "Content-Length", "Accept-Encoding"}

// accountHeaders are request headers that pick what the provider's key
// acts for (an organization or project of the key's account) or carry the
// caller's own session: the gateway's key is the operator's to use, so the
// caller does not choose its account.
var accountHeaders = []string{"Cookie", "OpenAI-Organization", "OpenAI-Project"}

// namedIn reports whether the header name is in one of the lists, in any
// case.
func namedIn(name string, lists ...[]string) bool {
	for _, l := range lists {
		for _, h := range l {
			if strings.EqualFold(h, name) {
				return true
			}
		}
	}
	return false
}

// waitHeaders are the response headers of a failed passthrough call that
// the caller gets with the provider's error: when to come back.
var waitHeaders = []string{"Retry-After", "Retry-After-Ms", "X-Ratelimit-Limit-Requests", "X-Ratelimit-Limit-Tokens",
	"X-Ratelimit-Remaining-Requests", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens",
	"Anthropic-Ratelimit-Requests-Reset", "Anthropic-Ratelimit-Tokens-Reset", "Anthropic-Ratelimit-Input-Tokens-Reset", "Anthropic-Ratelimit-Output-Tokens-Reset"}

// gatewayHeader reports whether a response header is one the gateway sets
// on every answer (X-Request-Id, X-Switchyard-*): a provider's own
// X-Request-Id (OpenAI sends one) is not relayed in its place.
func gatewayHeader(name string) bool {
	const prefix = "X-Switchyard-"
	return strings.EqualFold(name, headerRequestID) ||
		(len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix))
}

// servePassthrough serves one passthrough request.
func (r *request) servePassthrough(c *fiber.Ctx) outcome {
	s := r.s
	name := c.Params("provider")
	p := r.rt.table.Provider(name)
	if p != nil && p.Adapter.Format() == provider.FormatAnthropic {
		r.ep = epPassthroughAnthropic // every answer in the provider's format, a 401 too
	}
	client, ok := r.rt.clients.Load().Authenticate(&c.Request().Header)
	r.client = client
	if !ok {
		r.trace.on = false
		return outcome{err: r.refuse(c, gwerror.InvalidAPIKey, "missing or invalid gateway API key")}
	}
	r.tc.Read(&c.Request().Header, r.s.tracer, r.trace.on)
	if p == nil && name == "v1" {
		return outcome{err: r.refuse(c, gwerror.NotFound,
			fmt.Sprintf("%s %s is not a route of this gateway", c.Method(), c.Path()))}
	}
	if p == nil {
		return outcome{err: r.refuse(c, gwerror.ProviderNotFound,
			fmt.Sprintf("no provider named `%s` on this gateway", name))}
	}
	if !safePath(c.Params("*")) {
		return outcome{err: r.refuse(c, gwerror.InvalidRequest,
			"a passthrough path may not contain `.` or `..` segments (escaped or not) nor a malformed escape")}
	}
	r.model = p.Name + "/*"
	r.resolved = s.metrics.modelLabel(r.model)
	// As sent: a compressed body goes upstream compressed, with its
	// Content-Encoding (Fiber's Body would decode it, without a limit).
	r.body = c.Request().Body()
	r.noteRequest(c)
	if client != nil && !client.AllowsProvider(p.Name) {
		r.trace.access = gwerror.ModelNotAllowed
		return outcome{err: r.refuse(c, gwerror.ModelNotAllowed,
			fmt.Sprintf("this API key may not use the provider `%s`", p.Name))}
	}
	r.takeIdempotencyKey(c)
	if ok, err := r.admit(c, nil); !ok {
		return outcome{err: err}
	}
	r.deadline = s.deadline(c, r.started)
	r.use.routed = true
	r.use.clientType = usage.ClientType(c.Get(fiber.HeaderUserAgent))
	if !binaryType(c.Request().Header.ContentType()) {
		r.use.estIn = int64(len(r.body) / 4) // an upload (a file, audio) is not tokens
	}
	method := c.Method()
	step := &route.Step{Provider: p, Upstream: "/" + c.Params("*"), Active: true}
	x := exchange{one: step, method: method, rest: c.Params("*"),
		replaySafe: method == fiber.MethodGet || method == fiber.MethodHead || r.idem.key != ""}
	pp := pass{gate: s.engine}
	if out, done := r.tryTargets(c, &x, &pp); done {
		return out
	}
	if r.tally.attempts == 0 {
		steps := []route.Step{*step}
		retry := s.retryAfter(steps)
		s.setRetryAfter(c, retry)
		if open := s.openBreakers(steps); open != "" {
			return outcome{err: sendError(c, r.ep.format, gwerror.CircuitOpen, circuitOpenMessage(open, retry))}
		}
		return outcome{err: sendError(c, r.ep.format, gwerror.NoTarget,
			fmt.Sprintf("every key of `%s` is held out of rotation", p.Name))}
	}
	if !pp.failed && r.tally.last != nil && len(r.tally.last.body) > 0 {
		// Every key refused: the provider's own answer says why (a scope
		// this endpoint needs, say).
		c.Set(headerAttempts, strconv.Itoa(r.tally.attempts))
		return outcome{err: r.returnPassthrough(c, r.tally.last.t, r.tally.last)}
	}
	code, msg := gwerror.AllFailed, fmt.Sprintf("all %d attempts at `%s` failed", r.tally.attempts, p.Name)
	if pp.candidates == 1 {
		code, msg = gwerror.ProviderError, fmt.Sprintf("the provider failed for `%s`", p.Name)
	}
	if r.tally.last != nil {
		msg += "; last: " + r.tally.last.summary()
	}
	c.Set(headerAttempts, strconv.Itoa(r.tally.attempts))
	return outcome{err: sendError(c, r.ep.format, code, msg)}
}

// safePath reports whether a passthrough path (as sent, after the
// provider's name) stays under the provider's base URL: none of its
// segments, once unescaped, is "." or ".." ("%2e%2e" is ".." to whatever
// normalises the URL on the way: a front end, the provider's server,
// which would resolve /v1/../../x outside base_url's path). A backslash
// separates segments too (some servers read it as a slash), and a
// malformed escape is refused rather than guessed at.
func safePath(rest string) bool {
	un, err := url.PathUnescape(rest)
	if err != nil {
		return false
	}
	for seg := range strings.FieldsFuncSeq(un, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// callerScope reports whether a failed call says nothing sure about its
// key (unsure: the request moves to the next key, nothing is held, and
// when every key refused the provider's answer is the caller's). That is
// so of a refusal another key may not give (failure.Result.KeyDependent:
// Gemini's of a file another key's project holds), and of what follows
// when the caller, not the configuration, chose what the call names
// (callerChose): a passthrough path (passthrough), or a model a provider
// does not list (an unlisted model).
// A model or region class is held per model, which means something for a
// model the operator listed; a caller's model may be a typo, and a
// passthrough call names no model at all (held per model, that would be
// the whole key) while its path may name the caller's own resource (a
// file, a batch) that does not exist. So such a refusal holds nothing: an
// unlisted model's moves the request to the next key (unsure: a key may
// lack a model another key has), and when every key refused, the
// provider's answer is the caller's; a passthrough call's is the caller's
// answer at once, returned as the provider gave it.
//
// A passthrough call's refused credential may be refused for this
// endpoint only (a restricted key without the Files API's scope, "Missing
// scopes: api.files.read") or for good (a revoked key): one that says so
// (a 403, a 401 naming a scope or a permission) moves the call to the next
// key but holds nothing (unsure), so the key's other uses go on; a plain
// 401 holds the key. A spent quota, a rate limit and a transient failure
// are about the key and count as usual.
func callerScope(ae *attemptError, callerChose, passthrough bool) (unsure bool) {
	if ae.result.KeyDependent {
		return true
	}
	if !callerChose {
		return false
	}
	switch ae.result.Class {
	case failure.ModelNotAccessible, failure.ModelRetired, failure.RegionBlocked:
		if !passthrough {
			return true
		}
		ae.result.Class, ae.result.Scope = failure.RequestRejected, failure.ScopeNone
		ae.result.RetryAfter, ae.result.HasWait = 0, false
	case failure.CredentialRejected:
		// A 401 that names a scope or a permission, or a 403: this
		// endpoint's. A plain 401 (a revoked key) holds the key.
		return passthrough && (ae.status == http.StatusForbidden || scopeRE.Match(ae.body))
	}
	return false
}

// scopeRE finds a refusal about what a credential may do rather than
// whether it is valid ("Missing scopes: api.files.read", "insufficient
// permissions").
var scopeRE = regexp.MustCompile(`(?i)scope|permission`)

// forward sends the caller's request to the path under the provider's base
// URL with the key's credentials; nil when it was answered with a success
// (2xx or 3xx), relayed to the caller.
func (r *request) forward(c *fiber.Ctx, at *attempt, method, rest string) *attemptError {
	t := at.target
	p := t.step.Provider
	up := r.rt.upstreams[p.Index]
	timeout, deadline, callerDeadline := r.attemptDeadline(up, at.probeEnd)
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	uri := p.Adapter.Base() + "/" + rest
	if q := c.Request().URI().QueryString(); len(q) > 0 {
		uri += "?" + string(q)
	}
	req.SetRequestURI(uri)
	req.Header.SetMethod(method)
	c.Request().Header.VisitAll(func(k, v []byte) {
		name := string(k)
		if namedIn(name, provider.ClientCredentialHeaders, hopHeaders, accountHeaders) {
			return
		}
		if strings.EqualFold(name, telemetry.HeaderTraceParent) || strings.EqualFold(name, telemetry.HeaderTraceState) {
			return // the request's own trace context, set below
		}
		if r.idem.key == "" && strings.EqualFold(name, "Idempotency-Key") {
			return // an invalid one, ignored (takeIdempotencyKey)
		}
		req.Header.SetBytesKV(k, v)
	})
	req.Header.Set(headerRequestID, r.id)
	r.tc.SetHeaders(&req.Header)
	up.SetAuth(req, p.Adapter, t.key.Index(), t.key.Secret())
	req.SetBodyRaw(r.body)

	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	r.caller.sending.Store(int64(upstream.SendingNow()))
	sent := time.Now()
	at.sent = sent
	err := up.Do(req, resp, deadline)
	r.caller.sending.Store(0)
	if err != nil {
		ae := &attemptError{err: upstream.TransportError(err, timeout, callerDeadline)}
		r.fail(t, ae)
		return ae
	}
	status := resp.StatusCode()
	at.latency = time.Since(sent)
	up.Latency().Observe(at.latency.Seconds())
	if status >= 400 {
		ae := &attemptError{status: status, header: upstream.HeaderOf(&resp.Header), body: bytes.Clone(resp.Body())}
		r.fail(t, ae)
		return ae
	}
	c.Status(status)
	resp.Header.VisitAll(func(k, v []byte) {
		name := string(k)
		if gatewayHeader(name) {
			return // the gateway's own (set below): an upstream's never replaces them
		}
		if namedIn(name, hopHeaders) {
			return
		}
		c.Response().Header.SetBytesKV(k, v)
	})
	r.setServedBy(c, t)
	c.Response().SetBody(resp.Body()) // a copy: resp goes back to its pool
	if !binaryType(resp.Header.ContentType()) {
		r.use.estOut = int64(len(resp.Body()) / 4) // a download (a file's content) is not tokens
	}
	r.logInfo("passthrough served", t, slog.String("path", t.step.Upstream), slog.Int("status", status))
	return nil
}

// returnPassthrough answers the caller with the provider's own error,
// masked for its secrets.
func (r *request) returnPassthrough(c *fiber.Ctx, t target, ae *attemptError) error {
	status := ae.status
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	r.setServedBy(c, t)
	r.class = ae.result.Class.String()
	if len(ae.body) == 0 {
		return sendErrorStatus(c, r.ep.format, status, gwerror.ProviderError, "upstream error: "+ae.summary())
	}
	c.Status(status)
	if ct := ae.header.Get(fiber.HeaderContentType); ct != "" {
		c.Set(fiber.HeaderContentType, ct)
	}
	for _, h := range waitHeaders {
		if v := ae.header.Get(h); v != "" {
			c.Set(h, v)
		}
	}
	return c.Send(redact.Body(ae.body, providerSecrets(t.step.Provider)...))
}

// binaryType reports whether a content type is one whose bodies are not
// text (files, audio, images, multipart uploads): their size estimates no
// tokens. Anything else (JSON, event streams, text, forms, none) does.
func binaryType(ct []byte) bool {
	mt, _, _ := bytes.Cut(ct, []byte(";"))
	mt = bytes.ToLower(bytes.TrimSpace(mt))
	for _, prefix := range []string{"audio/", "image/", "video/", "multipart/"} {
		if bytes.HasPrefix(mt, []byte(prefix)) {
			return true
		}
	}
	switch string(mt) {
	case "application/octet-stream", "application/pdf", "application/zip", "application/gzip", "application/x-tar":
		return true
	}
	return false
}
