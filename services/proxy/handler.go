package proxy

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"switchyard.dev/services/proxy/internal/gwerror"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/usage"
)

// endpoint is one of the proxy's inference routes.
type endpoint struct {
	name   string
	path   string
	format provider.Format // the caller's wire format
	op     provider.Op
}

var (
	epChat       = &endpoint{name: "chat.completions", path: "/v1/chat/completions", format: provider.FormatOpenAI, op: provider.OpChat}
	epMessages   = &endpoint{name: "messages", path: "/v1/messages", format: provider.FormatAnthropic, op: provider.OpChat}
	epEmbeddings = &endpoint{name: "embeddings", path: "/v1/embeddings", format: provider.FormatOpenAI, op: provider.OpEmbeddings}
	// OpenAI's legacy completions, moderations and image generations, and
	// Anthropic's token counting: served natively by providers of their
	// format (no translation).
	epCompletions = &endpoint{name: "completions", path: "/v1/completions", format: provider.FormatOpenAI, op: provider.OpCompletions}
	epModerations = &endpoint{name: "moderations", path: "/v1/moderations", format: provider.FormatOpenAI, op: provider.OpModerations}
	epImages      = &endpoint{name: "images.generations", path: "/v1/images/generations", format: provider.FormatOpenAI, op: provider.OpImages}
	epCountTokens = &endpoint{name: "messages.count_tokens", path: "/v1/messages/count_tokens", format: provider.FormatAnthropic, op: provider.OpCountTokens}
	// The Responses API, served natively by the providers that have it.
	epResponses = &endpoint{name: "responses", path: "/v1/responses", format: provider.FormatResponses, op: provider.OpResponses}
	// Audio: speech answers binary audio, transcriptions take a form.
	epSpeech         = &endpoint{name: "audio.speech", path: "/v1/audio/speech", format: provider.FormatOpenAI, op: provider.OpSpeech}
	epTranscriptions = &endpoint{name: "audio.transcriptions", path: "/v1/audio/transcriptions", format: provider.FormatOpenAI, op: provider.OpTranscriptions}

	// endpoints are the inference routes, by name.
	endpoints = []*endpoint{epChat, epMessages, epEmbeddings, epCompletions, epModerations, epImages, epCountTokens, epResponses,
		epSpeech, epTranscriptions}
)

// Response headers naming what served a request.
const (
	headerRequestID = "X-Request-Id"
	headerProvider  = "X-Switchyard-Provider"
	headerKeyID     = "X-Switchyard-Key-Id"
	headerModel     = "X-Switchyard-Model"
	headerAttempts  = "X-Switchyard-Attempts"
)

// handle serves one inference request: authenticate, parse, resolve, then
// try targets until one answers.
func (s *Service) handle(ep *endpoint) fiber.Handler {
	return func(c *fiber.Ctx) error {
		r := &request{s: s, ep: ep, started: time.Now()}
		r.id = string(c.Response().Header.Peek(headerRequestID)) // set by the request-id middleware
		r.caller.idChosen = string(c.Request().Header.Peek(headerRequestID)) == r.id

		if n := s.life.inFlight.Add(1); n > int64(s.cfg.Limits.MaxInFlight) {
			s.life.inFlight.Add(-1)
			r.class = classRejected
			c.Set(fiber.HeaderRetryAfter, "1") // a slot frees as soon as a request ends
			err := sendError(c, ep.format, gwerror.Overloaded,
				fmt.Sprintf("the gateway is at its limit of %d requests in flight; retry shortly", s.cfg.Limits.MaxInFlight))
			r.record(c.Response().StatusCode())
			return err
		}
		r.rt = s.useRouting()
		r.startTrace(c, s.bundles.on())
		s.callers.add(r, c.Context().Conn())
		var res outcome
		if ep == epPassthrough {
			res = r.servePassthrough(c)
			if r.ep.format == provider.FormatAnthropic {
				setAnthropicRequestID(c) // the gateway's, not the provider's relayed
			}
		} else {
			res = r.serve(c)
		}
		if res.relay == nil && res.binary == nil {
			s.callers.remove(r) // a relay stays watched until it ends
		}
		if r.caller.gone.Load() {
			r.class = classCallerGone
		}
		if res.relay != nil {
			res.relay.start(c) // the relay ends the request when the stream ends
			return nil
		}
		if res.binary != nil {
			res.binary.start(c) // the relay ends the request when the audio ends
			return nil
		}
		r.noteResponse(c)
		r.finish(c.Response().StatusCode())
		return res.err
	}
}

