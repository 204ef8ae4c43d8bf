package planlimit

import (
	"math"
	"sync"
	"time"
)

// epsilon absorbs float rounding when spend is compared with a budget
// (0.3+0.3+0.4 is not quite 1).
const epsilon = 1e-9

// minuteCount is this instance's requests and tokens in one minute, and
// what of them was last written to the bucket.
type minuteCount struct {
	idx            int64
	req, tok       int64
	repReq, repTok int64
}

// spendCount is this instance's spend in one period, and what of it was
// last written.
type spendCount struct {
	id       int64
	usd, rep float64
}

// marker is an exhausted key as applied.
type marker struct {
	rev uint64
	exh Exhaustion
}

// client is everything known about one client id: this instance's own
// counts, the latest totals the other instances reported, the exhausted
// markers and the last budget reset. mu guards all but id.
type client struct {
	id         string
	reportable bool // id is a valid key token

	mu   sync.Mutex
	lim  *Limits // from the last Admit
	cur  minuteCount
	prev minuteCount
	// in flight now, last written, and when (wall clock: TTLs are real)
	inflight, repInflight int64
	inflightAt            time.Time
	spend                 [3]spendCount

	others map[win]map[string]float64 // the other instances' reports
	sums   map[win]float64            // others summed per window
	ov     othersView                 // sums and baseline of the current windows
	// heard is when each other instance's in-flight count last arrived
	// (wall clock) and its TTL: a live instance renews it every half TTL.
	heard map[string]heardAt

	markers  map[win]marker
	resetRev uint64 // bucket revision of the reset applied (0: none)
	reset    *ResetRecord
	baseline map[win]float64
	// claim holds, per period, the period id for which this instance is
	// creating (or created) the exhausted key.
	claim [3]int64
	// claimAt is the budget each claim was for: a budget raised since is
	// claimed again when the spend reaches it.
	claimAt [3]float64
	// won holds the revisions of exhausted keys this instance created and
	// its watcher has not applied yet: OnExhausted is called when it does.
	won map[win]uint64
}

func newClient(id string) *client {
	return &client{id: id, reportable: validID(id)}
}

// othersView caches what admission reads of sums and baseline for the
// current minute and periods, so that the request path does no map
// lookups; it is rebuilt when the windows move or sums or baseline change.
type othersView struct {
	valid                      bool
	m                          int64
	ids                        [3]int64
	req, reqPrev, tok, tokPrev float64
	inflight                   float64
	spend, base                [3]float64
}

// view returns the cached othersView of the current windows (roll first).
func (c *client) view(p *periods) *othersView {
	v := &c.ov
	if v.valid && v.m == c.cur.idx && v.ids == p.ids {
		return v
	}
	m := c.cur.idx
	*v = othersView{valid: true, m: m, ids: p.ids}
	if len(c.sums) > 0 {
		v.req, v.reqPrev = c.sums[win{kindReq, m}], c.sums[win{kindReq, m - 1}]
		v.tok, v.tokPrev = c.sums[win{kindTok, m}], c.sums[win{kindTok, m - 1}]
		v.inflight = c.sums[win{k: kindInflight}]
		for i := range v.spend {
			v.spend[i] = c.sums[win{kindDay + kind(i), p.ids[i]}]
		}
	}
	for i := range v.base {
		v.base[i] = c.baseline[win{kindDay + kind(i), p.ids[i]}]
	}
	return v
}

// roll moves the windows forward to minute m and periods p.
func (c *client) roll(m int64, p *periods) {
	if m > c.cur.idx {
		if m == c.cur.idx+1 {
			c.prev = c.cur
		} else {
			c.prev = minuteCount{idx: m - 1}
		}
		c.cur = minuteCount{idx: m}
	}
	for k := range c.spend {
		if c.spend[k].id != p.ids[k] {
			c.spend[k] = spendCount{id: p.ids[k]}
		}
	}
}

