package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/planlimit"
)

// The clients' consumption against their plans' limits. The admin service
// runs its own planlimit.Limiter on the switchyard_limits bucket: it admits
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

func limitsOf(p config.Plan) adminapi.Limits {
	return adminapi.Limits{
		RequestsPerMinute: p.RequestsPerMinute, TokensPerMinute: p.TokensPerMinute,
		ConcurrentRequests: p.ConcurrentRequests,
		Budget:             adminapi.Budget{Day: p.Budget.Day, Week: p.Budget.Week, Month: p.Budget.Month},
	}
}

// client builds the view of client key ck of routing rt.
func (s *Service) client(rt *routing, ck *config.ClientKey) adminapi.Client {
	var plan config.Plan
	if p := rt.cfg.Plan(ck.Plan); p != nil {
		plan = *p
	}
	u := s.quota.SnapshotWith(ck.ID, rt.plans[ck.Plan])
	v := adminapi.Client{ID: ck.ID, Plan: ck.Plan, Limits: limitsOf(plan), Usage: adminapi.ClientUsage{
		RequestsPerMinute: u.Requests, TokensPerMinute: u.Tokens, InFlight: u.InFlight,
		Day: u.Day, Week: u.Week, Month: u.Month,
	}}
	if u.Reset != nil {
		v.Usage.Reset = &adminapi.BudgetReset{By: u.Reset.By, At: u.Reset.At}
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
	out := make([]adminapi.Client, 0, len(rt.cfg.Clients))
	for i := range rt.cfg.Clients {
		out = append(out, s.client(rt, &rt.cfg.Clients[i]))
	}
	return c.JSON(adminapi.ClientList{Clients: out, NATS: s.natsUp() && s.limitsBound(),
		Role: tokenRole(c), Instance: s.member.Instance, GeneratedAt: time.Now().UTC()})
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
// fleet (planlimit.Limiter.ResetBudget) and a budget event with outcome reset
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
	if !before.Limits.HasBudget() {
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
		case errors.Is(err, planlimit.ErrUnbound):
			msg = "NATS is not reachable (the switchyard_limits bucket is not bound): the budget was not reset; try again when the admin service is ready (/readyz)"
		case errors.Is(err, planlimit.ErrNotLoaded):
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
func spendSummary(v adminapi.Client) string {
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

// listPlans: GET /admin/plans: every configured plan, sorted by name.
func (s *Service) listPlans(c *fiber.Ctx) error {
	rt := s.routing()
	names := make([]string, 0, len(rt.cfg.Plans))
	for n := range rt.cfg.Plans {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]adminapi.Plan, 0, len(names))
	for _, n := range names {
		p := rt.cfg.Plans[n]
		v := adminapi.Plan{Name: n, Limits: limitsOf(p), Models: append([]string{}, p.Models...), Clients: []string{}}
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
	return c.JSON(adminapi.PlanList{Plans: out, NATS: s.natsUp() && s.limitsBound(),
		Instance: s.member.Instance, GeneratedAt: time.Now().UTC()})
}
