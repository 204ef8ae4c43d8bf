package planlimit

// What the Limiter tells the admin: each client's usage per period as this
// instance sees the fleet (Snapshot, SnapshotWith) and the clients it knows.

import (
	"maps"
	"slices"
	"time"
)

// ClientUsage is the fleet's consumption of one client against its limits,
// as this instance sees it.
type ClientUsage struct {
	Client string `json:"client"`
	// Limits are those of the last request this instance admitted or
	// refused for the client (nil: none yet).
	Limits *Limits `json:"limits,omitempty"`
	// Requests and Tokens are the sliding-window estimates of the last
	// minute, as admission compares them with the limits.
	Requests float64 `json:"requests_per_minute"`
	Tokens   float64 `json:"tokens_per_minute"`
	InFlight int64   `json:"in_flight"`
	Day      Period  `json:"day"`
	Week     Period  `json:"week"`
	Month    Period  `json:"month"`
	// Reset is the client's last budget reset (nil: none).
	Reset *ResetRecord `json:"reset,omitempty"`
}

// Period is the spend of one budget period.
type Period struct {
	ID string `json:"id"` // d20250114, w2025W03, m202501
	// SpendUSD is the fleet's spend since the period began or the last
	// reset.
	SpendUSD  float64   `json:"spend_usd"`
	BudgetUSD float64   `json:"budget_usd"` // 0: none
	Exhausted bool      `json:"exhausted"`
	Ends      time.Time `json:"ends"`
}

// Snapshot returns the fleet's current consumption of client, against the
// limits of its last Admit here.
func (l *Limiter) Snapshot(clientID string) ClientUsage { return l.SnapshotWith(clientID, nil) }

// SnapshotWith is Snapshot against lim (nil: the limits of the client's
// last Admit here): for a process that admits nothing, such as the admin
// service, which knows the plans from the configuration.
func (l *Limiter) SnapshotWith(clientID string, lim *Limits) ClientUsage {
	now := l.now()
	p := l.periodsAt(now)
	m, frac := minuteOf(now)
	u := ClientUsage{Client: clientID}
	per := [3]*Period{&u.Day, &u.Week, &u.Month}
	for i, pu := range per {
		pu.ID = periodToken(kindDay+kind(i), p.ids[i])
		pu.Ends = p.ends[i]
	}
	u.Limits = lim
	for i, pu := range per {
		if lim != nil {
			pu.BudgetUSD = lim.budget(i)
		}
	}
	c := (*l.clients.Load())[clientID]
	if c == nil {
		return u
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roll(m, p)
	if lim == nil {
		lim = c.lim
	}
	u.Limits = lim
	cur, prev := c.minutes(kindReq, p)
	u.Requests = sliding(cur, prev, frac)
	cur, prev = c.minutes(kindTok, p)
	u.Tokens = sliding(cur, prev, frac)
	u.InFlight = c.inFlight(p)
	for i, pu := range per {
		pu.SpendUSD = c.spendOf(i, p)
		pu.Exhausted = c.exhausted(i, p)
		if lim != nil {
			pu.BudgetUSD = lim.budget(i)
			pu.Exhausted = pu.Exhausted || pu.BudgetUSD > 0 && pu.SpendUSD >= pu.BudgetUSD-epsilon
		}
	}
	if c.reset != nil {
		r := *c.reset
		r.BaselineUSD = maps.Clone(r.BaselineUSD)
		u.Reset = &r
	}
	return u
}

// Clients lists, sorted, every client this instance counted or saw in the
// bucket.
func (l *Limiter) Clients() []string {
	return slices.Sorted(maps.Keys(*l.clients.Load()))
}
