package planlimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
)

// promptly is how soon every member must react to a change another member
// reported (one interval plus propagation, with room for -race).
const promptly = time.Second

func threeMembers(t *testing.T, clk *clock, mo memberOpts) []*member {
	t.Helper()
	s := startServer(t)
	return []*member{
		startMember(t, s.ClientURL(), "proxy-a", clk, mo),
		startMember(t, s.ClientURL(), "proxy-b", clk, mo),
		startMember(t, s.ClientURL(), "proxy-c", clk, mo),
	}
}

// paced issues attempts round-robin across ms, one every pace, calling try
// for each; it returns the attempts per report interval it achieved (the
// "one interval's worth" of the overshoot bound).
func paced(ms []*member, n int, pace, interval time.Duration, try func(m *member)) float64 {
	began := time.Now()
	for i := range n {
		try(ms[i%len(ms)])
		time.Sleep(pace)
	}
	return float64(n) * float64(interval) / float64(time.Since(began))
}

// TestFleetRequestsPerMinute: three proxies with a 60 req/min plan admit
// about 60 requests in the minute together, not 180; another client is not
// affected.
func TestFleetRequestsPerMinute(t *testing.T) {
	clk := newClock(start) // fixed 30 s into a minute: no previous minute
	const interval = 50 * time.Millisecond
	ms := threeMembers(t, clk, memberOpts{interval: interval})
	lim := &Limits{Plan: "pro", RequestsPerMinute: 60}

	var admitted int
	perInterval := paced(ms, 600, time.Millisecond, interval, func(m *member) {
		tk, r := m.Admit("team-a", lim, 0)
		if r != nil {
			if r.Code != RateLimited || r.Limit != "requests_per_minute" {
				t.Fatalf("refusal %+v, want rate_limited on requests_per_minute", r)
			}
			return
		}
		admitted++
		m.Done(tk, 10, 0, false)
	})
	// In flight: 0 (each request is done at once). One interval's worth:
	// what the fleet attempted per interval.
	bound := 60 + 0 + int(math.Ceil(perInterval))
	t.Logf("admitted %d of 600 attempts (%.1f attempts per interval; bound %d; alone each would admit 60, 180 in all)",
		admitted, perInterval, bound)
	if admitted < 60 || admitted > bound {
		t.Fatalf("admitted %d, want between 60 and %d", admitted, bound)
	}

	// Every member agrees on the fleet's count and refuses.
	testkit.CheckFor(t, promptly, 5*time.Millisecond, func() error {
		for _, m := range ms {
			if u := m.Snapshot("team-a"); u.Requests != float64(admitted) {
				return fmt.Errorf("%s sees %g requests, want %d", m.Instance(), u.Requests, admitted)
			}
		}
		return nil
	})
	for _, m := range ms {
		_, r := m.Admit("team-a", lim, 0)
		if r == nil {
			t.Fatalf("%s admitted request %d", m.Instance(), admitted+1)
		}
		if want := `requests_per_minute limit of plan "pro" (60) reached`; r.Message != want || r.Plan != "pro" {
			t.Errorf("message %q, want %q", r.Message, want)
		}
		// The current minute alone reached the limit: the rest of this
		// minute, then until its weight in the next one falls below 60.
		want := 30 + 60*(1-60/float64(admitted))
		if s := float64(r.RetryAfterSeconds()); s < want || s > want+1 {
			t.Errorf("Retry-After %g s, want %.1f rounded up", s, want)
		}
		if tk, r := m.Admit("team-b", lim, 0); r != nil {
			t.Errorf("%s refused another client: %v", m.Instance(), r)
		} else {
			m.Done(tk, 0, 0, false)
		}
	}
}

// TestFleetTokensPerMinute: tokens count when requests end, fleet-wide.
func TestFleetTokensPerMinute(t *testing.T) {
	clk := newClock(start)
	ms := threeMembers(t, clk, memberOpts{})
	lim := &Limits{Plan: "pro", TokensPerMinute: 3000}
	for _, m := range ms {
		tk, r := m.Admit("team-a", lim, 0)
		if r != nil {
			t.Fatal(r)
		}
		m.Done(tk, 1000, 0, false)
	}
	testkit.CheckFor(t, promptly, 5*time.Millisecond, func() error {
		for _, m := range ms {
			if r := probe(m.Limiter, "team-a", lim); r == nil || r.Limit != "tokens_per_minute" {
				return fmt.Errorf("%s: refusal %v, want tokens_per_minute", m.Instance(), r)
			}
		}
		return nil
	})
}

