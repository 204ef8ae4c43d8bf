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
	"switchyard.dev/shared/hold"
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

// guardRequest is what the guardrails read of the request on route
// routeName, at the input stage or, with output, of its answer (false:
// guardrails do not read this endpoint's requests or answers).
func (r *request) guardRequest(routeName string, output bool) (guard.Request, bool) {
	f, ok := guardFormat(r.ep)
	if ok && output {
		f, ok = guard.AnswerOf(f)
		ok = ok && r.ep.op != provider.OpImages // its answer is images
	}
	if !ok || r.rt.guards == nil {
		return guard.Request{}, false
	}
	q := guard.Request{RouteName: routeName, Body: r.body, Format: f, InputTokens: r.use.estIn, Output: output}
	if r.client != nil {
		q.Client, q.Plan = r.client.Guardrails, r.client.PlanGuardrails
	}
	return q, r.rt.guards.Active(&q)
}

// checkGuardrails runs the request's input guardrails. It reports whether
// the request goes on; when not, the caller got the block.
func (r *request) checkGuardrails(c *fiber.Ctx, rte *route.Route) (bool, error) {
	q, ok := r.guardRequest(rte.Name, false)
	if r.trace.on && q.RouteName != "" {
		r.traceAttachments(&q)
	}
	if !ok {
		return true, nil
	}
	res := r.runGuardrails(&q)
	if res.Blocked != nil {
		r.class = classRejected
		r.guardrailBlocked(res.Blocked, rte.Name, config.StageInput, "guardrail blocked the request")
		return false, sendError(c, r.ep.format, gwerror.GuardrailBlocked, res.Blocked.Message())
	}
	if res.Body != nil {
		r.body = res.Body
	}
	return true, nil
}

// checkAnswer runs the output guardrails on a plain answer in the
// caller's format: it returns the answer to relay (redacted), and false
// when a guardrail blocked it.
func (r *request) checkAnswer(out []byte) ([]byte, *guard.Decision) {
	q, ok := r.guardRequest(r.sel.route.Name, true)
	if !ok {
		return out, nil
	}
	q.Body = out
	res := r.runGuardrails(&q)
	if res.Blocked != nil {
		r.guardrailBlocked(res.Blocked, q.RouteName, config.StageOutput, "guardrail blocked the answer")
		return nil, res.Blocked
	}
	if res.Body != nil {
		return res.Body, nil
	}
	return out, nil
}

// runGuardrails checks q and records the decisions. The result's
// decisions are not kept (their buffer goes back to the pool): only its
// body and its block, copied.
func (r *request) runGuardrails(q *guard.Request) guard.Result {
	tx := textsPool.Get().(*guard.Texts)
	q.Texts = tx
	res := r.rt.guards.Check(q)
	if len(res.Remote) > 0 && res.Blocked == nil {
		body := q.Body
		if res.Body != nil {
			body = res.Body // the redacted text: a check never sees what was redacted
		}
		res.Decisions = r.remoteChecks(q, body, res.Remote, res.Decisions)
		for i := range res.Decisions {
			if res.Decisions[i].Verdict == config.ActionBlock {
				res.Blocked = &res.Decisions[i]
				break
			}
		}
	}
	r.recordGuardrails(res.Decisions, q.Output)
	res.Decisions = nil
	if res.Blocked != nil {
		b := *res.Blocked
		res.Blocked = &b
	}
	textsPool.Put(tx)
	return res
}

// guardrailBlocked logs a block and publishes its event
// (switchyard.events.guardrail.<client id>): which guardrail, at which
// stage, what it found, never the text.
func (r *request) guardrailBlocked(d *guard.Decision, routeName, stage, msg string) {
	r.logger().Info(msg, "guardrail", d.Guardrail, "stage", stage, "check", d.Check, "route", routeName)
	ev := hold.Event{Kind: hold.EventGuardrail, Outcome: "blocked", Source: hold.SourceProxy, RequestID: r.id,
		Guardrail: d.Guardrail, Stage: stage, Check: d.Check, Route: routeName,
		Reason: "blocked by guardrail " + d.Guardrail + " (" + d.Check + ")"}
	if r.client != nil {
		ev.Client, ev.Plan = r.client.ID, r.client.Plan
	}
	r.s.member.Emit(ev)
}

// verdictRank orders the verdicts a usage record keeps: the strongest
// wins.
var verdictRank = map[string]int{config.ActionWarn: 1, config.ActionRedact: 2, config.ActionBlock: 3}

// recordGuardrails counts, traces and logs (warnings) guardrail decisions.
func (r *request) recordGuardrails(ds []guard.Decision, output bool) {
	stage := config.StageInput
	if output {
		stage = config.StageOutput
	}
	for _, d := range ds {
		r.s.metrics.guardrail(d.Guardrail, stage, d.Verdict)
		if verdictRank[d.Verdict] > verdictRank[r.use.guard] {
			r.use.guard, r.use.guardBy, r.use.guardStage = d.Verdict, d.Guardrail, stage
		}
		if r.trace.on {
			r.trace.guards = append(r.trace.guards, debug.GuardrailDecision{Guardrail: d.Guardrail, Stage: stage, Action: d.Action,
				Verdict: d.Verdict, Check: d.Check, TookUS: float64(d.Took.Nanoseconds()) / 1e3})
		}
		if d.Verdict == config.ActionWarn {
			r.logger().Warn("guardrail warns", "guardrail", d.Guardrail, "stage", stage, "check", d.Check)
		}
	}
}

// attachmentLevels name the levels of config.Effective's lists.
var attachmentLevels = [...]string{"route", "plan", "client"}

// traceAttachments notes the guardrails q's route, plan and client
// attach, at either stage.
func (r *request) traceAttachments(q *guard.Request) {
	as := r.rt.guards.Attachments(q)
	if len(as) == 0 {
		return
	}
	p := r.policy()
	for _, a := range as {
		p.Guardrails = append(p.Guardrails, debug.PolicyGuardrail{Guardrail: a.Name, Action: a.Action, From: attachmentLevels[a.Level]})
	}
}
