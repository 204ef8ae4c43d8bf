package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/quota"
)

// The clients' consumption against their plans' limits. The admin service
// runs its own quota.Limiter on the switchyard_limits bucket: it admits
// nothing, so it writes no counters; its watcher follows every proxy's
// reports, so it sees the fleet's consumption as the proxies do, and a
// budget reset it writes reaches every proxy through the same bucket.

// runLimits binds the limiter to switchyard_limits once the member has
// bound the fleet's buckets, and follows the bucket until ctx ends.
func (s *Service) runLimits(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-s.member.Bound():
			if err := s.quota.Bind(s.member.Resources().Limits); err != nil {
				s.log.Warn("admin: plan consumption not followed", "err", err)
			}
		case <-ctx.Done():
		}
	})
	if err := s.quota.Run(ctx); err != nil {
		s.log.Error("admin: plan limiter stopped", "err", err)
	}
	wg.Wait()
}

// limitsBound reports whether the limiter follows the bucket.
func (s *Service) limitsBound() bool {
	select {
	case <-s.quota.Bound():
		return true
	default:
		return false
	}
}

// limitsView is a plan's limits; zero is no limit.
type limitsView struct {
	RequestsPerMinute  int        `json:"requests_per_minute"`
	TokensPerMinute    int        `json:"tokens_per_minute"`
	ConcurrentRequests int        `json:"concurrent_requests"`
	Budget             budgetView `json:"budget"`
}

// budgetView is a plan's budget per period in USD; zero is none.
type budgetView struct {
	Day   float64 `json:"day"`
	Week  float64 `json:"week"`
	Month float64 `json:"month"`
}

func limitsOf(p config.Plan) limitsView {
	return limitsView{
		RequestsPerMinute: p.RequestsPerMinute, TokensPerMinute: p.TokensPerMinute,
		ConcurrentRequests: p.ConcurrentRequests,
		Budget:             budgetView{Day: p.Budget.Day, Week: p.Budget.Week, Month: p.Budget.Month},
	}
}

func (l limitsView) hasBudget() bool {
	return l.Budget.Day > 0 || l.Budget.Week > 0 || l.Budget.Month > 0
}

// clientView is one configured client key (never its secret) with its
// plan's limits and the fleet's consumption.
type clientView struct {
	ID     string      `json:"id"`
	Plan   string      `json:"plan"`
	Limits limitsView  `json:"limits"`
	Usage  clientUsage `json:"usage"`
}

// clientUsage is the fleet's consumption of one client key, as this
// admin instance sees it.
type clientUsage struct {
	// RequestsPerMinute and TokensPerMinute are the sliding estimates of
	// the last minute that admission compares with the limits.
	RequestsPerMinute float64      `json:"requests_per_minute"`
	TokensPerMinute   float64      `json:"tokens_per_minute"`
	InFlight          int64        `json:"in_flight"`
	Day               quota.Period `json:"day"`
	Week              quota.Period `json:"week"`
	Month             quota.Period `json:"month"`
	// Reset is the client's last budget reset (nil: none in the current
	// periods).
	Reset *resetView `json:"reset"`
}

// resetView is who reset a client's budget, and when.
type resetView struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// client builds the view of client key ck of routing rt.
func (s *Service) client(rt *routing, ck *config.ClientKey) clientView {
	var plan config.Plan
	if p := rt.cfg.Plan(ck.Plan); p != nil {
		plan = *p
	}
	u := s.quota.SnapshotWith(ck.ID, rt.plans[ck.Plan])
	v := clientView{ID: ck.ID, Plan: ck.Plan, Limits: limitsOf(plan), Usage: clientUsage{
		RequestsPerMinute: u.Requests, TokensPerMinute: u.Tokens, InFlight: u.InFlight,
		Day: u.Day, Week: u.Week, Month: u.Month,
	}}
	if u.Reset != nil {
		v.Usage.Reset = &resetView{By: u.Reset.By, At: u.Reset.At}
	}
	return v
}

// clientKey is client key id of routing rt, or nil.
func (rt *routing) clientKey(id string) *config.ClientKey {
	for i := range rt.cfg.Clients {
		if rt.cfg.Clients[i].ID == id {
			return &rt.cfg.Clients[i]
		}
	}
	return nil
}

// listClients: GET /admin/clients: every configured client key, in
// configuration order. It answers from memory; "nats" says whether the
// limiter follows the bucket (false: the figures may be stale or empty).
func (s *Service) listClients(c *fiber.Ctx) error {
	rt := s.routing()
	out := make([]clientView, 0, len(rt.cfg.Clients))
	for i := range rt.cfg.Clients {
		out = append(out, s.client(rt, &rt.cfg.Clients[i]))
	}
	return c.JSON(fiber.Map{"clients": out, "nats": s.natsUp() && s.limitsBound(),
		"role": tokenRole(c), "instance": s.member.Instance, "generated_at": time.Now().UTC()})
}

// getClient: GET /admin/clients/{id}
func (s *Service) getClient(c *fiber.Ctx) error {
	rt := s.routing()
	ck := rt.clientKey(c.Params("id"))
	if ck == nil {
		return apiError(c, fiber.StatusNotFound, codeNotFound, "no client key "+c.Params("id"))
	}
	return c.JSON(s.client(rt, ck))
}