// TestFleetConcurrency: at most 2 requests in flight fleet-wide (plus
// what one interval lets through); a finished request frees its slot
// everywhere; a member that stops does not block the client beyond its
// in-flight key's TTL.
func TestFleetConcurrency(t *testing.T) {
	clk := newClock(start)
	const interval = 50 * time.Millisecond
	ms := threeMembers(t, clk, memberOpts{interval: interval})
	lim := &Limits{Plan: "pro", ConcurrentRequests: 2}

	type held struct {
		m  *member
		tk Ticket
	}
	var tickets []held
	perInterval := paced(ms, 60, 5*time.Millisecond, interval, func(m *member) {
		tk, r := m.Admit("team-a", lim, 0)
		if r != nil {
			if r.Code != ConcurrencyLimited || r.RetryAfter != time.Second {
				t.Fatalf("refusal %+v, want concurrency_limited, Retry-After 1 s", r)
			}
			return
		}
		tickets = append(tickets, held{m, tk})
	})
	bound := 2 + int(math.Ceil(perInterval))
	t.Logf("held %d at once (%.1f attempts per interval; bound %d)", len(tickets), perInterval, bound)
	if len(tickets) < 2 || len(tickets) > bound {
		t.Fatalf("held %d, want between 2 and %d", len(tickets), bound)
	}
	inFlight := func(want int64) func() error {
		return func() error {
			for _, m := range ms {
				if n := m.Snapshot("team-a").InFlight; n != want {
					return fmt.Errorf("%s sees %d in flight, want %d", m.Instance(), n, want)
				}
			}
			return nil
		}
	}
	testkit.CheckFor(t, promptly, 5*time.Millisecond, inFlight(int64(len(tickets))))
	for _, m := range ms {
		if r := probe(m.Limiter, "team-a", lim); r == nil || r.Code != ConcurrencyLimited {
			t.Fatalf("%s: %v, want concurrency_limited", m.Instance(), r)
		} else if want := `concurrent_requests limit of plan "pro" (2) reached`; r.Message != want {
			t.Errorf("message %q, want %q", r.Message, want)
		}
	}

	// Done frees the slots everywhere.
	for _, h := range tickets {
		h.m.Done(h.tk, 0, 0, false)
	}
	testkit.CheckFor(t, promptly, 5*time.Millisecond, inFlight(0))
	a, b, c := ms[0], ms[1], ms[2]
	for _, m := range []*member{a, b} {
		if _, r := m.Admit("team-a", lim, 0); r != nil {
			t.Fatalf("%s after Done: %v", m.Instance(), r)
		}
	}
	testkit.CheckFor(t, promptly, 5*time.Millisecond, inFlight(2))
	if _, r := c.Admit("team-a", lim, 0); r == nil {
		t.Fatal("c admitted a third request")
	}

	// a and b's requests never end: their members stop (as if they
	// crashed); their in-flight keys stay behind until their TTL.
	a.stop()
	b.stop()
	stopped := time.Now()
	testkit.CheckFor(t, a.inflightTTL+3*time.Second, 20*time.Millisecond, func() error {
		if n := c.Snapshot("team-a").InFlight; n != 0 {
			return fmt.Errorf("c still sees %d in flight", n)
		}
		return nil
	})
	t.Logf("in-flight keys of stopped members gone after %v (TTL %v)", time.Since(stopped).Round(time.Millisecond), a.inflightTTL)
	if _, r := c.Admit("team-a", lim, 0); r != nil {
		t.Fatalf("c after the stopped members' keys expired: %v", r)
	}
}

