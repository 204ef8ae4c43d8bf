package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"sync"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/fleet"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/planlimit"
	"switchyard.dev/shared/usage"
)

// planLimits enforces the plans' limits (requests and tokens per minute,
// concurrent requests, budgets) for the whole fleet before routing: the
// limiter admits from memory and shares this proxy's consumption through
// the switchyard_limits bucket (package planlimit).
type planLimits struct {
	lim *planlimit.Limiter
	// estOut is the output a request without max_tokens is assumed to
	// produce when its cost is estimated.
	estOut int64
}

func newPlanLimits(cfg *config.Config, instance string, nc *nats.Conn,
	log *slog.Logger, emit func(hold.Event)) (*planLimits, error) {
	pl := &planLimits{estOut: int64(cfg.Metering.EstimateOutputTokens)}
	lim, err := planlimit.New(planlimit.Options{
		Instance: instance, Conn: nc, Interval: cfg.Metering.LimitsInterval, Log: log,
		OnExhausted: func(x planlimit.Exhaustion) {
			ev := hold.Event{Kind: hold.EventBudget, Outcome: "exhausted", Source: hold.SourceProxy,
				Client: x.Client, Plan: x.Plan, Period: x.Period, PeriodID: x.PeriodID,
				SpendUSD: x.SpendUSD, BudgetUSD: x.BudgetUSD, Until: x.Ends,
				Reason: fmt.Sprintf("%s budget of plan %q exhausted", x.Period, x.Plan)}
			if p, ok := strings.CutPrefix(x.Client, ProviderBudgetPrefix); ok {
				ev.Scope, ev.Plan = hold.Scope{Kind: hold.ScopeProvider, Provider: p}, ""
				ev.Reason = fmt.Sprintf("%s budget of provider %s exhausted", x.Period, p)
			}
			emit(ev)
		},
	})
	if err != nil {
		return nil, err
	}
	pl.lim = lim
	return pl, nil
}

// run binds the limiter to the limits bucket once the member has bound
// the fleet's buckets, and reports and watches until ctx ends.
func (pl *planLimits) run(ctx context.Context, m *fleet.Member, log *slog.Logger) {
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-m.Bound():
			if err := pl.lim.Bind(m.Resources().Limits); err != nil {
				log.Warn("plan limits count this proxy's requests only", "err", err)
			}
		case <-ctx.Done():
		}
	})
	if err := pl.lim.Run(ctx); err != nil {
		log.Error("plan limiter stopped", "err", err)
	}
	wg.Wait()
}

// admit decides, before routing, whether the caller's plan lets the
// request start. When it does not, it answers 429 in the endpoint's format
// (with Retry-After, naming the limit) and reports false.
func (r *request) admit(c *fiber.Ctx, steps []route.Step) (bool, error) {
	pl := r.s.limits
	if r.client == nil || r.client.Plan == "" {
		return true, nil
	}
	lim := r.rt.plans[r.client.Plan]
	est := 0.0
	if lim != nil && lim.Budget != (config.Budget{}) {
		est = pl.estimate(r.rt.prices, steps, r.body, r.use.estIn) // scans the body: only for a plan with a budget
	}
	t, ref := pl.lim.Admit(r.client.ID, lim, est)
	if r.trace.on {
		r.trace.limits = &debug.LimitDecision{Decision: "admitted"}
		if ref != nil {
			r.trace.limits = &debug.LimitDecision{Decision: "refused", Code: string(ref.Code), Limit: ref.Limit}
			r.trace.access = string(ref.Code)
		}
		r.tracePlanRules(lim, ref)
	}
	if ref != nil {
		r.class = classLimited
		r.s.setRetryAfter(c, ref.RetryAfterSeconds())
		return false, sendError(c, r.ep.format, string(ref.Code), ref.Message)
	}
	r.ticket = t
	return true, nil
}

// estimate is a request's cost before it is sent: its input tokens as
// estimated (input, tokens.Estimate), its output from max_tokens (or the configured
// estimate), at the price of the first step that can serve it. 0 when
// that model has no price (an unknown cost never refuses a request).
func (pl *planLimits) estimate(prices *usage.Table, steps []route.Step, body []byte, input int64) float64 {
	out := pl.estOut
	for _, k := range [...]string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		if v, _, _, ok := jsonfield.Find(body, k); ok {
			if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n > 0 {
				out = n
				break
			}
		}
	}
	for i := range steps {
		st := &steps[i]
		if !st.Usable() {
			continue
		}
		p, ok := prices.Lookup(st.Provider.Name, st.Provider.Adapter.Type(), st.Upstream)
		if !ok {
			return 0
		}
		return p.Cost(usage.Tokens{Input: input, Output: out})
	}
	return 0
}

// done ends an admitted request in the limiter with what it consumed
// (nothing for a request the limiter did not admit: the zero Ticket).
func (r *request) done(rec *usage.Record) {
	tokens := rec.Tokens.TotalInput() + rec.Tokens.TotalOutput()
	cost, known := 0.0, rec.CostUSD != nil
	if known {
		cost = *rec.CostUSD
	}
	r.s.limits.lim.Done(r.ticket, tokens, cost, known)
	r.ticket = planlimit.Ticket{}
	if known && rec.Provider != "" {
		r.rt.budgets.charge(rec.Provider, tokens, cost)
	}
}

// Verdicts of a plan's rule in the policy trace.
const (
	ruleNotChecked = "not_checked"
	rulePassed     = "passed"
	ruleRefused    = "refused"
)

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
