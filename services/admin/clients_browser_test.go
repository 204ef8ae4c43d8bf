package admin

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/planlimit"
	"switchyard.dev/shared/usage"
)

// clientsPage is what the Clients page shows, read in one evaluation in
// the page (it re-renders on every reload: separate reads could straddle
// two renders).
type clientsPage struct {
	State  string `json:"state"`
	Status string `json:"status"`
	// Clients: data-client -> cell class -> cell
	Clients map[string]map[string]clientCell `json:"clients"`
	// Plans: data-plan -> cell class -> text
	Plans map[string]map[string]string `json:"plans"`
	// Resets are the clients with a Reset budget button; Confirms those
	// whose reset waits for its confirmation.
	Resets   []string `json:"resets"`
	Confirms []string `json:"confirms"`
	Error    string   `json:"error"`
}

type clientCell struct {
	Text      string `json:"text"`
	Used      string `json:"used"`
	Exhausted bool   `json:"exhausted"` // an exhausted badge
	Bar       string `json:"bar"`       // the bar's level: ok, high, full ("" without a limit)
}

const readClientsPage = `(() => {
  const q = (s, r) => [...(r || document).querySelectorAll(s)];
  const page = document.querySelector("#clients-page");
  const cell = (td) => ({
    text: td.innerText.replace(/\s+/g, " ").trim(),
    used: (td.querySelector(".used") || {}).innerText || "",
    exhausted: !!td.querySelector(".badge.exhausted"),
    bar: ((td.querySelector(".bar") || {}).className || "").replace("bar", "").trim(),
  });
  return JSON.stringify({
    state: page.dataset.state || "",
    status: document.querySelector("#clients-status").innerText,
    clients: Object.fromEntries(q("#clients tr.client-row").map((tr) =>
      [tr.dataset.client, Object.fromEntries(q("td", tr).map((td) => [td.classList[td.classList.length - 1], cell(td)]))])),
    plans: Object.fromEntries(q("#plans tr.plan-row").map((tr) =>
      [tr.dataset.plan, Object.fromEntries(q("td", tr).map((td) => [td.classList[td.classList.length - 1], td.innerText.replace(/\s+/g, " ").trim()]))])),
    resets: q("#clients button.reset-budget").map((b) => b.dataset.client),
    confirms: q("#clients button.confirm-reset").map((b) => b.dataset.client),
    error: document.querySelector("#clients-error").innerText,
  });
})()`

// clientsPage waits until cond (a JavaScript expression over page, the
// #clients-page element, and row(id), a client's row) holds, then reads
// the page in one evaluation.
func (b *browser) clientsPage(cond string) clientsPage {
	b.t.Helper()
	expr := `(() => { const page = document.querySelector("#clients-page");
	  const row = (id) => document.querySelector('#clients tr.client-row[data-client="' + id + '"]');
	  const cell = (id, cls) => { const r = row(id); const c = r && r.querySelector("td." + cls); return c ? c.innerText.replace(/\s+/g, " ").trim() : "" };
	  return !!page && !page.hidden && (` + cond + `) })()`
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		b.t.Fatalf("clients page never met %s: %v\npage:\n%s", cond, err, b.dump())
	}
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](readClientsPage))
	if err != nil {
		b.t.Fatalf("read the clients page: %v", err)
	}
	var p clientsPage
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		b.t.Fatalf("read the clients page: %v: %s", err, raw)
	}
	return p
}