// TestFleetBudget: spend adds up fleet-wide; the request that exhausts
// the day budget makes exactly one member record it (and call
// OnExhausted); every member refuses at once; an estimate above what is
// left is refused; a reset lets requests through everywhere; the next day
// starts from 0.
func TestFleetBudget(t *testing.T) {
	clk := newClock(start)
	var (
		mu   sync.Mutex
		exhs []Exhaustion
	)
	onExh := func(e Exhaustion) {
		mu.Lock()
		defer mu.Unlock()
		exhs = append(exhs, e)
	}
	exhausted := func() []Exhaustion {
		mu.Lock()
		defer mu.Unlock()
		return append([]Exhaustion(nil), exhs...)
	}
	ms := threeMembers(t, clk, memberOpts{onExhausted: onExh})
	lim := &Limits{Plan: "pro"}
	lim.Budget.Day = 1.00
	ctx := context.Background()

	spend := func(m *member, cost float64) {
		t.Helper()
		tk, r := m.Admit("team-a", lim, 0)
		if r != nil {
			t.Fatalf("%s: %v", m.Instance(), r)
		}
		m.Done(tk, 100, cost, true)
	}
	sees := func(want float64) func() error {
		return func() error {
			for _, m := range ms {
				if got := m.Snapshot("team-a").Day.SpendUSD; math.Abs(got-want) > 1e-9 {
					return fmt.Errorf("%s sees $%g spent today, want $%g", m.Instance(), got, want)
				}
			}
			return nil
		}
	}
	for _, m := range ms {
		spend(m, 0.30)
	}
	testkit.CheckFor(t, promptly, 5*time.Millisecond, sees(0.90))

	// An estimate above what is left is refused; one below passes.
	_, r := ms[0].Admit("team-a", lim, 0.20)
	if r == nil || r.Code != BudgetInsufficient || r.Limit != "budget.day" {
		t.Fatalf("estimate $0.20 with $0.10 left: %v, want budget_insufficient", r)
	}
	if want := `estimated cost $0.20 exceeds what is left of the day budget of plan "pro" ($0.10 of $1.00)`; r.Message != want {
		t.Errorf("message %q, want %q", r.Message, want)
	}
	tk, r := ms[0].Admit("team-a", lim, 0.05)
	if r != nil {
		t.Fatalf("estimate $0.05 with $0.10 left: %v", r)
	}
	ms[0].Done(tk, 0, 0, false) // cancelled, nothing spent

	// Three requests end at once on three members: together they exhaust
	// the budget, which each member notices from the reports and races to
	// record.
	var tks [3]Ticket
	for i, m := range ms {
		tk, r := m.Admit("team-a", lim, 0)
		if r != nil {
			t.Fatal(r)
		}
		tks[i] = tk
	}
	var wg sync.WaitGroup
	ended := time.Now()
	for i, m := range ms {
		wg.Go(func() { m.Done(tks[i], 100, 0.05, true) })
	}
	wg.Wait()
	testkit.CheckFor(t, promptly, 2*time.Millisecond, func() error {
		for _, m := range ms {
			if r := probe(m.Limiter, "team-a", lim); r == nil || r.Code != BudgetExhausted {
				return fmt.Errorf("%s: %v, want budget_exhausted", m.Instance(), r)
			}
		}
		return nil
	})
	t.Logf("every member refuses %v after the exhausting requests ended", time.Since(ended).Round(time.Millisecond))
	testkit.CheckFor(t, promptly, 5*time.Millisecond, sees(1.05))
	// Every member applies the one exhausted key: no claim is left to make.
	day := clk.dayToken()
	testkit.CheckFor(t, promptly, 5*time.Millisecond, func() error {
		if len(exhausted()) == 0 {
			return errors.New("OnExhausted not called")
		}
		for _, m := range ms {
			c := m.client("team-a")
			c.mu.Lock()
			ok := c.exhausted(0, clk.periods())
			c.mu.Unlock()
			if !ok {
				return fmt.Errorf("%s has no exhausted key", m.Instance())
			}
		}
		return nil
	})
	got := exhausted()
	if len(got) != 1 {
		t.Fatalf("OnExhausted called %d times, want once: %+v", len(got), got)
	}
	// Recorded by the first member that saw $1.00 (two of the three
	// requests) or more.
	if e := got[0]; e.Client != "team-a" || e.Plan != "pro" || e.Period != "day" || e.PeriodID != day ||
		e.BudgetUSD != 1 || e.SpendUSD < 1-1e-9 || !e.Ends.Equal(clk.dayEnds()) {
		t.Errorf("exhaustion %+v", e)
	}
	if _, err := ms[0].kv.Get(ctx, "team-a.exhausted."+day); err != nil {
		t.Fatalf("exhausted key: %v", err)
	}
	for _, m := range ms {
		_, r := m.Admit("team-a", lim, 0)
		if want := `day budget of plan "pro" ($1.00) exhausted`; r == nil || r.Message != want {
			t.Fatalf("%s: %v, want %q", m.Instance(), r, want)
		}
		if s := r.RetryAfterSeconds(); math.Abs(float64(s)-clk.untilDayEnd()) > 1 {
			t.Errorf("Retry-After %d s, want the rest of the day (%.0f s)", s, clk.untilDayEnd())
		}
		if u := m.Snapshot("team-a"); !u.Day.Exhausted || u.Day.BudgetUSD != 1 || u.Day.ID != day {
			t.Errorf("%s snapshot day %+v", m.Instance(), u.Day)
		}
	}

	// An operator resets the budget on one member: every member admits
	// again within a second, and the exhausted key is gone.
	reset := time.Now()
	if err := ms[1].ResetBudget(ctx, "team-a", "alice"); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, promptly, 2*time.Millisecond, func() error {
		for _, m := range ms {
			u := m.Snapshot("team-a")
			if u.Day.Exhausted || u.Day.SpendUSD != 0 || u.Reset == nil || u.Reset.By != "alice" {
				return fmt.Errorf("%s after the reset: %+v", m.Instance(), u)
			}
		}
		return nil
	})
	t.Logf("every member admits %v after the reset", time.Since(reset).Round(time.Millisecond))
	for _, m := range ms {
		spend(m, 0.10)
	}
	// The exhausted key is deleted, or stale: one that a member created
	// after the reset from an older view names an older reset.
	switch e, err := ms[0].kv.Get(ctx, "team-a.exhausted."+day); {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		t.Errorf("exhausted key after the reset: %v", err)
	default:
		var exh Exhaustion
		if err := json.Unmarshal(e.Value(), &exh); err != nil || exh.ResetRevision != 0 {
			t.Errorf("exhausted key after the reset: %s, want deleted or stale", e.Value())
		}
	}
	testkit.CheckFor(t, promptly, 5*time.Millisecond, sees(0.30))

	// Exhausted again after the reset: recorded once more.
	spend(ms[2], 0.80)
	testkit.CheckFor(t, promptly, 5*time.Millisecond, func() error {
		for _, m := range ms {
			if r := probe(m.Limiter, "team-a", lim); r == nil || r.Code != BudgetExhausted {
				return fmt.Errorf("%s: %v, want budget_exhausted", m.Instance(), r)
			}
		}
		if n := len(exhausted()); n != 2 {
			return fmt.Errorf("%d exhaustions recorded, want 2", n)
		}
		return nil
	})
	if e := exhausted()[1]; e.ResetRevision == 0 {
		t.Errorf("exhaustion after the reset does not name the reset: %+v", e)
	}

	// The next day starts from 0 (every member looks before any spends:
	// one member's spending reaches the others within a report).
	clk.Add(24 * time.Hour)
	for _, m := range ms {
		if u := m.Snapshot("team-a"); u.Day.SpendUSD != 0 || u.Day.Exhausted || u.Day.ID == day {
			t.Errorf("%s the next day: %+v", m.Instance(), u.Day)
		}
	}
	for _, m := range ms {
		spend(m, 0.10)
	}
	testkit.CheckFor(t, promptly, 5*time.Millisecond, sees(0.30))
}