// useRouting returns the routing in use, counted as used (active) by one
// more request: a swap between the load and the count would let the old
// routing close its pools under the request, so the count is checked
// against the routing in use after it is made.
func (s *Service) useRouting() *routing {
	for {
		rt := s.rt.Load()
		rt.active.Add(1)
		if s.rt.Load() == rt {
			return rt
		}
		rt.active.Add(-1) // swapped meanwhile: take the new one
	}
}

// serve authenticates, parses and resolves the request, then tries targets.
func (r *request) serve(c *fiber.Ctx) outcome {
	s, ep := r.s, r.ep
	client, ok := r.rt.clients.Load().authenticate(c)
	r.client = client
	if !ok {
		r.class = classRejected
		r.trace.on = false // no bundle for a caller that is not one (a flood must not fill the stream)
		return outcome{err: sendError(c, ep.format, gwerror.InvalidAPIKey, "missing or invalid gateway API key")}
	}
	body, berr := requestBody(c, s.cfg.Limits.MaxBodyBytes)
	if berr != nil {
		r.class = classRejected
		return outcome{err: sendError(c, ep.format, berr.code, berr.msg)}
	}
	r.body = body
	r.readTraceContext(c)
	r.noteRequest(c)
	var model string
	var stream bool
	if ep.op == provider.OpTranscriptions {
		r.contentType = strings.Clone(c.Get(fiber.HeaderContentType))
		model, berr = parseForm(r.body, r.contentType)
	} else {
		var p parsed
		p, berr = readBody(r.body, ep.op)
		// stream_options count for an OpenAI-format stream only.
		model, stream, r.use.callerUsage = p.model, p.stream, p.callerUsage && ep.format == provider.FormatOpenAI
	}
	if berr != nil {
		r.class = classRejected
		return outcome{err: sendError(c, ep.format, berr.code, berr.msg)}
	}
	r.model, r.stream = model, stream
	rte, ok := r.rt.table.Resolve(model)
	if !ok {
		r.class = classRejected
		return outcome{err: sendError(c, ep.format, gwerror.ModelNotFound,
			fmt.Sprintf("the model `%s` does not exist on this gateway", model))}
	}
	if rte.Dynamic {
		r.resolved = s.metrics.modelLabel(rte.Steps[0].Provider.Name + "/*") // callers name these: no label per name
	} else {
		r.resolved = s.metrics.modelLabel(rte.CountedAs(model))
	}
	steps := rte.Steps
	if kind, ok := wrongKind(steps, ep.op); !ok {
		r.class = classRejected
		return outcome{err: sendError(c, ep.format, gwerror.UnsupportedForKind,
			fmt.Sprintf("the model `%s` is %s", model, kindHint(kind)))}
	}
	if client != nil && !client.allows(model, steps) {
		r.class = classRejected
		r.trace.access = gwerror.ModelNotAllowed
		return outcome{err: sendError(c, ep.format, gwerror.ModelNotAllowed,
			fmt.Sprintf("this API key may not use the model `%s`", model))}
	}
	r.takeIdempotencyKey(c)
	r.estimateInput()
	if ok, err := r.admit(c, steps); !ok {
		return outcome{err: err}
	}
	r.deadline = s.deadline(c, r.started)
	if s.cfg.Timeouts.Request > 0 {
		r.relayDeadline = r.started.Add(s.cfg.Timeouts.Request)
	}
	r.selection(c, rte)
	return r.run(c, rte)
}

// wrongKind reports whether some step of a model can serve op: a chat
// request to an embedding model (or the reverse) is refused before any
// upstream call. Steps of unknown kind are given the benefit of the doubt.
func wrongKind(steps []route.Step, op provider.Op) (kind string, ok bool) {
	for i := range steps {
		if k := steps[i].Kind; k == "" || kindServes(k, op) {
			return "", true
		}
		kind = steps[i].Kind
	}
	return kind, len(steps) == 0
}

// kindServes reports whether a model of kind serves op: legacy completions
// on completion and chat models (OpenAI-compatible servers complete with
// their chat models), token counts on chat models.
func kindServes(kind string, op provider.Op) bool {
	switch op {
	case provider.OpEmbeddings:
		return kind == config.KindEmbedding
	case provider.OpCompletions:
		return kind == config.KindCompletion || kind == config.KindChat
	case provider.OpModerations:
		return kind == config.KindModeration
	case provider.OpImages:
		return kind == config.KindImage
	case provider.OpSpeech:
		return kind == config.KindSpeech
	case provider.OpTranscriptions:
		return kind == config.KindTranscript
	}
	return kind == config.KindChat
}

