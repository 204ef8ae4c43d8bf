package proxy

// The end of a request: finish, record (metrics, the usage record, the
// debug bundle) and the usage record itself, with its outcome class.

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/usage"
)

// finish ends a request that held an in-flight slot.
func (r *request) finish(status int) {
	r.record(status)
	// After the record: a shutdown waits for no request in flight
	// (waitIdle) before it stops the usage publisher, so the request's
	// usage record, holds and bundle are queued by then.
	r.s.life.inFlight.Add(-1)
	r.rt.active.Add(-1)
}

// record counts the request in the metrics and, when it reached routing,
// meters it (one usage record); a caller's request refused before routing
// (malformed, an unknown or forbidden model: a 4xx but 401, an unknown
// caller, and 429, a plan's limit, which the limiter counts) gets a usage
// record too, with its status and no provider, so Usage counts refusals;
// then it queues its debug bundle.
func (r *request) record(status int) {
	r.cacheLand()
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
		Guardrail: r.use.guard, GuardrailName: r.use.guardBy, GuardrailStage: r.use.guardStage,
	}
	if r.client != nil {
		rec.ClientID, rec.Plan = r.client.ID, r.client.Plan
	}
	if n := r.sel.cache; n != nil {
		rec.Cache = n.result
		if n.result == cacheHit {
			rec.CacheSavedUSD = n.entry.CostUSD
		}
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