// TestRaisedBudgetExhaustedAgain: the instance that recorded a budget's
// exhaustion records it again (one exhausted event more) when its spend
// reaches a budget raised since.
func TestRaisedBudgetExhaustedAgain(t *testing.T) {
	ns := startServer(t)
	clk := newClock(start)
	var mu sync.Mutex
	var events []Exhaustion
	a := startMember(t, ns.ClientURL(), "p1", clk, memberOpts{onExhausted: func(x Exhaustion) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, x)
	}})
	spend := func(lim *Limits, usd float64) {
		tk, r := a.Admit("team-a", lim, 0)
		if r != nil {
			t.Fatal(r)
		}
		a.Done(tk, 10, usd, true)
	}
	recorded := func(n int, budget float64) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(events) == n && events[n-1].BudgetUSD == budget
		}
	}
	low, raised := &Limits{Plan: "pro"}, &Limits{Plan: "pro"}
	low.Budget.Day, raised.Budget.Day = 1, 2
	spend(low, 1.2)
	testkit.WaitFor(t, 5*time.Second, recorded(1, 1))
	spend(raised, 1)
	testkit.WaitFor(t, 5*time.Second, recorded(2, 2))
}

// TestResetBeforeLoad: a budget reset asked of a limiter that has not
// loaded the fleet's consumption yet (an admin service just started) is
// refused (ErrNotLoaded) rather than written with a baseline of $0, which
// would reset nothing.
func TestResetBeforeLoad(t *testing.T) {
	ns := startServer(t)
	js, kv := bucket(t, ns.ClientURL())
	admin, err := New(Options{Instance: "admin", Conn: js.Conn(), Now: newClock(start).Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Bind(kv); err != nil {
		t.Fatal(err)
	}
	if err := admin.ResetBudget(context.Background(), "team-a", "alice"); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("reset before the load: %v, want ErrNotLoaded", err)
	}
	if _, err := kv.Get(context.Background(), resetKey("team-a")); err == nil {
		t.Fatal("a reset key was written before the load")
	}
}

// TestRaisedBudgetAdmitsAgain: a client refused at its budget is admitted
// again when its plan's budget is raised above its spend, on the instance
// that recorded the exhaustion and on another; when the spend reaches the
// new budget it is refused again, fleet-wide.
func TestRaisedBudgetAdmitsAgain(t *testing.T) {
	ns := startServer(t)
	clk := newClock(start)
	a := startMember(t, ns.ClientURL(), "p1", clk, memberOpts{})
	b := startMember(t, ns.ClientURL(), "p2", clk, memberOpts{})
	low := &Limits{Plan: "pro"}
	low.Budget.Day = 1
	tk, r := a.Admit("team-a", low, 0)
	if r != nil {
		t.Fatal(r)
	}
	a.Done(tk, 10, 1.2, true)
	for _, m := range []*member{a, b} {
		testkit.WaitFor(t, 5*time.Second, func() bool { return m.Snapshot("team-a").Day.Exhausted && probe(m.Limiter, "team-a", low) != nil })
	}
	raised := &Limits{Plan: "pro"}
	raised.Budget.Day = 2
	for _, m := range []*member{a, b} {
		if r := probe(m.Limiter, "team-a", raised); r != nil {
			t.Fatalf("refused with $0.80 of a raised $2 budget left: %s", r.Message)
		}
	}
	tk, r = b.Admit("team-a", raised, 0)
	if r != nil {
		t.Fatal(r)
	}
	b.Done(tk, 10, 1, true) // $2.20 spent
	for _, m := range []*member{a, b} {
		testkit.WaitFor(t, 5*time.Second, func() bool { return probe(m.Limiter, "team-a", raised) != nil })
	}
}

// TestSlidingWindow: in the next minute the previous minute's requests
// weigh in by the part of it the sliding window still covers.
func TestSlidingWindow(t *testing.T) {
	clk := newClock(start)
	s := startServer(t)
	a := startMember(t, s.ClientURL(), "proxy-a", clk, memberOpts{})
	b := startMember(t, s.ClientURL(), "proxy-b", clk, memberOpts{})
	lim := &Limits{Plan: "pro", RequestsPerMinute: 60}
	for _, m := range []*member{a, b} {
		for range 20 {
			tk, r := m.Admit("team-a", lim, 0)
			if r != nil {
				t.Fatal(r)
			}
			m.Done(tk, 0, 0, false)
		}
	}
	testkit.CheckFor(t, promptly, 5*time.Millisecond, func() error {
		if n := a.Snapshot("team-a").Requests; n != 40 {
			return fmt.Errorf("a sees %g requests, want 40", n)
		}
		return nil
	})
	// 15 s into the next minute: 40 * 45/60 = 30 of the previous minute
	// still count, so a may admit 30 more.
	clk.Set(time.Unix((clk.Minute()+1)*60+15, 0))
	if n := a.Snapshot("team-a").Requests; n != 30 {
		t.Fatalf("15 s into the next minute a sees %g, want 30", n)
	}
	admitted := 0
	var r *Refusal
	for r == nil {
		var tk Ticket
		if tk, r = a.Admit("team-a", lim, 0); r == nil {
			admitted++
			a.Done(tk, 0, 0, false)
		}
	}
	if admitted != 30 {
		t.Errorf("admitted %d in the next minute, want 30", admitted)
	}
	if r.RetryAfter != time.Second {
		t.Errorf("Retry-After %v, want 1s (the previous minute's weight falls at once)", r.RetryAfter)
	}
	// 45 s in, the previous minute weighs 40 * 15/60 = 10: 30 + 10 < 60.
	clk.Add(30 * time.Second)
	if tk, r := a.Admit("team-a", lim, 0); r != nil {
		t.Errorf("45 s into the minute: %v", r)
	} else {
		a.Done(tk, 0, 0, false)
	}
}

// TestUnbound: without NATS the limits apply per process, and nothing
// blocks or fails.
func TestUnbound(t *testing.T) {
	clk := newClock(start)
	s := startServer(t)
	js, _ := bucket(t, s.ClientURL())
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no connection", Options{Instance: "proxy-a", Now: clk.Now}},
		{"never bound", Options{Instance: "proxy-a", Now: clk.Now, Conn: js.Conn(), Interval: 10 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.Run(ctx) }()
			lim := &Limits{Plan: "pro", RequestsPerMinute: 60, ConcurrentRequests: 100}
			lim.Budget.Day = 1
			admitted := 0
			for range 100 {
				if tk, r := l.Admit("team-a", lim, 0); r == nil {
					admitted++
					l.Done(tk, 10, 0.001, true)
				}
			}
			if admitted != 60 {
				t.Errorf("admitted %d, want 60", admitted)
			}
			if u := l.Snapshot("team-a"); u.Requests != 60 || u.Tokens != 600 || math.Abs(u.Day.SpendUSD-0.06) > 1e-9 {
				t.Errorf("snapshot %+v", u)
			}
			if err := l.ResetBudget(ctx, "team-a", "alice"); !errors.Is(err, ErrUnbound) {
				t.Errorf("ResetBudget: %v, want ErrUnbound", err)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return")
			}
		})
	}
}