// resetBudget: POST /admin/clients/{id}/budget/reset: the client's spend
// in the current day, week and month starts again from 0 for the whole
// fleet (quota.Limiter.ResetBudget) and a budget event with outcome reset
// is published. 200 with the client after the reset; 404 unknown client;
// 409 no budget to reset; 503 when NATS is not reachable (nothing was
// written).
func (s *Service) resetBudget(c *fiber.Ctx) error {
	rt := s.routing()
	ck := rt.clientKey(c.Params("id"))
	if ck == nil {
		return apiError(c, fiber.StatusNotFound, codeNotFound, "no client key "+c.Params("id"))
	}
	id := ck.ID // the configuration's string: fiber's is not safe to keep
	before := s.client(rt, ck)
	if ck.Plan == "" {
		return apiError(c, fiber.StatusConflict, codeNoBudget, "client key "+id+" has no plan: it has no budget to reset")
	}
	if !before.Limits.hasBudget() {
		return apiError(c, fiber.StatusConflict, codeNoBudget, fmt.Sprintf("plan %q of client key %s has no budget (plans.%s.budget): nothing to reset", ck.Plan, id, ck.Plan))
	}
	if !s.natsUp() || !s.limitsBound() {
		return apiError(c, fiber.StatusServiceUnavailable, codeNATSUnavailable, "NATS is not reachable (the switchyard_limits bucket is not bound): the budget was not reset; try again when the admin service is ready (/readyz)")
	}
	by := tokenID(c)
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	if err := s.quota.ResetBudget(ctx, id, by); err != nil {
		s.log.Warn("admin: reset budget", "client", id, "err", err)
		msg := "NATS did not take the reset: " + err.Error() + "; try again when the admin service is ready (/readyz)"
		switch {
		case errors.Is(err, quota.ErrUnbound):
			msg = "NATS is not reachable (the switchyard_limits bucket is not bound): the budget was not reset; try again when the admin service is ready (/readyz)"
		case errors.Is(err, quota.ErrNotLoaded):
			msg = "the fleet's spend is still loading from the switchyard_limits bucket: the budget was not reset; try again in a moment"
		}
		return apiError(c, fiber.StatusServiceUnavailable, codeNATSUnavailable, msg)
	}
	after := s.client(rt, ck)
	s.member.Emit(hold.Event{Kind: hold.EventBudget, Outcome: "reset", Source: hold.SourceAdmin,
		Client: id, Plan: ck.Plan,
		Reason: fmt.Sprintf("budgets of plan %q reset by %s (spend was %s)", ck.Plan, by, spendSummary(before))})
	s.log.Info("admin: budget reset", "client", id, "plan", ck.Plan, "by", by)
	return c.JSON(after)
}

// spendSummary names the spend of each period with a budget.
func spendSummary(v clientView) string {
	out := ""
	for _, p := range []struct {
		name   string
		budget float64
		spend  float64
	}{{"day", v.Limits.Budget.Day, v.Usage.Day.SpendUSD}, {"week", v.Limits.Budget.Week, v.Usage.Week.SpendUSD}, {"month", v.Limits.Budget.Month, v.Usage.Month.SpendUSD}} {
		if p.budget <= 0 {
			continue
		}
		if out != "" {
			out += ", "
		}
		out += fmt.Sprintf("%s $%.4f of $%.2f", p.name, p.spend, p.budget)
	}
	return out
}

// planView is one configured plan with its limits, its client keys and
// their summed consumption.
type planView struct {
	Name   string     `json:"name"`
	Limits limitsView `json:"limits"`
	// Models the plan allows (empty: every model its keys allow).
	Models  []string  `json:"models"`
	Clients []string  `json:"clients"`
	Usage   planUsage `json:"usage"`
}

// planUsage sums the consumption of a plan's client keys (each key has
// the plan's allowance: these sums are not compared with the limits).
type planUsage struct {
	RequestsPerMinute float64    `json:"requests_per_minute"`
	TokensPerMinute   float64    `json:"tokens_per_minute"`
	InFlight          int64      `json:"in_flight"`
	SpendUSD          budgetView `json:"spend_usd"`
	// ExhaustedClients counts the keys with a budget exhausted in a
	// current period.
	ExhaustedClients int `json:"exhausted_clients"`
}

// listPlans: GET /admin/plans: every configured plan, sorted by name.
func (s *Service) listPlans(c *fiber.Ctx) error {
	rt := s.routing()
	names := make([]string, 0, len(rt.cfg.Plans))
	for n := range rt.cfg.Plans {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]planView, 0, len(names))
	for _, n := range names {
		p := rt.cfg.Plans[n]
		v := planView{Name: n, Limits: limitsOf(p), Models: append([]string{}, p.Models...), Clients: []string{}}
		for i := range rt.cfg.Clients {
			ck := &rt.cfg.Clients[i]
			if ck.Plan != n {
				continue
			}
			cv := s.client(rt, ck)
			v.Clients = append(v.Clients, ck.ID)
			u := &v.Usage
			u.RequestsPerMinute += cv.Usage.RequestsPerMinute
			u.TokensPerMinute += cv.Usage.TokensPerMinute
			u.InFlight += cv.Usage.InFlight
			u.SpendUSD.Day += cv.Usage.Day.SpendUSD
			u.SpendUSD.Week += cv.Usage.Week.SpendUSD
			u.SpendUSD.Month += cv.Usage.Month.SpendUSD
			if cv.Usage.Day.Exhausted || cv.Usage.Week.Exhausted || cv.Usage.Month.Exhausted {
				u.ExhaustedClients++
			}
		}
		out = append(out, v)
	}
	return c.JSON(fiber.Map{"plans": out, "nats": s.natsUp() && s.limitsBound(),
		"instance": s.member.Instance, "generated_at": time.Now().UTC()})
}