// prune drops the other instances' reports and the exhausted keys of
// windows that have passed.
func (c *client) prune(m int64, p *periods) {
	for w := range c.others {
		if past(w, m, p) {
			delete(c.others, w)
			delete(c.sums, w)
			c.ov.valid = false
		}
	}
	for w := range c.markers {
		if past(w, m, p) {
			delete(c.markers, w)
		}
	}
	for w := range c.won {
		if past(w, m, p) {
			delete(c.won, w)
		}
	}
}

// heardAt is when an in-flight count arrived, and its key's TTL.
type heardAt struct {
	at  time.Time
	ttl time.Duration
}

// forgetSilent drops the in-flight counts of instances not heard of for
// longer than their keys' TTL (plus grace): their keys have expired even
// if no expiry reached this instance (NATS unreachable, the watcher
// behind), and a dead proxy must not hold a client's slots.
func (c *client) forgetSilent(wall time.Time, grace time.Duration) {
	for inst, h := range c.heard {
		if wall.Sub(h.at) > h.ttl+grace {
			delete(c.heard, inst)
			c.setOther(win{k: kindInflight}, inst, 0, true)
		}
	}
}

// past reports whether window w no longer counts at minute m.
func past(w win, m int64, p *periods) bool {
	switch w.k {
	case kindReq, kindTok:
		return w.id < m-1
	case kindDay, kindWeek, kindMonth:
		return w.id < p.ids[w.k-kindDay]
	}
	return false
}

// setOther records another instance's latest total for w; del removes it.
func (c *client) setOther(w win, instance string, v float64, del bool) {
	c.ov.valid = false
	byInst := c.others[w]
	if del {
		if _, ok := byInst[instance]; !ok {
			return
		}
		delete(byInst, instance)
	} else {
		if byInst == nil {
			if c.others == nil {
				c.others = make(map[win]map[string]float64)
				c.sums = make(map[win]float64)
			}
			byInst = make(map[string]float64, 4)
			c.others[w] = byInst
		}
		byInst[instance] = v
	}
	if len(byInst) == 0 {
		delete(c.others, w)
		delete(c.sums, w)
		return
	}
	var s float64
	for _, x := range byInst {
		s += x
	}
	c.sums[w] = s
}

// minutes is the fleet's requests (or tokens) in the current and the
// previous minute.
func (c *client) minutes(k kind, p *periods) (cur, prev float64) {
	v := c.view(p)
	if k == kindTok {
		cur, prev = float64(c.cur.tok)+v.tok, v.tokPrev
		if c.prev.idx == c.cur.idx-1 {
			prev += float64(c.prev.tok)
		}
		return cur, prev
	}
	cur, prev = float64(c.cur.req)+v.req, v.reqPrev
	if c.prev.idx == c.cur.idx-1 {
		prev += float64(c.prev.req)
	}
	return cur, prev
}

// sliding is the sliding-window estimate: the current minute plus the
// previous one weighted by what is left of the current minute.
func sliding(cur, prev, frac float64) float64 { return cur + prev*(1-frac) }

// inFlight is the fleet's requests in flight.
func (c *client) inFlight(p *periods) int64 {
	return c.inflight + int64(c.view(p).inflight)
}

// rawSpend is the fleet's spend in period i (0 day, 1 week, 2 month) of
// p, before any reset baseline.
func (c *client) rawSpend(i int, p *periods) float64 {
	s := c.view(p).spend[i]
	if c.spend[i].id == p.ids[i] {
		s += c.spend[i].usd
	}
	return s
}

// spendOf is the fleet's spend in period i since the last reset.
func (c *client) spendOf(i int, p *periods) float64 {
	return max(c.rawSpend(i, p)-c.view(p).base[i], 0)
}

