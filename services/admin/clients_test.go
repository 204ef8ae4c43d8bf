package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/planlimit"
	"switchyard.dev/shared/testkit"
)

const (
	planClientKeyA = "client-key-team-a-0123456789"
	planClientKeyB = "client-key-team-b-0123456789"
)

// plansYAML gives testYAML two plans: pro (rate limits, a day and a month
// budget, one model) for client team-a and free (no budget) for team-b;
// app keeps no plan. Consumption is reported every 50 ms.
func plansYAML(y string) string {
	return strings.Replace(y, "clients:\n  - {id: app, secret: env:T_CLIENT, models: [\"*\"]}\n", `clients:
  - {id: app, secret: env:T_CLIENT, models: ["*"]}
  - {id: team-a, secret: env:T_CA, models: ["*"], plan: pro}
  - {id: team-b, secret: env:T_CB, models: ["*"], plan: free}
metering:
  limits_interval: 50ms
plans:
  pro:
    models: [gpt-4o]
    requests_per_minute: 100
    tokens_per_minute: 10000
    concurrent_requests: 5
    budget: {day: 1, month: 10}
  free:
    requests_per_minute: 10
`, 1)
}

// startPlansEnv is a test fleet configured with plansYAML.
func startPlansEnv(t *testing.T, opts ...func(*envOptions)) *env {
	t.Helper()
	o := envOptions{edit: plansYAML}
	for _, f := range opts {
		f(&o)
	}
	e := startEnvWith(t, o)
	if e.cfg.Plan("pro") == nil || len(e.cfg.Clients) != 3 {
		t.Fatalf("plansYAML did not apply: %+v", e.cfg.Clients)
	}
	return e
}

// standIn is a proxy's plan limiter: a planlimit.Limiter of its own instance
// on its own NATS connection, bound to switchyard_limits, that admits and
// counts requests as a proxy does.
type standIn struct {
	t     *testing.T
	lim   *planlimit.Limiter
	plans map[string]*planlimit.Limits
}

// standInProxy starts a standIn named instance; onExhausted (may be nil)
// is its Options.OnExhausted. It stops when the test ends.
func (e *env) standInProxy(instance string, onExhausted func(planlimit.Exhaustion)) *standIn {
	e.t.Helper()
	nc, js := testkit.ConnectNATS(e.t, e.ns.ClientURL())
	lim, err := planlimit.New(planlimit.Options{Instance: instance, Conn: nc, Interval: e.cfg.Metering.LimitsInterval, OnExhausted: onExhausted,
		Now: e.limitsNow})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	kv, err := js.KeyValue(ctx, bus.BucketLimits)
	cancel()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := lim.Bind(kv); err != nil {
		e.t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = lim.Run(rctx)
	}()
	e.t.Cleanup(func() { stop(); <-done; nc.Close() })
	s := &standIn{t: e.t, lim: lim, plans: map[string]*planlimit.Limits{}}
	for name, p := range e.cfg.Plans {
		s.plans[name] = planlimit.LimitsOf(name, p)
	}
	return s
}

// admit admits one request of client (plan pro) or fails the test.
func (s *standIn) admit(client string) planlimit.Ticket {
	s.t.Helper()
	t, ref := s.lim.Admit(client, s.plans["pro"], 0)
	if ref != nil {
		s.t.Fatalf("%s refused: %s", client, ref.Message)
	}
	return t
}

// request admits a request of client and ends it with tokens and cost.
func (s *standIn) request(client string, tokens int64, costUSD float64) {
	s.t.Helper()
	s.lim.Done(s.admit(client), tokens, costUSD, true)
}

// clientOf asks GET /admin/clients/{id} and decodes the answer.
func (e *env) clientOf(id string) (adminapi.Client, error) {
	r := e.do("GET", "/admin/clients/"+id, readToken, nil)
	if r.status != 200 {
		return adminapi.Client{}, fmt.Errorf("status %d: %s", r.status, r.raw)
	}
	var v adminapi.Client
	return v, json.Unmarshal(r.raw, &v)
}