// TestClientsDashboardInBrowser drives the Clients page in headless
// Chromium: a stand-in proxy's consumption shows up against the plans'
// limits, live; the day budget of team-a is exhausted (a badge), an
// operator presses Reset budget, confirms, and the spend drops to $0.00
// while the proxy admits team-a again; a read token sees no button. With
// DASHBOARD_CLIENTS_SCREENSHOT set (a PNG path) it saves a screenshot of
// the exhausted state.
func TestClientsDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	// The plan limits' clock (the admin's and the stand-in proxy's) stands
	// still: the page shows the sliding minute, this minute's count plus
	// the last one's fading with the wall clock (3 requests read "2.9 / 10"
	// a second into the next minute, 1,200 tokens "1.1k" 2.5 s into it),
	// so a minute boundary between the requests and the page's first
	// render failed the cell checks below. Midnight UTC (the day budget's
	// period) no longer moves under the test either.
	pinned := time.Now()
	e := startPlansEnv(t, func(o *envOptions) { o.limitsNow = func() time.Time { return pinned } })
	// the stand-in proxy publishes its exhaustion events as the proxy does
	proxy := e.standInProxy(e.proxy.Instance, func(x planlimit.Exhaustion) {
		e.proxy.Emit(hold.Event{Kind: hold.EventBudget, Outcome: "exhausted", Source: hold.SourceProxy,
			Client: x.Client, Plan: x.Plan, Period: x.Period, PeriodID: x.PeriodID,
			SpendUSD: x.SpendUSD, BudgetUSD: x.BudgetUSD, Until: x.Ends, Reason: x.Period + " budget exhausted"})
	})
	b := startBrowser(t, 90*time.Second, chromedp.WindowSize(1280, 900))

	// before the page opens: team-a spent $0.60 and has a request in
	// flight; team-b (plan free: 10 requests a minute) made 3 requests
	proxy.request("team-a", 1200, 0.6)
	open := proxy.admit("team-a")
	defer proxy.lim.Done(open, 0, 0, false)
	for range 3 {
		proxy.lim.Done(proxy.admitPlan("team-b", "free"), 40, 0, false)
	}

	// their usage records over the last hours, for the charts by client
	// key: team-a more than team-b
	now := time.Now().UTC()
	var recs []usage.Record
	for i := range 6 {
		recs = append(recs, rec(fmt.Sprintf("ta%d", i), now.Add(-time.Duration(i)*time.Hour-time.Minute), func(r *usage.Record) { r.ClientID, r.Plan = "team-a", "pro" }))
	}
	for i := range 2 {
		recs = append(recs, rec(fmt.Sprintf("tb%d", i), now.Add(-time.Duration(i)*time.Hour-time.Minute), func(r *usage.Record) { r.ClientID, r.Plan = "team-b", "free" }))
	}
	e.publishUsage(recs...)

	if err := b.login(e.base, opToken); err != nil {
		t.Fatalf("open the dashboard: %v\npage:\n%s", err, b.dump())
	}
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(`#tab-clients`))); err != nil {
		t.Fatal(err)
	}
	p := b.clientsPage(`page.dataset.state === "ready" && cell("team-a", "day").startsWith("$0.60 / $1.00") && cell("team-b", "rpm").startsWith("3 / 10")`)
	before := b.clientCharts()
	if got := before["client-requests"]; got.Series["team-a"] != 6 || got.Series["team-b"] != 2 || got.Colors["team-a"] == "" || got.Colors["team-a"] == got.Colors["team-b"] {
		t.Errorf("requests by client key: %+v", got)
	}
	if got := before["client-cost"]; got.Series["team-a"] == 0 {
		t.Errorf("cost by client key: %+v", got)
	}
	// team-b overtakes team-a: the charts drawn again keep each key's colour
	recs = recs[:0]
	for i := range 8 {
		recs = append(recs, rec(fmt.Sprintf("tb-more%d", i), now.Add(-2*time.Minute), func(r *usage.Record) { r.ClientID, r.Plan = "team-b", "free" }))
	}
	e.publishUsage(recs...)
	b.click(`#tab-usage`)
	b.click(`#tab-clients`)
	after := b.clientCharts(`cr.series["team-b"] === 10`)
	for _, id := range []string{"team-a", "team-b"} {
		if before["client-requests"].Colors[id] != after["client-requests"].Colors[id] || before["client-requests"].Colors[id] != after["client-tokens"].Colors[id] {
			t.Errorf("%s changed colour: before %v, after %v (tokens %v)", id, before["client-requests"].Colors, after["client-requests"].Colors, after["client-tokens"].Colors)
		}
	}
	if c := p.Clients["team-a"]; c["plan"].Text != "pro" || c["inflight"].Used != "1 / 5" || c["tpm"].Used != "1.2k / 10k" || c["day"].Exhausted || c["day"].Bar != "ok" ||
		c["week"].Text != "$0.60 no budget" || c["month"].Used != "$0.60 / $10.00" {
		t.Errorf("team-a before the exhaustion: %+v", c)
	}
	if c := p.Clients["app"]; c["plan"].Text != "—" || c["rpm"].Text != "0 no limit" {
		t.Errorf("app (no plan): %+v", c)
	}
	if got := strings.Join(p.Resets, ","); got != "team-a" {
		t.Errorf("reset buttons for %q, want team-a only (team-b's plan and app have no budget)", got)
	}
	if pro := p.Plans["pro"]; pro["clients"] != "team-a" || pro["models"] != "gpt-4o" ||
		pro["limits"] != "100 req/min · 10k tok/min · 5 in flight · $1.00/day · $10.00/month" {
		t.Errorf("plan pro: %v", pro)
	}
	if free := p.Plans["free"]; free["models"] != "all" || free["rpm"] != "3" || free["tpm"] != "120" {
		t.Errorf("plan free: %v", free)
	}
	// a marker that a reload would lose
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.__noReload = true`)); err != nil {
		t.Fatal(err)
	}

	// the day budget is exhausted while the page is open: it follows
	proxy.request("team-a", 800, 0.6)
	p = b.clientsPage(`cell("team-a", "day").startsWith("$1.20 / $1.00") && row("team-a").querySelector("td.day .badge.exhausted") !== null && !!document.querySelector('#plans tr[data-plan="pro"] .badge.exhausted')`)
	if c := p.Clients["team-a"]["day"]; c.Bar != "full" || !strings.Contains(c.Text, "exhausted") {
		t.Errorf("exhausted day: %+v", c)
	}
	if _, ref := proxy.lim.Admit("team-a", proxy.plans["pro"], 0); ref == nil {
		t.Error("the proxy admits team-a with its day budget exhausted")
	}
	b.screenshot("DASHBOARD_CLIENTS_SCREENSHOT") // for a look: DASHBOARD_CLIENTS_SCREENSHOT=/tmp/c.png

	// Reset budget asks for a confirmation first; Cancel leaves it
	err := chromedp.Do(b.ctx,
		chromedp.Click(chromedp.CSS(`button.reset-budget[data-client="team-a"]`)),
		chromedp.WaitVisible(chromedp.CSS(`button.cancel-reset`)),
		chromedp.Click(chromedp.CSS(`button.cancel-reset`)),
		chromedp.WaitVisible(chromedp.CSS(`button.reset-budget[data-client="team-a"]`)),
	)
	if err != nil {
		t.Fatalf("cancel a reset: %v\npage:\n%s", err, b.dump())
	}
	if v, _ := e.clientOf("team-a"); !v.Usage.Day.Exhausted {
		t.Fatal("a cancelled reset reset the budget")
	}
	err = chromedp.Do(b.ctx,
		chromedp.Click(chromedp.CSS(`button.reset-budget[data-client="team-a"]`)),
		chromedp.WaitVisible(chromedp.CSS(`button.confirm-reset[data-client="team-a"]`)),
		chromedp.Click(chromedp.CSS(`button.confirm-reset[data-client="team-a"]`)),
	)
	if err != nil {
		t.Fatalf("reset from the dashboard: %v\npage:\n%s", err, b.dump())
	}
	p = b.clientsPage(`cell("team-a", "day").startsWith("$0.00 / $1.00") && row("team-a").querySelector(".badge") === null`)
	c := p.Clients["team-a"]
	if !strings.Contains(c["client"].Text, "reset by oncall") || c["month"].Used != "$0.00 / $10.00" || c["inflight"].Used != "1 / 5" || p.Error != "" {
		t.Errorf("after the reset: %+v (error %q)", c, p.Error)
	}
	if got := p.Plans["pro"]["exhausted"]; got != "0" {
		t.Errorf("plan pro exhausted keys after the reset: %q", got)
	}
	tk, ref := proxy.lim.Admit("team-a", proxy.plans["pro"], 0)
	if ref != nil {
		t.Errorf("the proxy refuses team-a after the reset: %s", ref.Message)
	}
	proxy.lim.Done(tk, 0, 0, false)
	// the event feed (Fleet page) has the exhaustion and the reset
	feed := `[...document.querySelectorAll('#events li[data-kind="budget"]')].map((li) => li.innerText).join("\n")`
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](feed+`.includes("reset")`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Errorf("no budget reset event in the feed: %v", err)
	}
	if txt, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](feed)); !strings.Contains(txt, "team-a · pro") || !strings.Contains(txt, "exhausted") {
		t.Errorf("budget events in the feed: %q", txt)
	}
	if marker, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.__noReload === true`)); err != nil || !marker {
		t.Errorf("the page reloaded (marker %v, %v)", marker, err)
	}

	// Sign out while a call is on its way (a reset, whose answer reloads
	// the page's figures): what the page does after the sign-out goes
	// without a token, or not at all. The page's fetch is wrapped to count
	// calls sent without a token and to hold them until the next sign-in,
	// when their 401 would sign out the token entered then ("token
	// rejected"), as a refresh an event scheduled just before the sign-out
	// did now and then.
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(() => {
	  window.__tokenless = [];
	  const f = window.fetch;
	  window.fetch = async (url, opts) => {
	    const auth = ((opts || {}).headers || {}).Authorization;
	    if (auth !== undefined && auth.trim() === "Bearer") {
	      window.__tokenless.push(String(url));
	      await new Promise((res) => { const i = setInterval(() => { if (!document.querySelector("#app").hidden) { clearInterval(i); res(); } }, 10); });
	    }
	    return f(url, opts);
	  };
	  document.querySelector('button.reset-budget[data-client="team-a"]').click();
	  document.querySelector('button.confirm-reset[data-client="team-a"]').click();
	  document.querySelector("#logout").click();
	  return true;
	})()`)); err != nil {
		t.Fatal(err)
	}

	// a read token sees the figures, no Reset button
	err = chromedp.Do(b.ctx, chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), readToken), chromedp.Click(chromedp.CSS(`#login-form button[type=submit]`)))
	if err != nil {
		t.Fatal(err)
	}
	p = b.clientsPage(`page.dataset.state === "ready" && cell("team-a", "day").startsWith("$0.00")`)
	if len(p.Resets) != 0 || len(p.Confirms) != 0 {
		t.Errorf("a read token sees reset buttons: %v %v", p.Resets, p.Confirms)
	}
	if sent, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`window.__tokenless`)); err != nil || len(sent) != 0 {
		t.Errorf("calls sent without a token after the sign-out: %v (%v)", sent, err)
	}
	if out, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`!document.querySelector("#login").hidden`)); err != nil || out {
		t.Errorf("the read token was signed out (%v): %q", err, b.text(`#login-error`))
	}

	// a wrong token is still rejected, and the page says so
	err = chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(`#logout`)), chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), "not-"+readToken), chromedp.Click(chromedp.CSS(`#login-form button[type=submit]`)))
	if err != nil {
		t.Fatal(err)
	}
	b.waitText(`#login-error`, "token rejected")
}