// exhausted reports whether a valid exhausted key exists for period i: one
// written by an instance that knew the latest reset.
func (c *client) exhausted(i int, p *periods) bool {
	if len(c.markers) == 0 {
		return false
	}
	return c.markerValid(win{kindDay + kind(i), p.ids[i]})
}

// markerValid reports whether the exhausted key of window w is known and
// not made stale by a later reset, nor by a budget raised above the one it
// was recorded against (the client is admitted again until its spend
// reaches the new budget, when a new key replaces it).
func (c *client) markerValid(w win) bool {
	m, ok := c.markers[w]
	if !ok || m.exh.ResetRevision < c.resetRev {
		return false
	}
	return c.lim == nil || c.lim.budget(int(w.k-kindDay)) <= m.exh.BudgetUSD+epsilon
}

// claimed reports whether this instance has claimed period i's exhausted
// key at budget b (or a higher one) already.
func (c *client) claimed(i int, p *periods, b float64) bool {
	return c.claim[i] == p.ids[i] && c.claimAt[i] >= b-epsilon
}

// needsClaim reports whether some period's spend reached its budget with
// no exhausted key recorded yet and no claim by this instance under way.
func (c *client) needsClaim(p *periods) bool {
	if c.lim == nil || !c.reportable {
		return false
	}
	for i := range 3 {
		b := c.lim.budget(i)
		if b > 0 && !c.claimed(i, p, b) && c.spendOf(i, p) >= b-epsilon && !c.exhausted(i, p) {
			return true
		}
	}
	return false
}

// denial is why check refused, with the numbers for the message.
type denial struct {
	code   Code
	limit  string
	period int // budget: 0 day, 1 week, 2 month
	// sliding windows: the current and previous minute and the limit
	cur, prev, max float64
	// budgets: spend so far, the estimate
	spend, est float64
}

// check decides admission against lim at minute fraction frac.
func (c *client) check(lim *Limits, frac float64, p *periods, est float64) denial {
	for i := range 3 {
		b := lim.budget(i)
		if b <= 0 {
			continue
		}
		s := c.spendOf(i, p)
		switch {
		case c.exhausted(i, p) || s >= b-epsilon:
			return denial{code: BudgetExhausted, limit: "budget." + periodNames[i], period: i, max: b, spend: s, est: est}
		case s+est > b+epsilon:
			return denial{code: BudgetInsufficient, limit: "budget." + periodNames[i], period: i, max: b, spend: s, est: est}
		}
	}
	if lim.RequestsPerMinute > 0 {
		cur, prev := c.minutes(kindReq, p)
		if sliding(cur, prev, frac) >= float64(lim.RequestsPerMinute) {
			return denial{code: RateLimited, limit: "requests_per_minute", cur: cur, prev: prev, max: float64(lim.RequestsPerMinute)}
		}
	}
	if lim.TokensPerMinute > 0 {
		cur, prev := c.minutes(kindTok, p)
		if sliding(cur, prev, frac) >= float64(lim.TokensPerMinute) {
			return denial{code: RateLimited, limit: "tokens_per_minute", cur: cur, prev: prev, max: float64(lim.TokensPerMinute)}
		}
	}
	if lim.ConcurrentRequests > 0 && c.inFlight(p) >= lim.ConcurrentRequests {
		return denial{code: ConcurrencyLimited, limit: "concurrent_requests", max: float64(lim.ConcurrentRequests)}
	}
	return denial{}
}

// slidingWait is how long until the sliding estimate falls below max if
// nothing more is consumed, at fraction frac of the current minute.
func slidingWait(cur, prev, max, frac float64) time.Duration {
	var minutes float64
	switch {
	case cur >= max:
		// wait for the next minute, then until cur*(1-f) < max
		minutes = (1 - frac) + (1 - max/cur)
	case prev > 0:
		// cur + prev*(1-frac-x) < max
		minutes = (1 - frac) - (max-cur)/prev
	}
	return time.Duration(math.Max(minutes, 0) * float64(time.Minute))
}