// waitClient polls GET /admin/clients/{id} until check passes.
func (e *env) waitClient(id string, check func(adminapi.Client) error) adminapi.Client {
	e.t.Helper()
	var v adminapi.Client
	testkit.CheckFor(e.t, testTimeout, 10*time.Millisecond, func() error {
		var err error
		if v, err = e.clientOf(id); err != nil {
			return err
		}
		return check(v)
	})
	return v
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestClientsAndBudgetReset: two stand-in proxies consume for team-a on
// the limits bucket; the admin API converges on the fleet's consumption
// (clients and plans), sees the day budget exhausted, and an operator's
// reset makes both proxies admit team-a again within a second, with a
// budget event (outcome reset) on switchyard.events.budget.team-a.
func TestClientsAndBudgetReset(t *testing.T) {
	// The plan limits' clock stands still: the sliding minute reads this
	// minute's count plus the last one's fading with the wall clock, so a
	// minute boundary during the test made the counts below read low.
	pinned := time.Now()
	e := startPlansEnv(t, func(o *envOptions) { o.limitsNow = func() time.Time { return pinned } })
	exhausted := make(chan planlimit.Exhaustion, 4)
	// whichever proxy's report loop first sees the spend reach the budget
	// records the exhaustion
	a := e.standInProxy("proxy-a", func(x planlimit.Exhaustion) { exhausted <- x })
	b := e.standInProxy("proxy-b", func(x planlimit.Exhaustion) { exhausted <- x })

	// A: three requests, two of them done ($0.40 and 100 tokens each);
	// B: one done ($0.10, 50 tokens)
	a.request("team-a", 100, 0.4)
	a.request("team-a", 100, 0.4)
	open := a.admit("team-a")
	b.request("team-a", 50, 0.1)

	v := e.waitClient("team-a", func(v adminapi.Client) error {
		u := v.Usage
		if u.InFlight != 1 || !near(u.Day.SpendUSD, 0.9) || !near(u.Month.SpendUSD, 0.9) || u.RequestsPerMinute < 3.5 || u.TokensPerMinute < 200 {
			return fmt.Errorf("usage %+v", u)
		}
		return nil
	})
	u := v.Usage
	if v.Plan != "pro" || v.Limits != (adminapi.Limits{RequestsPerMinute: 100, TokensPerMinute: 10000, ConcurrentRequests: 5, Budget: adminapi.Budget{Day: 1, Month: 10}}) {
		t.Errorf("plan %q limits %+v", v.Plan, v.Limits)
	}
	if u.RequestsPerMinute > 4 || u.TokensPerMinute > 250 {
		t.Errorf("sliding minute: %v requests, %v tokens; at most 4 and 250", u.RequestsPerMinute, u.TokensPerMinute)
	}
	if u.Day.BudgetUSD != 1 || u.Week.BudgetUSD != 0 || u.Month.BudgetUSD != 10 || u.Day.Exhausted || u.Reset != nil {
		t.Errorf("periods %+v %+v %+v reset %v", u.Day, u.Week, u.Month, u.Reset)
	}
	if !strings.HasPrefix(u.Day.ID, "d") || !u.Day.Ends.After(time.Now()) || !strings.HasPrefix(u.Week.ID, "w") || !strings.HasPrefix(u.Month.ID, "m") {
		t.Errorf("period ids and ends: %+v %+v %+v", u.Day, u.Week, u.Month)
	}

	t.Run("list", func(t *testing.T) {
		r := e.do("GET", "/admin/clients", readToken, nil)
		r.expect(t, 200, "")
		var list struct {
			Clients []adminapi.Client `json:"clients"`
			NATS    bool              `json:"nats"`
			Role    string            `json:"role"`
		}
		if err := json.Unmarshal(r.raw, &list); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range list.Clients {
			ids = append(ids, c.ID)
		}
		if !slices.Equal(ids, []string{"app", "team-a", "team-b"}) || !list.NATS || list.Role != "read" {
			t.Fatalf("clients %v nats %v role %q", ids, list.NATS, list.Role)
		}
		if app := list.Clients[0]; app.Plan != "" || app.Limits != (adminapi.Limits{}) || app.Usage.InFlight != 0 {
			t.Errorf("app (no plan): %+v", app)
		}
		if tb := list.Clients[2]; tb.Plan != "free" || tb.Limits.RequestsPerMinute != 10 || tb.Limits.HasBudget() {
			t.Errorf("team-b: %+v", tb)
		}
		for _, secret := range []string{clientKey, planClientKeyA, planClientKeyB} {
			if strings.Contains(string(r.raw), secret) {
				t.Fatal("the clients list shows a client key's secret")
			}
		}
		if r := e.do("GET", "/admin/clients", opToken, nil); r.body["role"] != "operator" {
			t.Errorf("role with the operator token: %v", r.body["role"])
		}
	})

	t.Run("plans", func(t *testing.T) {
		r := e.do("GET", "/admin/plans", readToken, nil)
		r.expect(t, 200, "")
		var list struct {
			Plans []adminapi.Plan `json:"plans"`
		}
		if err := json.Unmarshal(r.raw, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Plans) != 2 || list.Plans[0].Name != "free" || list.Plans[1].Name != "pro" {
			t.Fatalf("plans %+v", list.Plans)
		}
		free, pro := list.Plans[0], list.Plans[1]
		if !slices.Equal(free.Clients, []string{"team-b"}) || free.Models == nil || len(free.Models) != 0 || free.Limits.RequestsPerMinute != 10 {
			t.Errorf("free: %+v", free)
		}
		if !slices.Equal(pro.Clients, []string{"team-a"}) || !slices.Equal(pro.Models, []string{"gpt-4o"}) || pro.Limits.Budget.Day != 1 {
			t.Errorf("pro: %+v", pro)
		}
		if pu := pro.Usage; pu.InFlight != 1 || !near(pu.SpendUSD.Day, 0.9) || pu.RequestsPerMinute < 3.5 || pu.ExhaustedClients != 0 {
			t.Errorf("pro usage %+v", pu)
		}
	})

	// B's next request reaches the day budget: one proxy records the
	// exhaustion and every proxy refuses team-a
	b.request("team-a", 50, 0.2)
	select {
	case x := <-exhausted:
		if x.Client != "team-a" || x.Period != "day" || !near(x.SpendUSD, 1.1) {
			t.Errorf("exhaustion %+v", x)
		}
	case <-time.After(testTimeout):
		t.Fatal("the day budget was never recorded exhausted")
	}
	e.waitClient("team-a", func(v adminapi.Client) error {
		if !v.Usage.Day.Exhausted || !near(v.Usage.Day.SpendUSD, 1.1) || v.Usage.Month.Exhausted {
			return fmt.Errorf("day %+v month %+v", v.Usage.Day, v.Usage.Month)
		}
		return nil
	})
	testkit.CheckFor(t, testTimeout, 5*time.Millisecond, func() error {
		tk, ref := a.lim.Admit("team-a", a.plans["pro"], 0)
		if ref == nil {
			// not seen yet: hand the ticket back, or it stays in flight
			a.lim.Done(tk, 0, 0, false)
			return errors.New("proxy A still admits team-a")
		}
		if ref.Code != planlimit.BudgetExhausted {
			return fmt.Errorf("proxy A refuses team-a with %s, want %s", ref.Code, planlimit.BudgetExhausted)
		}
		return nil
	})
	if r := e.do("GET", "/admin/plans", readToken, nil); !strings.Contains(string(r.raw), `"exhausted_clients":1`) {
		t.Errorf("plans after the exhaustion: %s", r.raw)
	}

	t.Run("refused resets", func(t *testing.T) {
		for _, tt := range []struct {
			name, token, client string
			status              int
			code                string
		}{
			{"no token", "", "team-a", 401, codeUnauthorized},
			{"read token", readToken, "team-a", 403, codeForbidden},
			{"unknown client", opToken, "nope", 404, codeNotFound},
			{"plan without budget", opToken, "team-b", 409, codeNoBudget},
			{"no plan", opToken, "app", 409, codeNoBudget},
		} {
			t.Run(tt.name, func(t *testing.T) {
				e.do("POST", "/admin/clients/"+tt.client+"/budget/reset", tt.token, nil).expect(t, tt.status, tt.code)
			})
		}
		e.do("GET", "/admin/clients/nope", readToken, nil).expect(t, 404, codeNotFound)
		e.do("GET", "/admin/clients", "", nil).expect(t, 401, codeUnauthorized)
		e.do("GET", "/admin/plans", "", nil).expect(t, 401, codeUnauthorized)
		if v, _ := e.clientOf("team-a"); !v.Usage.Day.Exhausted {
			t.Error("a refused reset reset the budget")
		}
	})

	// the reset: answered with the client after it; both proxies admit
	// within a second; one budget event
	events := make(chan *nats.Msg, 8)
	sub, err := e.pnc.ChanSubscribe("switchyard.events.budget.team-a", events)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := e.pnc.Flush(); err != nil {
		t.Fatal(err)
	}
	r := e.do("POST", "/admin/clients/team-a/budget/reset", opToken, nil)
	resetAt := time.Now()
	r.expect(t, 200, "")
	var after adminapi.Client
	if err := json.Unmarshal(r.raw, &after); err != nil {
		t.Fatal(err)
	}
	if d := after.Usage.Day; d.SpendUSD > 1e-9 || d.Exhausted || after.Usage.Month.SpendUSD > 1e-9 || after.Usage.Week.SpendUSD > 1e-9 {
		t.Errorf("after the reset: %+v", after.Usage)
	}
	if rs := after.Usage.Reset; rs == nil || rs.By != "oncall" || time.Since(rs.At) > time.Minute {
		t.Errorf("reset %+v", rs)
	}
	if after.Usage.InFlight != 1 {
		t.Errorf("in flight %d after the reset, want 1 (a reset is about spend)", after.Usage.InFlight)
	}
	for name, s := range map[string]*standIn{"A": a, "B": b} {
		var took time.Duration
		testkit.CheckFor(t, time.Second, 2*time.Millisecond, func() error {
			tk, ref := s.lim.Admit("team-a", s.plans["pro"], 0)
			if ref != nil {
				return fmt.Errorf("proxy %s refuses team-a: %s", name, ref.Message)
			}
			took = time.Since(resetAt)
			s.lim.Done(tk, 0, 0, false)
			return nil
		})
		t.Logf("proxy %s admits team-a %v after the reset answer", name, took)
	}
	select {
	case m := <-events:
		var ev hold.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Version != 1 || ev.Kind != hold.EventBudget || ev.Outcome != "reset" || ev.Source != hold.SourceAdmin ||
			ev.Client != "team-a" || ev.Plan != "pro" || ev.RecordedBy != e.svc.member.Instance || !strings.Contains(ev.Reason, "oncall") {
			t.Errorf("budget event %s", m.Data)
		}
	case <-time.After(testTimeout):
		t.Fatal("no budget event on switchyard.events.budget.team-a")
	}
	if v, _ := e.clientOf("team-a"); v.Usage.Day.Exhausted || v.Usage.Reset == nil {
		t.Errorf("after the reset: %+v", v.Usage)
	}

	// the reset is in the events stream too (kind=budget filter)
	next, stop := e.stream("?kind=budget&since=1m")
	if name, ev := next(); name != "budget" || ev.Outcome != "reset" || ev.Client != "team-a" {
		t.Errorf("events stream: %s %+v", name, ev)
	}
	stop()

	a.lim.Done(open, 10, 0.01, true)

	// NATS gone: a reset is refused, nothing is written
	stopServer(e)
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		r := e.do("POST", "/admin/clients/team-a/budget/reset", opToken, nil)
		if r.status != 503 || r.errCode() != codeNATSUnavailable || !strings.Contains(r.body["error"].(map[string]any)["message"].(string), "NATS is not reachable") {
			return fmt.Errorf("%d %s", r.status, r.raw)
		}
		return nil
	})
	e.do("GET", "/admin/clients/team-a", readToken, nil).expect(t, 200, "")
}

