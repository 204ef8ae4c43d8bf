package adminapi

import (
	"time"

	"switchyard.dev/shared/planlimit"
)

// Client keys and plans (/admin/clients, /admin/plans).

// Limits is a plan's limits; zero is no limit.
type Limits struct {
	RequestsPerMinute  int    `json:"requests_per_minute"`
	TokensPerMinute    int    `json:"tokens_per_minute"`
	ConcurrentRequests int    `json:"concurrent_requests"`
	Budget             Budget `json:"budget"`
}

// Budget is a plan's budget per period in USD; zero is none.
type Budget struct {
	Day   float64 `json:"day"`
	Week  float64 `json:"week"`
	Month float64 `json:"month"`
}

// HasBudget reports whether the plan has a budget in some period.
func (l Limits) HasBudget() bool {
	return l.Budget.Day > 0 || l.Budget.Week > 0 || l.Budget.Month > 0
}

// Client is one configured client key (never its secret) with its
// plan's limits and the fleet's consumption.
type Client struct {
	ID     string      `json:"id"`
	Plan   string      `json:"plan"`
	Limits Limits      `json:"limits"`
	Usage  ClientUsage `json:"usage"`
}

// ClientUsage is the fleet's consumption of one client key, as the
// admin instance sees it.
type ClientUsage struct {
	// RequestsPerMinute and TokensPerMinute are the sliding estimates of
	// the last minute that admission compares with the limits.
	RequestsPerMinute float64          `json:"requests_per_minute"`
	TokensPerMinute   float64          `json:"tokens_per_minute"`
	InFlight          int64            `json:"in_flight"`
	Day               planlimit.Period `json:"day"`
	Week              planlimit.Period `json:"week"`
	Month             planlimit.Period `json:"month"`
	// Reset is the client's last budget reset (nil: none in the current
	// periods).
	Reset *BudgetReset `json:"reset"`
}

// BudgetReset is who reset a client's budget, and when.
type BudgetReset struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// Plan is one configured plan with its limits, its client keys and
// their summed consumption.
type Plan struct {
	Name   string `json:"name"`
	Limits Limits `json:"limits"`
	// Models the plan allows (empty: every model its keys allow).
	Models  []string  `json:"models"`
	Clients []string  `json:"clients"`
	Usage   PlanUsage `json:"usage"`
}

// PlanUsage sums the consumption of a plan's client keys (each key has
// the plan's allowance: these sums are not compared with the limits).
type PlanUsage struct {
	RequestsPerMinute float64 `json:"requests_per_minute"`
	TokensPerMinute   float64 `json:"tokens_per_minute"`
	InFlight          int64   `json:"in_flight"`
	SpendUSD          Budget  `json:"spend_usd"`
	// ExhaustedClients counts the keys with a budget exhausted in a
	// current period.
	ExhaustedClients int `json:"exhausted_clients"`
}

// ClientList is GET /admin/clients: every configured client key, in
// configuration order. NATS says whether the admin's limiter follows the
// switchyard_limits bucket (false: the figures may be stale or empty);
// Role is the caller's token role.
type ClientList struct {
	Clients     []Client  `json:"clients"`
	NATS        bool      `json:"nats"`
	Role        string    `json:"role"`
	Instance    string    `json:"instance"`
	GeneratedAt time.Time `json:"generated_at"`
}

// PlanList is GET /admin/plans: every configured plan, sorted by name.
type PlanList struct {
	Plans       []Plan    `json:"plans"`
	NATS        bool      `json:"nats"`
	Instance    string    `json:"instance"`
	GeneratedAt time.Time `json:"generated_at"`
}