func kindHint(kind string) string {
	switch kind {
	case config.KindEmbedding:
		return "an embedding model: use POST /v1/embeddings"
	case config.KindCompletion:
		return "a completion model: use POST /v1/completions"
	case config.KindModeration:
		return "a moderation model: use POST /v1/moderations"
	case config.KindImage:
		return "an image model: use POST /v1/images/generations"
	case config.KindSpeech:
		return "a speech model: use POST /v1/audio/speech"
	case config.KindTranscript:
		return "a transcription model: use POST /v1/audio/transcriptions"
	}
	return "a chat model: use POST /v1/chat/completions or /v1/messages"
}

// expired reports whether the request ran out of time: its deadline
// passed, its caller went away or the proxy is shutting down.
func (r *request) expired() bool {
	return r.s.life.closing.Load() || r.caller.gone.Load() || (!r.deadline.IsZero() && !time.Now().Before(r.deadline))
}

// callerGone is called once, under the caller watch's lock, when the
// caller closed its connection: the request makes no further attempt, and
// the upstream read of its relay, if it has one, fails at once (the relay
// still holds the connection: it leaves the watch before it lets it go).
// The watch then calls cutAttempt, outside its lock. gone is set before
// relayUp is read, and a relay sets relayUp before it reads gone: either
// the read is cut here or the relay sees gone before it reads.
func (r *request) callerGone() {
	r.caller.gone.Store(true)
	if r.caller.goneCh != nil {
		close(r.caller.goneCh)
	}
	if c := r.caller.relayUp.Load(); c != nil {
		c.cut()
	}
}

// cutAttempt interrupts the attempt in flight of a request whose caller
// went away. It is found by its X-Request-Id, written on one upstream
// connection since the attempt was sent. Only an id the gateway made is
// unique: a caller may choose its own, and another request (of the same
// caller, or another) may carry the same one, so a request with a chosen
// id is not interrupted (its attempt runs to its answer or timeout); one
// caller leaving never cuts another's exchange. It walks every upstream's
// connections, so the watch calls it without holding the lock every
// request takes on its way in and out.
func (r *request) cutAttempt() {
	since := time.Duration(r.caller.sending.Load())
	if since == 0 || r.caller.idChosen {
		return // between attempts, or an id that may not be this request's alone
	}
	h := maphash.String(idSeed, r.id)
	var buf [2]*trackedConn
	found := buf[:0]
	for _, u := range r.rt.upstreams {
		found = u.conns.carrying(found, h, since)
	}
	if len(found) == 1 {
		found[0].interrupt(h, since)
	}
}

// goneC is a channel closed when the caller goes away, made on first use:
// most requests never wait on it.
func (r *request) goneC() <-chan struct{} {
	w := r.s.callers
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.caller.goneCh == nil {
		r.caller.goneCh = make(chan struct{})
		if r.caller.gone.Load() {
			close(r.caller.goneCh)
		}
	}
	return r.caller.goneCh
}

// finish ends a request that held an in-flight slot.
func (r *request) finish(status int) {
	r.s.life.inFlight.Add(-1)
	r.record(status)
	r.rt.active.Add(-1)
}

// record counts the request in the metrics and, when it reached routing,
// meters it (one usage record); a caller's request refused before routing
// (malformed, an unknown or forbidden model: a 4xx but 401, an unknown
// caller, and 429, a plan's limit, which the limiter counts) gets a usage
// record too, with its status and no provider, so Usage counts refusals;
// then it queues its debug bundle.
func (r *request) record(status int) {
	r.s.metrics.request(r, status)
	if !r.use.routed && r.rt != nil && status >= 400 && status < 500 && status != fiber.StatusUnauthorized && status != fiber.StatusTooManyRequests {
		rec := r.usageRecord(status)
		rec.CostUSD = new(float64) // nothing went upstream: it cost nothing (known, not unknown)
		r.s.meter.observe(&rec, "")
	}
	if r.use.routed {
		rec := r.usageRecord(status)
		r.done(&rec)
		model := rec.Model
		if r.ep == epPassthrough || r.ep == epPassthroughAnthropic || (r.sel.route != nil && r.sel.route.Dynamic) {
			model = unlistedModelLabel // callers name these (a model, a path): no label per name
		}
		r.s.meter.observe(&rec, model)
		if r.trace.on {
			r.trace.rec = new(usage.Record) // made only when tracing: a request without it stays small
			*r.trace.rec = rec
		}
	}
	if r.trace.on {
		r.trace.status, r.trace.ended = status, time.Since(r.started)
		r.s.bundles.done(r) // nothing of r changes from here on
	}
}

