package planlimit

// What a refused admission says: its Code (budget_exhausted,
// budget_insufficient, rate_limited, concurrency_limited), the Refusal with
// its message and Retry-After.

import (
	"fmt"
	"math"
	"time"
)

// Code is why a request was refused.
type Code string

// The refusal codes.
const (
	RateLimited        Code = "rate_limited"
	ConcurrencyLimited Code = "concurrency_limited"
	BudgetExhausted    Code = "budget_exhausted"
	// BudgetInsufficient: the budget is not exhausted, but the request's
	// estimated cost exceeds what is left of it (a smaller request may
	// pass).
	BudgetInsufficient Code = "budget_insufficient"
)

// Budget reports whether c is a budget refusal (exhausted or
// insufficient): admitted again, at that size, only when the period
// ends.
func (c Code) Budget() bool { return c == BudgetExhausted || c == BudgetInsufficient }

// Refusal says why Admit refused a request.
type Refusal struct {
	Code Code
	// Limit is the limit reached: requests_per_minute, tokens_per_minute,
	// concurrent_requests, budget.day, budget.week or budget.month.
	Limit string
	Plan  string
	// RetryAfter is when the limit frees enough, in whole seconds, at
	// least one (the Retry-After header).
	RetryAfter time.Duration
	// Message names the limit and the plan, for the caller.
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// RetryAfterSeconds is RetryAfter in whole seconds.
func (r *Refusal) RetryAfterSeconds() int { return int(r.RetryAfter / time.Second) }

// refusal builds the Refusal of d.
func refusal(lim *Limits, d denial, now time.Time, p *periods, frac float64) *Refusal {
	r := &Refusal{Code: d.code, Limit: d.limit, Plan: lim.Plan, RetryAfter: time.Second}
	plan := fmt.Sprintf("plan %q", lim.Plan)
	switch d.code {
	case BudgetExhausted, BudgetInsufficient:
		r.RetryAfter = p.ends[d.period].Sub(now)
		name := periodNames[d.period]
		if d.code == BudgetInsufficient {
			r.Message = fmt.Sprintf("estimated cost %s exceeds what is left of the %s budget of %s (%s of %s)",
				usd(d.est), name, plan, usd(d.max-d.spend), usd(d.max))
		} else {
			r.Message = fmt.Sprintf("%s budget of %s (%s) exhausted", name, plan, usd(d.max))
		}
	case RateLimited:
		r.RetryAfter = slidingWait(d.cur, d.prev, d.max, frac)
		r.Message = fmt.Sprintf("%s limit of %s (%d) reached", d.limit, plan, int64(d.max))
	case ConcurrencyLimited:
		r.Message = fmt.Sprintf("%s limit of %s (%d) reached", d.limit, plan, int64(d.max))
	}
	r.RetryAfter = ttlOf(r.RetryAfter) // whole seconds, at least one
	return r
}

// usd formats an amount of dollars.
func usd(v float64) string {
	if v != 0 && math.Abs(v) < 0.01 {
		return fmt.Sprintf("$%.4f", v)
	}
	return fmt.Sprintf("$%.2f", v)
}