// TestKeys: the keys and values in the bucket are the documented contract,
// with their TTLs.
func TestKeys(t *testing.T) {
	clk := newClock(start)
	s := startServer(t)
	a := startMember(t, s.ClientURL(), "proxy.host-1", clk, memberOpts{})
	if a.Instance() != "proxy_host-1" {
		t.Fatalf("instance %q, want proxy_host-1", a.Instance())
	}
	lim := &Limits{Plan: "pro"}
	for range 3 {
		tk, _ := a.Admit("team-a", lim, 0)
		a.Done(tk, 250, 0.125, true)
	}
	held, _ := a.Admit("team-a", lim, 0)
	defer a.Done(held, 0, 0, false)

	m := clk.Minute()
	want := map[string]string{
		fmt.Sprintf("team-a.req.m%d.proxy_host-1", m): `{"v":1,"n":4}`,
		fmt.Sprintf("team-a.tok.m%d.proxy_host-1", m): `{"v":1,"n":750}`,
		"team-a.usd.d20250115.proxy_host-1":           `{"v":1,"usd":0.375}`,
		"team-a.usd.w2025W03.proxy_host-1":            `{"v":1,"usd":0.375}`,
		"team-a.usd.m202501.proxy_host-1":             `{"v":1,"usd":0.375}`,
		"team-a.inflight.proxy_host-1":                `{"v":1,"n":1,"ttl_s":2}`,
	}
	// Real-time TTLs: the clock is at 12:00:30 on Wednesday 15 January.
	ttls := map[string]time.Duration{
		"req": MinuteTTL, "tok": MinuteTTL, "inflight": MinInflightTTL,
		"d20250115": 11*time.Hour + 59*time.Minute + 30*time.Second + PeriodMargin,
		"w2025W03":  4*24*time.Hour + 11*time.Hour + 59*time.Minute + 30*time.Second + PeriodMargin,
		"m202501":   16*24*time.Hour + 11*time.Hour + 59*time.Minute + 30*time.Second + PeriodMargin,
	}
	ctx := context.Background()
	js, _ := bucket(t, s.ClientURL())
	stream, err := js.Stream(ctx, "KV_switchyard_limits")
	if err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, promptly, 10*time.Millisecond, func() error {
		for key, val := range want {
			msg, err := stream.GetLastMsgForSubject(ctx, "$KV.switchyard_limits."+key)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if string(msg.Data) != val {
				return fmt.Errorf("%s = %s, want %s", key, msg.Data, val)
			}
			tok := strings.Split(key, ".")[1]
			if tok == "usd" {
				tok = strings.Split(key, ".")[2]
			}
			ttl, err := time.ParseDuration(msg.Header.Get(jetstream.MsgTTLHeader))
			if err != nil || ttl != ttlOf(ttls[tok]) {
				return fmt.Errorf("%s: TTL %q, want %v", key, msg.Header.Get(jetstream.MsgTTLHeader), ttlOf(ttls[tok]))
			}
		}
		return nil
	})
}

