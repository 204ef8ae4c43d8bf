package proxy

import (
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/planlimit"
)

// ProviderBudgetPrefix is planlimit.ProviderBudgetPrefix.
const ProviderBudgetPrefix = planlimit.ProviderBudgetPrefix

// providerBudgets are the providers' budgets (providers[].budget): what
// each request served there cost is charged to the fleet-wide limiter
// under the provider's id; selection reads what is left from memory.
type providerBudgets struct {
	lim *planlimit.Limiter
	by  map[string]providerBudget
}

type providerBudget struct {
	id     string
	limits *planlimit.Limits
}

// newProviderBudgets returns nil when no provider has a budget.
func newProviderBudgets(cfg *config.Config, lim *planlimit.Limiter) *providerBudgets {
	var pb *providerBudgets
	for _, p := range cfg.Providers {
		if p.Budget == (config.Budget{}) {
			continue
		}
		if pb == nil {
			pb = &providerBudgets{lim: lim, by: map[string]providerBudget{}}
		}
		pb.by[p.Name] = providerBudget{id: ProviderBudgetPrefix + p.Name,
			limits: &planlimit.Limits{Plan: "provider:" + p.Name, Budget: p.Budget}}
	}
	return pb
}

// remaining is route.BudgetFunc: what is left of a provider's tightest
// budget period.
func (pb *providerBudgets) remaining(provider string) (float64, bool) {
	b, ok := pb.by[provider]
	if !ok {
		return 0, false
	}
	return pb.lim.Remaining(b.id, b.limits)
}

// charge counts a request served by provider against its budget.
func (pb *providerBudgets) charge(provider string, tokens int64, costUSD float64) {
	if pb == nil {
		return
	}
	if b, ok := pb.by[provider]; ok {
		pb.lim.Charge(b.id, b.limits, tokens, costUSD)
	}
}
