package quota

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
)

// Defaults of Options.
const (
	// DefaultInterval is how often the consumption is reported (the
	// default of metering.limits_interval).
	DefaultInterval = 250 * time.Millisecond
	// DefaultOpTimeout bounds one report, claim or reset.
	DefaultOpTimeout = 2 * time.Second
	// DefaultShutdownTimeout bounds the final report when Run ends.
	DefaultShutdownTimeout = time.Second
)

// Key lifetimes.
const (
	// MinuteTTL is the lifetime of a request or token key after its last
	// write: the sliding window reads the current and the previous minute.
	MinuteTTL = 3 * time.Minute
	// PeriodMargin is how long spend, exhausted and reset keys outlive
	// their period (clocks of the fleet may differ a little).
	PeriodMargin = 10 * time.Minute
	// MinInflightTTL is the shortest lifetime of an in-flight key; it is
	// 8 intervals when that is longer. A key is rewritten while its count
	// is above 0 and half its TTL has passed, so the count of a process
	// that died vanishes within one TTL.
	MinInflightTTL = 2 * time.Second
)

// ErrUnbound is returned by operations that need the bucket before Bind.
var ErrUnbound = errors.New("quota: limits bucket not bound (NATS not ready)")

// ErrNotLoaded is returned by ResetBudget until the limiter has loaded the
// fleet's consumption from the bucket (just after start or a long
// disconnection).
var ErrNotLoaded = errors.New("quota: the fleet's consumption is not loaded yet")

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

// Ticket is an admitted request; pass it to Done exactly once. The zero
// Ticket is valid for Done and does nothing.
type Ticket struct{ c *client }

// Options configure a Limiter.
type Options struct {
	// Instance is this process's id in the fleet (fleet.Member.Instance);
	// bytes outside [A-Za-z0-9_-] become '_' (SanitizeInstance). It must
	// be unique per process run: an instance restarted with the same id
	// continues its predecessor's totals (they are read back at the first
	// load), but two live processes with one id overwrite each other.
	// Required.
	Instance string
	// Conn is the NATS connection of the bucket; nil: the limiter never
	// binds and limits with its own counts only.
	Conn *nats.Conn
	// Interval is how often consumption is reported (metering.limits_interval;
	// default DefaultInterval).
	Interval time.Duration
	// Now is the clock of the windows and periods (default time.Now). Key
	// TTLs are real time.
	Now func() time.Time
	Log *slog.Logger
	// OnExhausted is called by the one instance of the fleet that records
	// a client's budget exhaustion for a period (to publish an event), once
	// its watcher has applied the exhausted key it created; never for a
	// key that a budget reset made stale. It runs on the watcher or the
	// report loop: it must not block for long.
	OnExhausted func(Exhaustion)
	// MarkerTTL is the bucket's LimitMarkerTTL (default bus.LimitMarkerTTL).
	MarkerTTL time.Duration
	// OpTimeout bounds one report, claim or reset (default DefaultOpTimeout).
	OpTimeout time.Duration
	// ShutdownTimeout bounds the final report (default DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
}

// Limiter counts what a process's callers consume against their plans'
// limits and admits requests against the fleet's consumption. Every
// method is safe for concurrent use.
type Limiter struct {
	inst            string
	nc              *nats.Conn
	interval        time.Duration
	now             func() time.Time
	log             *slog.Logger
	onExhausted     func(Exhaustion)
	markerTTL       time.Duration
	opTimeout       time.Duration
	shutdownTimeout time.Duration
	inflightTTL     time.Duration

	per     atomic.Pointer[periods]
	clients atomic.Pointer[map[string]*client] // copy on write
	addMu   sync.Mutex

	b       bus.Binding[binding]
	loaded  atomic.Bool
	running atomic.Bool
	wake    chan struct{}
}

// binding is the bucket a Limiter reports to.
type binding struct {
	kv     jetstream.KeyValue
	pub    jetstream.JetStream // the limiter's own, for async publishes
	prefix string              // $KV.<bucket>.
}

// New returns a Limiter that counts locally until Bind.
func New(o Options) (*Limiter, error) {
	if o.Instance == "" {
		return nil, errors.New("quota: no instance id")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MarkerTTL <= 0 {
		o.MarkerTTL = bus.LimitMarkerTTL
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	l := &Limiter{
		inst:            SanitizeInstance(o.Instance),
		nc:              o.Conn,
		interval:        o.Interval,
		now:             o.Now,
		log:             o.Log.With("component", "quota"),
		onExhausted:     o.OnExhausted,
		markerTTL:       o.MarkerTTL,
		opTimeout:       o.OpTimeout,
		shutdownTimeout: o.ShutdownTimeout,
		inflightTTL:     ttlOf(max(MinInflightTTL, 8*o.Interval)),
		wake:            make(chan struct{}, 1),
	}
	l.clients.Store(&map[string]*client{})
	return l, nil
}

// Instance is the instance id used in keys.
func (l *Limiter) Instance() string { return l.inst }

// Bind sets the bucket (bus.Resources.Limits, on Options.Conn): Run
// starts reporting and watching once it is set. Only one Bind succeeds.
func (l *Limiter) Bind(kv jetstream.KeyValue) error {
	if kv == nil {
		return errors.New("quota: bind: no bucket")
	}
	if l.nc == nil {
		return errors.New("quota: bind: no NATS connection in Options.Conn")
	}
	if l.b.Load() != nil {
		return errBound
	}
	pub, err := jetstream.New(l.nc, jetstream.WithPublishAsyncTimeout(l.opTimeout))
	if err != nil {
		return fmt.Errorf("quota: bind: JetStream context: %w", err)
	}
	if !l.b.Bind(&binding{kv: kv, pub: pub, prefix: "$KV." + kv.Bucket() + "."}) {
		return errBound // a concurrent Bind won
	}
	return nil
}

var errBound = errors.New("quota: bind: already bound")

// Bound is closed once Bind succeeded.
func (l *Limiter) Bound() <-chan struct{} { return l.b.Bound() }

// client returns the state of id, creating it.
func (l *Limiter) client(id string) *client {
	if c := (*l.clients.Load())[id]; c != nil {
		return c
	}
	l.addMu.Lock()
	defer l.addMu.Unlock()
	m := *l.clients.Load()
	if c := m[id]; c != nil {
		return c
	}
	c := newClient(id)
	next := make(map[string]*client, len(m)+1)
	maps.Copy(next, m)
	next[id] = c
	l.clients.Store(&next)
	return c
}

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