// clientChart is one chart of the Clients page: each series' sum and
// colour, by label.
type clientChart struct {
	Series map[string]float64 `json:"series"`
	Colors map[string]string  `json:"colors"`
}

// clientCharts waits until the Clients page's charts are drawn (and cond,
// an expression over cr, the requests chart, holds), then reads them.
func (b *browser) clientCharts(cond ...string) map[string]clientChart {
	b.t.Helper()
	const read = `(() => {
  const out = {};
  for (const f of document.querySelectorAll("#clients-charts figure")) {
    const u = (f.querySelector("div.chart") || {}).__uplot;
    if (!u) continue;
    const c = { series: {}, colors: {} };
    u.series.slice(1).forEach((s, i) => { c.series[s.label] = u.data[i + 1].reduce((a, v) => a + (v || 0), 0); c.colors[s.label] = s.swatch; });
    out[f.dataset.metric] = c;
  }
  return out;
})()`
	want := "true"
	if len(cond) > 0 {
		want = cond[0]
	}
	expr := `(() => { const page = document.querySelector("#clients-page"); if (page.dataset.charts !== "ready") return false;
	  const cr = ` + read + `["client-requests"]; return !!cr && (` + want + `) })()`
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		b.t.Fatalf("clients charts never drawn (%s): %v\npage:\n%s", want, err, b.dump())
	}
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.stringify(`+read+`)`))
	if err != nil {
		b.t.Fatal(err)
	}
	var out map[string]clientChart
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		b.t.Fatalf("%v: %s", err, raw)
	}
	return out
}

// admitPlan admits one request of client under plan or fails the test.
func (s *standIn) admitPlan(client, plan string) planlimit.Ticket {
	s.t.Helper()
	t, ref := s.lim.Admit(client, s.plans[plan], 0)
	if ref != nil {
		s.t.Fatalf("%s refused: %s", client, ref.Message)
	}
	return t
}