// usageRecord is the request's usage record: what served it, its tokens
// (the provider's, else estimated: input from the body's size, output from
// the answer's), their cost at the price table's prices (unknown: nil) and
// its timings.
func (r *request) usageRecord(status int) usage.Record {
	rec := usage.Record{
		V: usage.SchemaVersion, RequestID: r.id, At: time.Now().UTC(), ClientType: r.use.clientType,
		Endpoint: r.ep.path, ModelRequested: r.modelCounted(), Attempts: r.tally.attempts, Status: status,
		LatencyMS: float64(time.Since(r.started).Microseconds()) / 1000, TTFTMS: float64(r.use.ttft.Microseconds()) / 1000,
		Stream: r.stream, StreamCompleted: r.use.streamDone, Cancelled: r.use.cancelled || r.caller.gone.Load(),
		Tokens: r.use.tokens, FailedAttempts: r.tally.failed,
	}
	if r.client != nil {
		rec.ClientID, rec.Plan = r.client.id, r.client.plan
	}
	switch {
	case r.by.provider != "":
		rec.Provider, rec.ProviderType, rec.Model, rec.KeyID = r.by.provider, r.by.provType, r.by.upModel, r.by.keyID
	case r.tally.last != nil:
		t := r.tally.last.t
		rec.Provider, rec.ProviderType, rec.Model, rec.KeyID = t.step.Provider.Name, t.step.Provider.Adapter.Type(), t.step.Upstream, t.key.ID
	}
	if class := r.outcomeClass(status); class != classOK {
		rec.Class = class
	}
	switch {
	case status == fiber.StatusOK && r.ep.op == provider.OpCountTokens:
		// counting tokens costs none (the providers do not bill it)
	case status == fiber.StatusOK && !r.use.tokensOK:
		rec.Tokens, rec.TokensEstimated = usage.Tokens{Input: r.use.estIn, Output: r.use.estOut}, true
	case status == fiber.StatusOK && r.stream && !r.use.streamDone && rec.Tokens.Output < r.use.estOut:
		// A stream that ended early (the caller left, the upstream cut
		// it) has only its opening usage (Anthropic's message_start says
		// 1 output token): what it relayed is estimated.
		rec.Tokens.Output, rec.TokensEstimated = r.use.estOut, true
	}
	if status == fiber.StatusOK || r.use.tokensOK {
		if usd, ok := r.rt.prices.Cost(rec.Provider, rec.ProviderType, rec.Model, rec.Tokens); ok {
			rec.CostUSD = &usd
		}
	}
	return rec
}