// TestPredecessor: a process restarted with the same instance id carries
// on from its predecessor's totals instead of overwriting them.
func TestPredecessor(t *testing.T) {
	clk := newClock(start)
	s := startServer(t)
	lim := &Limits{Plan: "pro", RequestsPerMinute: 60}
	a := startMember(t, s.ClientURL(), "proxy-a", clk, memberOpts{})
	for range 10 {
		tk, _ := a.Admit("team-a", lim, 0)
		a.Done(tk, 0, 0.5, true)
	}
	a.stop()
	again := startMember(t, s.ClientURL(), "proxy-a", clk, memberOpts{})
	if u := again.Snapshot("team-a"); u.Requests != 10 || u.Day.SpendUSD != 5 {
		t.Fatalf("restarted: %g requests, $%g, want 10 and $5", u.Requests, u.Day.SpendUSD)
	}
}

// TestRunTwice: one Run per Limiter.
func TestRunTwice(t *testing.T) {
	l, err := New(Options{Instance: "p"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var started atomic.Bool
	done := make(chan error, 1)
	go func() { started.Store(true); done <- l.Run(ctx) }()
	testkit.WaitFor(t, time.Second, started.Load)
	testkit.WaitFor(t, time.Second, l.running.Load)
	if err := l.Run(ctx); err == nil {
		t.Error("a second Run succeeded")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := l.Bind(nil); err == nil {
		t.Error("Bind(nil) succeeded")
	}
}

// TestNATSDown: when NATS goes away, a member keeps admitting from memory
// (its own counts and the others' last reports), and the others'
// in-flight counts stop holding slots once their keys' TTL has passed.
func TestNATSDown(t *testing.T) {
	clk := newClock(start)
	s := startServer(t)
	a := startMember(t, s.ClientURL(), "proxy-a", clk, memberOpts{})
	b := startMember(t, s.ClientURL(), "proxy-b", clk, memberOpts{})
	lim := &Limits{Plan: "pro", RequestsPerMinute: 10, ConcurrentRequests: 2}
	for range 2 {
		if _, r := b.Admit("team-a", lim, 0); r != nil {
			t.Fatal(r)
		}
	}
	testkit.CheckFor(t, promptly, 5*time.Millisecond, func() error {
		if n := a.Snapshot("team-a").InFlight; n != 2 {
			return fmt.Errorf("a sees %d in flight, want 2", n)
		}
		return nil
	})
	natsembed.Stop(s)
	down := time.Now()
	if _, r := a.Admit("team-a", lim, 0); r == nil || r.Code != ConcurrencyLimited {
		t.Fatalf("a with NATS down, b's requests in flight: %v, want concurrency_limited", r)
	}
	testkit.CheckFor(t, a.inflightTTL+2*time.Second, 10*time.Millisecond, func() error {
		if n := a.Snapshot("team-a").InFlight; n != 0 {
			return fmt.Errorf("a still sees %d in flight", n)
		}
		return nil
	})
	t.Logf("b's in-flight count forgotten %v after NATS went down (TTL %v)", time.Since(down).Round(time.Millisecond), a.inflightTTL)
	// b's 2 requests still count in the minute: 8 more.
	admitted := 0
	for range 20 {
		if tk, r := a.Admit("team-a", lim, 0); r == nil {
			admitted++
			a.Done(tk, 0, 0, false)
		}
	}
	if admitted != 8 {
		t.Errorf("a admitted %d with NATS down, want 8", admitted)
	}
	stopped := time.Now()
	a.stop()
	if d := time.Since(stopped); d > 2*time.Second {
		t.Errorf("Run took %v to return with NATS down", d)
	}
}
