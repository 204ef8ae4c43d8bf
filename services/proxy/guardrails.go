package proxy

// Guardrails on what a request sends upstream: the route's, its client
// key's plan's and its client key's (internal/guard), checked once the
// request is read and before its plan counts it. A block answers 400
// guardrail_blocked; a redaction replaces the body every attempt sends.

import (
	"sync"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/internal/guard"
	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/provider"
)

// guardFormat is the guard format of an endpoint (false: guardrails do not
// read its requests: a multipart upload, a model list).
func guardFormat(ep *endpoint) (guard.Format, bool) {
	switch ep.op {
	case provider.OpChat, provider.OpCountTokens:
		if ep.format == provider.FormatAnthropic {
			return guard.Messages, true
		}
		return guard.Chat, true
	case provider.OpResponses:
		return guard.Responses, true
	case provider.OpCompletions, provider.OpImages:
		return guard.Completions, true // their text is "prompt"
	case provider.OpEmbeddings, provider.OpModerations, provider.OpSpeech:
		return guard.Embeddings, true // their text is "input"
	}
	return 0, false
}

// textsPool keeps the buffers guardrails read a request's text with.
var textsPool = sync.Pool{New: func() any { return new(guard.Texts) }}

// checkGuardrails runs the request's guardrails. It reports whether the
// request goes on; when not, the caller got the block.
func (r *request) checkGuardrails(c *fiber.Ctx, rte *route.Route) (bool, error) {
	set := r.rt.guards
	f, ok := guardFormat(r.ep)
	if !ok || set == nil {
		return true, nil
	}
	q := guard.Request{RouteName: rte.Name, Body: r.body, Format: f, InputTokens: r.use.estIn}
	if r.client != nil {
		q.Client, q.Plan = r.client.guardrails, r.client.planGuardrails
	}
	if !set.Active(&q) {
		return true, nil
	}
	tx := textsPool.Get().(*guard.Texts)
	q.Texts = tx
	res := set.Check(&q)
	textsPool.Put(tx)
	for _, d := range res.Decisions {
		r.s.metrics.guardrail(d.Guardrail, d.Verdict)
		if r.trace.on {
			r.trace.guards = append(r.trace.guards, debug.GuardrailDecision{Guardrail: d.Guardrail, Action: d.Action,
				Verdict: d.Verdict, Check: d.Check, TookUS: float64(d.Took.Nanoseconds()) / 1e3})
		}
	}
	for _, d := range res.Decisions {
		if d.Verdict == config.ActionWarn {
			r.logger().Warn("guardrail warns", "guardrail", d.Guardrail, "check", d.Check)
		}
	}
	if res.Blocked != nil {
		r.class = classRejected
		r.logger().Info("guardrail blocked the request", "guardrail", res.Blocked.Guardrail, "check", res.Blocked.Check)
		return false, sendError(c, r.ep.format, gwerror.GuardrailBlocked, res.Blocked.Message())
	}
	if res.Body != nil {
		r.body = res.Body
	}
	return true, nil
}