// outcomeClass is the request's outcome class (switchyard_requests_total's
// class label; the usage record's class unless ok).
func (r *request) outcomeClass(status int) string {
	switch {
	case r.class != "":
		return r.class
	case status == fiber.StatusOK:
		return classOK
	case r.tally.last != nil:
		return r.tally.last.result.Class.String()
	}
	return classUnavailable
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

// maxCallerTimeout is the longest timeout a caller may state (a day): a
// larger one means "no timeout of mine".
const maxCallerTimeout = 24 * time.Hour

// deadline is when the request must be answered: the earliest of the
// caller's stated timeout (X-Stainless-Timeout, as the OpenAI and Anthropic
// SDKs send it, or X-Request-Timeout) and timeouts.request.
func (s *Service) deadline(c *fiber.Ctx, start time.Time) time.Time {
	var d time.Duration
	if s.cfg.Timeouts.Request > 0 {
		d = s.cfg.Timeouts.Request
	}
	for _, h := range [...]string{"X-Stainless-Timeout", "X-Request-Timeout"} {
		if v := c.Get(h); v != "" {
			if secs, err := strconv.ParseFloat(v, 64); err == nil && secs > 0 && !math.IsInf(secs, 0) {
				// Clamped before the conversion: 1e10 s would overflow
				// time.Duration into a negative (already past) deadline.
				cd := maxCallerTimeout
				if secs < maxCallerTimeout.Seconds() {
					cd = time.Duration(secs * float64(time.Second))
				}
				if d == 0 || cd < d {
					d = cd
				}
			}
		}
	}
	if d == 0 {
		return time.Time{}
	}
	return start.Add(d)
}

// logger returns the request's logger, built on first use.
func (r *request) logger() *slog.Logger {
	if r.log == nil {
		r.log = r.s.log.With("request_id", r.id)
	}
	return r.log
}

// outcome is how a request ended in the handler: a response already
// written (err from writing it), or a stream relay to start.
type outcome struct {
	err    error
	relay  *relay
	binary *binaryRelay // a binary answer (speech) to stream through
}

// run tries the steps in order until one answers, applying each failure's
// action: retry the same target, rotate the key, or return to the caller.
// When every candidate is held, the all-held policy decides: fail fast
// (503), or try the targets held only by soft holds (a tripped breaker, a
// rate limit) in declared order, so that bookkeeping never makes things
// worse than having no breaker.
func (r *request) run(c *fiber.Ctx, rte *route.Route) outcome {
	r.use.routed = true
	r.use.clientType = usage.ClientType(c.Get(fiber.HeaderUserAgent))
	p := pass{gate: r.s.engine}
	if out, done := r.tryRoute(c, rte, &p); done {
		return out
	}
	if r.tally.attempts == 0 && p.denied && !r.expired() && r.s.trySoft(rte) {
		p = pass{gate: softGate{engine: r.s.engine, deadline: r.deadline}, soft: true}
		r.logger().Warn("every target is held; trying soft holds in declared order", "model", r.model)
		if out, done := r.tryRoute(c, rte, &p); done {
			return out
		}
	}
	return r.exhausted(c, rte, &p)
}

// trySoft reports whether the all-held policy of some step's provider
// (its providers[].resilience.all_held_policy, else the global one) is
// try_soft: only then does a request every target of which is held make
// the soft pass (AdmitSoft answers for each provider by its own policy).
func (s *Service) trySoft(rte *route.Route) bool {
	pol := s.engine.Policy()
	for i := range rte.Steps {
		if st := &rte.Steps[i]; st.Usable() && pol.For(st.Provider.Name).AllHeld != config.AllHeldFailFast {
			return true
		}
	}
	return false
}

// tryRoute walks the route's candidates once (tryTargets), in its
// policy's order, or in declared order on the soft pass.
func (r *request) tryRoute(c *fiber.Ctx, rte *route.Route, p *pass) (outcome, bool) {
	rte.Start(&r.sel.cur, &r.sel.req)
	if p.soft {
		r.sel.cur.InDeclaredOrder() // every target is held: the declared order, health aside
	}
	x := exchange{cur: &r.sel.cur, dynamic: rte.Dynamic, replaySafe: true}
	return r.tryTargets(c, &x, p)
}

// bodyFor returns the request body for a step: the caller's body with the
// model renamed, or translated into the provider's format.
func (r *request) bodyFor(step *route.Step) ([]byte, error) {
	a := step.Provider.Adapter
	pf := a.Format()
	if r.ep.op == provider.OpResponses && !a.Supports(provider.OpResponses) {
		return r.responsesBody(step)
	}
	if pf == r.ep.format || r.ep.op != provider.OpChat { // only chat translates; Supports kept the others to their format
		body := r.body
		var buf [2]jsonfield.Edit
		edits := buf[:0]
		if r.stream && pf == provider.FormatOpenAI && (r.ep.op == provider.OpChat || r.ep.op == provider.OpCompletions) {
			body, edits = streamOptionsFor(a, body, edits, r.use.callerUsage)
		}
		if step.Upstream != r.model {
			if r.ep.op == provider.OpTranscriptions {
				return formWithModel(body, r.contentType, step.Upstream)
			}
			edits = append(edits, jsonfield.EditString("model", step.Upstream))
		}
		if len(edits) == 0 {
			return body, nil
		}
		// One walk and one copy for both edits.
		return jsonfield.Rewrite(make([]byte, 0, len(body)+len(step.Upstream)+len(streamUsageField)), body, edits...), nil
	}
	return r.translatedFor(step, func() ([]byte, error) { return translateRequest(r.ep.format, r.body, step.Upstream) })
}

// translatedFor is the request translated into step's provider format,
// built by build once per format for the request, with step's model
// name (the translation carries the first translated step's), no
// stream_options where the provider rejects them, and max_tokens named
// max_completion_tokens where the provider wants that (withMaxCompletionTokens).
func (r *request) translatedFor(step *route.Step, build func() ([]byte, error)) ([]byte, error) {
	a := step.Provider.Adapter
	pf := a.Format()
	if r.trans.bodies[pf] == nil && r.trans.errs[pf] == nil {
		r.trans.bodies[pf], r.trans.errs[pf] = build()
	}
	if r.trans.errs[pf] != nil {
		return nil, r.trans.errs[pf]
	}
	body := jsonfield.SetString(nil, r.trans.bodies[pf], "model", step.Upstream)
	if r.stream && a.RejectsStreamOptions() {
		body = jsonfield.Delete(nil, body, "stream_options")
	}
	if a.TakesMaxCompletionTokens() {
		body = withMaxCompletionTokens(body)
	}
	return body, nil
}

// streamOptionsFor is what an OpenAI-format stream request's body needs
// for a provider: one that refuses stream_options (Mistral, which reports
// usage anyway) gets none (the body is copied without them); one that
// reports a stream's usage only when asked gets stream_options.include_usage
// unless the caller asked already (an edit appended to edits, for the
// caller's Rewrite; the relay then keeps the usage chunk from a caller that
// did not ask).
func streamOptionsFor(a *provider.Adapter, body []byte, edits []jsonfield.Edit, callerAsked bool) ([]byte, []jsonfield.Edit) {
	switch {
	case a.RejectsStreamOptions():
		if _, _, _, ok := jsonfield.Find(body, "stream_options"); ok {
			return jsonfield.Delete(make([]byte, 0, len(body)), body, "stream_options"), edits
		}
	case a.StreamUsageOption() && !callerAsked:
		return body, append(edits, streamUsageEdit)
	}
	return body, edits
}

// setRequestID sets the response's X-Request-Id: the caller's own when it
// is visible ASCII of at most 128 bytes, else a new one (newRequestID);
// and request-id, the same, when the caller speaks Anthropic's format
// (f, from Service.formatOf).
func setRequestID(c *fiber.Ctx, f provider.Format) {
	h := &c.Response().Header
	if given := c.Request().Header.Peek(headerRequestID); len(given) <= 128 && visibleASCII(given) {
		h.SetCanonical(hdrRequestID, given) // a copy
	} else {
		var b [requestIDLen]byte
		h.SetCanonical(hdrRequestID, newRequestID(&b))
	}
	if f == provider.FormatAnthropic {
		setAnthropicRequestID(c)
	}
}

// setAnthropicRequestID sets request-id to the response's X-Request-Id:
// Anthropic's API names its request id so, and its SDKs read it from there
// (anthropic-sdk-go's Error.RequestID). Set on answers in Anthropic's
// format (formatOf, an Anthropic endpoint, a passthrough to an Anthropic
// provider).
func setAnthropicRequestID(c *fiber.Ctx) {
	h := &c.Response().Header
	h.SetCanonical(hdrAnthropicRequestID, h.Peek(headerRequestID)) // copied into its own value
}

// hdrAnthropicRequestID is X-Request-Id again, on answers in Anthropic's
// format, whose API and SDKs name the request id so.
var hdrAnthropicRequestID = []byte("Request-Id")

// requestIDLen is the length of a generated request id.
const requestIDLen = 4 + 24

// newRequestID writes a new request id into b: req_ and 96 bits from the
// runtime's ChaCha8 generator (seeded from the OS, no system call): unique,
// and hard to guess (though not a secret: ids are no credential anywhere).
func newRequestID(b *[requestIDLen]byte) []byte {
	copy(b[:], "req_")
	hexOf(b[4:16], rand.Uint64()>>16)
	hexOf(b[16:], rand.Uint64()>>16)
	return b[:]
}

// hexOf writes the low 4*len(dst) bits of v into dst as lowercase hex.
func hexOf(dst []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = digits[v&0xf]
		v >>= 4
	}
}

func validIdempotencyKey(k string) bool { return len(k) <= 255 && visibleASCII(k) }

// headerWarning says what the gateway did with a request other than the
// caller asked (an Idempotency-Key it ignored).
const headerWarning = "X-Switchyard-Warning"

// takeIdempotencyKey takes the caller's Idempotency-Key: a valid one goes
// upstream with the request's attempts (see idemFor); an invalid one
// (over 255 characters, or not visible ASCII) is ignored, not forwarded
// and with no replay protection, and the answer carries headerWarning
// saying so.
func (r *request) takeIdempotencyKey(c *fiber.Ctx) {
	switch k := c.Get("Idempotency-Key"); {
	case k == "":
	case validIdempotencyKey(k):
		r.idem.key = strings.Clone(k)
	default:
		c.Set(headerWarning, "Idempotency-Key ignored: it must be 1 to 255 visible ASCII characters; the request was sent without it")
	}
}

func visibleASCII[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return len(s) > 0
}
