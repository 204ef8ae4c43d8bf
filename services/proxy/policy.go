package proxy

// The policy trace of a request's debug bundle: which rules of which plan
// it was checked against and what each decided, and which guardrails the
// route, plan and client key attached (the level that set each one's
// action). Built only when the request is traced.

import (
	"switchyard.dev/services/proxy/internal/guard"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/planlimit"
)

// Verdicts of a plan's rule in the policy trace.
const (
	ruleNotChecked = "not_checked"
	rulePassed     = "passed"
	ruleRefused    = "refused"
)

// attachmentLevels name the levels of config.Effective's lists.
var attachmentLevels = [...]string{"route", "plan", "client"}

// policy is the request's policy trace, made on first use.
func (r *request) policy() *debug.Policy {
	if r.trace.policy == nil {
		r.trace.policy = &debug.Policy{}
		if r.client != nil {
			r.trace.policy.Plan = r.client.Plan
		}
	}
	return r.trace.policy
}

// tracePlanRules notes the verdict of each of lim's rules: passed up to
// the one ref names (refused), not checked after it.
func (r *request) tracePlanRules(lim *planlimit.Limits, ref *planlimit.Refusal) {
	if lim == nil {
		return
	}
	p := r.policy()
	verdict := rulePassed
	for _, rule := range lim.Rules(nil) {
		v := verdict
		if ref != nil && rule.Name == ref.Limit {
			v, verdict = ruleRefused, ruleNotChecked
		}
		p.Rules = append(p.Rules, debug.PolicyRule{Rule: rule.Name, Limit: rule.Limit, Verdict: v})
	}
}

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