// TestClientsWithoutNATS: an admin service with no NATS answers the
// clients from memory (nats false) and refuses a reset with 503.
func TestClientsWithoutNATS(t *testing.T) {
	cfg := loadConfigEdit(t, "nats://127.0.0.1:1", true, plansYAML)
	svc, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	e := &env{t: t, base: "http://" + ln.Addr().String()}
	r := e.do("GET", "/admin/clients", readToken, nil)
	r.expect(t, 200, "")
	if r.body["nats"] != false || len(r.body["clients"].([]any)) != 3 {
		t.Errorf("clients without NATS: %s", r.raw)
	}
	r = e.do("POST", "/admin/clients/team-a/budget/reset", opToken, nil)
	r.expect(t, 503, codeNATSUnavailable)
	if msg := r.body["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "NATS is not reachable") {
		t.Errorf("message %q", msg)
	}
	e.do("GET", "/admin/plans", readToken, nil).expect(t, 200, "")
}

// TestClientsOpenAPI: the document describes every field of the clients'
// and plans' answers and of budget and guardrail events, and no other.
func TestClientsOpenAPI(t *testing.T) {
	now := time.Now()
	cv := adminapi.Client{Usage: adminapi.ClientUsage{Reset: &adminapi.BudgetReset{By: "oncall", At: now}}}
	for schema, v := range map[string]any{
		"Client":      cv,
		"ClientUsage": cv.Usage,
		"Limits":      cv.Limits,
		"Budget":      cv.Limits.Budget,
		"Period":      planlimit.Period{},
		"BudgetReset": adminapi.BudgetReset{},
		"Plan":        adminapi.Plan{},
		"PlanUsage":   adminapi.PlanUsage{},
		"Event": hold.Event{HoldID: "x", Until: now, Reason: "r", Code: "c", Fingerprint: "f", Outcome: "o", Source: "s",
			Client: "c", Plan: "p", Period: "day", PeriodID: "d1", SpendUSD: 1, BudgetUSD: 1,
			RequestID: "req", Guardrail: "g", Stage: "input", Check: "deny[0]", Route: "chain:x"},
	} {
		checkSchema(t, schema, v)
	}
}

// checkSchema fails the test unless the components schema named schema
// in openapi.json has exactly the top-level fields of v's JSON.
func checkSchema(t *testing.T, schema string, v any) {
	t.Helper()
	b, err := web.ReadFile("web/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(v)
	var fields map[string]any
	_ = json.Unmarshal(raw, &fields)
	props, ok := doc.Components.Schemas[schema]
	if !ok {
		t.Errorf("openapi.json has no schema %s", schema)
		return
	}
	for f := range fields {
		if props.Properties[f] == nil {
			t.Errorf("%s: field %q is not in openapi.json", schema, f)
		}
	}
	for p := range props.Properties {
		if _, ok := fields[p]; !ok {
			t.Errorf("%s: openapi.json has %q, the answer does not", schema, p)
		}
	}
}
