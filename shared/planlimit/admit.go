package planlimit

// Admission from memory: a client's Limits (LimitsOf), Admit and Done around
// one request, Charge, and Remaining of the tightest budget.

import (
	"math"

	"switchyard.dev/shared/config"
)

// Limits are a plan's limits as the limiter reads them; zero is no limit.
// Build one per plan when the configuration is loaded (LimitsOf) and pass
// the same pointer to every Admit; the limiter keeps it (for the budget
// checks of Done and the report loop) and never modifies it. A reloaded
// configuration builds new Limits.
type Limits struct {
	Plan               string        `json:"plan"`
	RequestsPerMinute  int64         `json:"requests_per_minute"`
	TokensPerMinute    int64         `json:"tokens_per_minute"`
	ConcurrentRequests int64         `json:"concurrent_requests"`
	Budget             config.Budget `json:"budget"`
}

// LimitsOf reads the limits of plan name.
func LimitsOf(name string, p config.Plan) *Limits {
	return &Limits{
		Plan:               name,
		RequestsPerMinute:  int64(p.RequestsPerMinute),
		TokensPerMinute:    int64(p.TokensPerMinute),
		ConcurrentRequests: int64(p.ConcurrentRequests),
		Budget:             p.Budget,
	}
}

// Rule is one limit a plan sets: its name, as Refusal.Limit names it
// (requests_per_minute, budget.day ...), and its value.
type Rule struct {
	Name  string
	Limit float64
}

// Rules appends the limits l sets to dst, in the order Admit checks them
// (the budgets by period, requests and tokens per minute, concurrent
// requests): a refusal names the first that refused, and those after it
// were not checked.
func (l *Limits) Rules(dst []Rule) []Rule {
	for i := range 3 {
		if b := l.budget(i); b > 0 {
			dst = append(dst, Rule{"budget." + periodNames[i], b})
		}
	}
	for _, r := range [...]Rule{{"requests_per_minute", float64(l.RequestsPerMinute)},
		{"tokens_per_minute", float64(l.TokensPerMinute)}, {"concurrent_requests", float64(l.ConcurrentRequests)}} {
		if r.Limit > 0 {
			dst = append(dst, r)
		}
	}
	return dst
}

// budget is the budget of period i (0 day, 1 week, 2 month).
func (l *Limits) budget(i int) float64 {
	switch i {
	case 0:
		return l.Budget.Day
	case 1:
		return l.Budget.Week
	}
	return l.Budget.Month
}

// Ticket is an admitted request; pass it to Done exactly once. The zero
// Ticket is valid for Done and does nothing.
type Ticket struct{ c *client }

// Admit decides whether client may start a request under lim (nil: no
// limits, the request is only counted) with an estimated cost, from
// memory only. Admitted, the request counts one request in the current
// minute and one in flight until Done. Refused, nothing is counted.
//
// A request is refused with BudgetExhausted when a period's spend reached
// its budget or an exhausted key is recorded for the period; with
// BudgetInsufficient when the spend plus estCostUSD exceeds the budget
// (the budget is not exhausted: what the admin shows); with RateLimited when the sliding
// requests or tokens of the last minute reached the limit; with
// ConcurrencyLimited when the fleet's requests in flight reached it.
func (l *Limiter) Admit(clientID string, lim *Limits, estCostUSD float64) (Ticket, *Refusal) {
	c := l.client(clientID)
	now := l.now()
	p := l.periodsAt(now)
	m, frac := minuteOf(now)
	c.mu.Lock()
	c.roll(m, p)
	c.lim = lim
	if lim != nil {
		if d := c.check(lim, frac, p, estCostUSD); d.code != "" {
			c.mu.Unlock()
			return Ticket{}, refusal(lim, d, now, p, frac)
		}
	}
	c.cur.req++
	c.inflight++
	c.mu.Unlock()
	return Ticket{c: c}, nil
}

// Done ends an admitted request: it releases its slot in flight and
// counts its tokens in the current minute and, when costKnown, its cost
// in the current day, week and month. Call it for every admitted request,
// also one that failed or was cancelled (tokens and cost may be 0).
// Tokens count when the request ends, so the tokens per minute may be
// overshot by the tokens of the requests in flight.
func (l *Limiter) Done(t Ticket, tokens int64, costUSD float64, costKnown bool) {
	c := t.c
	if c == nil {
		return
	}
	now := l.now()
	p := l.periodsAt(now)
	m, _ := minuteOf(now)
	c.mu.Lock()
	c.roll(m, p)
	if c.inflight > 0 {
		c.inflight--
	}
	if !costKnown {
		costUSD = 0
	}
	claim := c.consume(p, tokens, costUSD)
	c.mu.Unlock()
	if claim {
		l.poke()
	}
}

// consume counts tokens in the current minute and a cost in every budget
// period (a cost that is not a positive number counts nothing); it reports
// whether an exhausted period is now to be claimed. c.mu is held.
func (c *client) consume(p *periods, tokens int64, costUSD float64) (claim bool) {
	if tokens > 0 {
		c.cur.tok += tokens
	}
	if costUSD > 0 && !math.IsInf(costUSD, 0) {
		for i := range c.spend {
			c.spend[i].usd += costUSD
		}
		claim = c.needsClaim(p)
	}
	return claim
}

// Charge counts spend and tokens against id without an admission: for a
// budget that is not a caller's, such as a provider's (the proxy charges
// "_provider_<name>" with what each request served there cost). lim is
// kept like Admit keeps it: an exhausted period is recorded fleet-wide.
func (l *Limiter) Charge(id string, lim *Limits, tokens int64, costUSD float64) {
	c := l.client(id)
	now := l.now()
	p := l.periodsAt(now)
	m, _ := minuteOf(now)
	c.mu.Lock()
	c.roll(m, p)
	c.lim = lim
	claim := c.consume(p, tokens, costUSD)
	c.mu.Unlock()
	if claim {
		l.poke()
	}
}

// Remaining is what is left (USD, never below 0) of the tightest budget
// period of id under lim, fleet-wide as this instance sees it; false when
// lim has no budget. An exhausted period leaves 0. It reads memory only.
func (l *Limiter) Remaining(id string, lim *Limits) (float64, bool) {
	if lim == nil || lim.Budget == (config.Budget{}) {
		return 0, false
	}
	left := math.Inf(1)
	c := (*l.clients.Load())[id]
	if c == nil {
		for i := range 3 {
			if b := lim.budget(i); b > 0 {
				left = min(left, b)
			}
		}
		return left, true
	}
	now := l.now()
	p := l.periodsAt(now)
	m, _ := minuteOf(now)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(m, p)
	for i := range 3 {
		b := lim.budget(i)
		if b <= 0 {
			continue
		}
		if c.exhausted(i, p) {
			return 0, true
		}
		left = min(left, max(b-c.spendOf(i, p), 0))
	}
	return left, true
}

// poke wakes the report loop (an exhausted key to record).
func (l *Limiter) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}
