package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/planlimit"
)

// fleetCollector exports, at scrape time, what an operator alerts on and
// the proxies do not say by themselves: each provider's status pill (an
// offline provider is held as a whole or has every key held) and every
// budget's spend against its cap, as this instance sees the fleet
// (switchyard_holds, switchyard_limits). Label values are provider names,
// client key ids and period names: bounded by the configuration.
type fleetCollector struct{ s *Service }

var (
	providerStatusDesc = prometheus.NewDesc("switchyard_provider_status",
		"1 for the provider's current status pill (healthy, degraded, circuit_open, recovering, offline: the provider held, or every key that takes traffic held), 0 for the others.",
		[]string{"provider", "status"}, nil)
	budgetSpendDesc = prometheus.NewDesc("switchyard_budget_spend_usd",
		"The fleet's spend in the current budget period (day, week, month; UTC) of a client key's plan (scope client) or a provider (scope provider), for budgets with a cap.",
		[]string{"scope", "name", "period"}, nil)
	budgetCapDesc = prometheus.NewDesc("switchyard_budget_cap_usd",
		"The cap of that budget period in USD.",
		[]string{"scope", "name", "period"}, nil)
	providerStatuses = [...]string{adminapi.StatusHealthy, adminapi.StatusDegraded, adminapi.StatusCircuitOpen, adminapi.StatusRecovering, adminapi.StatusOffline}
)

func (f fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- providerStatusDesc
	ch <- budgetSpendDesc
	ch <- budgetCapDesc
}

func (f fleetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ps := range f.s.status() {
		for _, st := range providerStatuses {
			v := 0.0
			if ps.Status == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(providerStatusDesc, prometheus.GaugeValue, v, ps.Name, st)
		}
	}
	if f.s.quota == nil {
		return
	}
	rt := f.s.routing()
	budget := func(scope, name string, u planlimit.ClientUsage) {
		for _, p := range [...]struct {
			name string
			p    planlimit.Period
		}{{"day", u.Day}, {"week", u.Week}, {"month", u.Month}} {
			if p.p.BudgetUSD <= 0 {
				continue
			}
			ch <- prometheus.MustNewConstMetric(budgetSpendDesc, prometheus.GaugeValue, p.p.SpendUSD, scope, name, p.name)
			ch <- prometheus.MustNewConstMetric(budgetCapDesc, prometheus.GaugeValue, p.p.BudgetUSD, scope, name, p.name)
		}
	}
	for i := range rt.cfg.Clients {
		ck := &rt.cfg.Clients[i]
		if lim := rt.plans[ck.Plan]; lim != nil {
			budget("client", ck.ID, f.s.quota.SnapshotWith(ck.ID, lim))
		}
	}
	for i := range rt.cfg.Providers {
		p := &rt.cfg.Providers[i]
		if p.Budget != (config.Budget{}) {
			lim := &planlimit.Limits{Plan: "provider:" + p.Name, Budget: p.Budget}
			budget("provider", p.Name, f.s.quota.SnapshotWith(planlimit.ProviderBudgetPrefix+p.Name, lim))
		}
	}
}
