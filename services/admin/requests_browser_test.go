package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/debug"
)

// requestsPage is what the Requests page shows, read in one evaluation in
// the page (the list reloads itself: separate reads could straddle two
// renders).
type requestsPage struct {
	State  string `json:"state"`
	Hash   string `json:"hash"`
	Filter string `json:"filter"`
	Rows   []struct {
		ID      string `json:"id"`
		Outcome string `json:"outcome"`
		Href    string `json:"href"`
		Text    string `json:"text"`
	} `json:"rows"`
	Empty string `json:"empty"`
	// the bundle view
	View      string `json:"view"`
	ViewID    string `json:"view_id"`
	Title     string `json:"title"`
	Error     string `json:"error"`
	Head      string `json:"head"`
	NoAttempt string `json:"no_attempt"`
	Bars      []struct {
		N        string  `json:"n"`
		Class    string  `json:"class"`
		Action   string  `json:"action"`
		Kind     string  `json:"kind"`
		X        float64 `json:"x"`
		Width    float64 `json:"width"`
		Height   float64 `json:"height"`
		Fill     string  `json:"fill"`
		Label    string  `json:"label"`
		Outcome  string  `json:"outcome"`
		Backoff  bool    `json:"backoff"`
		Duration string  `json:"duration"`
	} `json:"bars"`
	Steps []string `json:"steps"`
	// event lines linking to a bundle
	EventLinks []string `json:"event_links"`
}

const readRequestsPage = `(() => {
  const q = (s, r) => [...(r || document).querySelectorAll(s)];
  const txt = (s) => { const e = document.querySelector(s); return e ? e.innerText.trim() : ""; };
  const page = document.querySelector("#requests-page"), view = document.querySelector("#request-view");
  const on = document.querySelector("#requests-outcome button.on");
  return JSON.stringify({
    state: page.dataset.state || "", hash: location.hash, filter: on ? on.dataset.outcome : "",
    rows: q("#requests-list tr.request-row").map((tr) => ({ id: tr.dataset.id, outcome: tr.dataset.outcome,
      href: tr.querySelector("a.request-link").getAttribute("href"), text: tr.innerText.replace(/\s+/g, " ").trim() })),
    empty: txt("#requests-list p.empty"),
    view: view.hidden ? "hidden" : (view.dataset.state || ""), view_id: view.dataset.id || "",
    title: txt("#request-title"), error: txt("#request-error"), head: txt("#request-bundle .bundle-head"),
    no_attempt: txt("#request-bundle .timeline-none"),
    bars: q("#request-bundle svg.timeline g.attempt").map((g) => {
      const r = g.querySelector("rect.abar"), box = r.getBBox(); // as drawn (CSS may override the attributes)
      return { n: g.dataset.n, class: g.dataset.class, action: g.dataset.action, kind: g.dataset.kind,
        x: box.x, width: box.width, height: box.height, fill: getComputedStyle(r).fill,
        label: g.querySelector(".alabel").textContent, outcome: g.querySelector(".outcome").textContent,
        backoff: !!g.querySelector("rect.backoff"), duration: g.dataset.duration };
    }),
    steps: q("#request-bundle tr.route-step").map((tr) => tr.innerText.replace(/\s+/g, " ").trim()),
    event_links: q("#events li a.request-link").map((a) => a.getAttribute("href")),
  });
})()`

// requestsPage waits until cond (an expression over page, view and the
// document) holds, then reads the page.
func (b *browser) requestsPage(cond string) requestsPage {
	b.t.Helper()
	expr := `(() => { const page = document.querySelector("#requests-page"), view = document.querySelector("#request-view");
	  return !!page && !page.hidden && (` + cond + `) })()`
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		raw, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](readRequestsPage))
		b.t.Fatalf("requests page never met %s: %v\nread: %s\npage:\n%s", cond, err, raw, b.dump())
	}
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](readRequestsPage))
	if err != nil {
		b.t.Fatalf("read the requests page: %v", err)
	}
	var p requestsPage
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		b.t.Fatalf("read the requests page: %v: %s", err, raw)
	}
	return p
}

// click clicks the element sel in one evaluation in the page.
func (b *browser) click(sel string) {
	b.t.Helper()
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()`, sel)
	ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](expr))
	if err != nil || !ok {
		b.t.Fatalf("click %s: %v (found %v)\npage:\n%s", sel, err, ok, b.dump())
	}
}

// TestRequestsDashboardInBrowser drives the Requests page in headless
// Chromium with bundles written to SWITCHYARD_DEBUG: the failed requests
// by default, all of them with the filter, a bundle's attempt timeline in
// order with the attempts' classes and actions, a request without
// attempts, an unknown id, and an event carrying a request id linking to
// its bundle. With DASHBOARD_REQUESTS_SCREENSHOT set (a PNG path) it
// saves a screenshot of the bundle view.
func TestRequestsDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	e := startEnv(t, false)
	b := startBrowser(t, 90*time.Second, chromedp.WindowSize(1280, 1000))

	now := time.Now().UTC()
	odd := "req/2 with.dots"
	e.publishBundles(failedBundle("req-1", now.Add(-3*time.Second)), rejectedBundle(odd, now.Add(-2*time.Second)),
		okBundle("req-3", "anthropic", now.Add(-time.Second)))
	// an event that names a request (events carry none yet: the page
	// links any that does)
	js, err := jetstream.New(e.pnc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	_, err = js.Publish(ctx, bus.EventSubject("trip", "openai", "primary"),
		fmt.Appendf(nil, `{"v":1,"kind":"trip","scope":{"kind":"key","provider":"openai","key":"primary"},"class":"rate_limit","reason":"3 failures","at":%q,"request_id":"req-1"}`, now.Format(time.RFC3339Nano)))
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	if err := b.login(e.base, readToken); err != nil {
		t.Fatalf("open the dashboard: %v\npage:\n%s", err, b.dump())
	}
	b.click(`#tab-requests`)
	p := b.requestsPage(`page.dataset.state === "ready" && location.hash === "#requests"`)
	if p.Filter != "failed" || len(p.Rows) != 1 || p.Rows[0].ID != "req-1" || p.Rows[0].Outcome != "failed" || p.Rows[0].Href != "#requests/req-1" ||
		!strings.Contains(p.Rows[0].Text, "upstream_error") || p.View != "hidden" {
		t.Fatalf("failed requests: %+v", p)
	}

	// all of them, newest first, each linking to its bundle
	b.click(`#requests-outcome button[data-outcome="all"]`)
	p = b.requestsPage(`page.dataset.state === "ready" && document.querySelectorAll("#requests-list tr.request-row").length === 3`)
	ids := []string{}
	for _, r := range p.Rows {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"req-3", odd, "req-1"}) || p.Filter != "all" || p.Rows[1].Href != "#requests/"+strings.ReplaceAll(url.PathEscape(odd), "/", "%2F") {
		t.Fatalf("all requests: %+v", p)
	}
	// and it says they are the kept ones, not every request
	if note := b.text("#requests-note"); !strings.HasPrefix(note, "All requests with a debug bundle, not all requests.") || !strings.Contains(note, "sample_successes") {
		t.Errorf("the All list does not say it lists the kept requests only: %q", note)
	}

	// the failed request's bundle: its attempts in order on the time axis
	b.click(`#requests-list a.request-link[data-id="req-1"]`)
	p = b.requestsPage(`view.dataset.state === "ready" && view.dataset.id === "req-1"`)
	b.screenshot("DASHBOARD_REQUESTS_SCREENSHOT")
	if p.Hash != "#requests/req-1" || p.Title != "Request req-1" || !strings.Contains(p.Head, "502 failed · upstream_error · transient") ||
		!strings.Contains(p.Head, "smart → chain:smart (chain, priority)") ||
		!strings.Contains(p.Head, "no-cards redact (input, card_number) · no-word pass (input)") ||
		!strings.Contains(p.Head, "plan pro: requests_per_minute 60 passed · no-cards:redact from route") {
		t.Errorf("bundle header: %+v", p)
	}
	if len(p.Bars) != 2 {
		t.Fatalf("timeline bars: %+v", p.Bars)
	}
	b1, b2 := p.Bars[0], p.Bars[1]
	if b1.N != "1" || b1.Class != "rate_limit" || b1.Action != "rotate" || b1.Kind != "limit" || !b1.Backoff ||
		!strings.Contains(b1.Label, "#1 openai/gpt-4o · primary") || b1.Outcome != "429 rate_limit (rate_limit_exceeded) → rotate, waited 50ms" {
		t.Errorf("attempt 1: %+v", b1)
	}
	if b2.N != "2" || b2.Class != "transient" || b2.Action != "return" || b2.Kind != "failed" || b2.Backoff ||
		!strings.Contains(b2.Label, "#2 anthropic/claude-x · b1") || !strings.HasPrefix(b2.Outcome, "529 transient (overloaded_error) → return") {
		t.Errorf("attempt 2: %+v", b2)
	}
	// in order on the axis, widths by duration (120 ms and 300 ms), and
	// coloured apart
	if !(b1.X < b2.X) || !(b1.X+b1.Width <= b2.X) || b2.Width < 2*b1.Width || b1.Fill == b2.Fill || b1.Height < 10 {
		t.Errorf("bars not laid out by start and duration: %+v", p.Bars)
	}
	if len(p.Steps) != 3 || !strings.Contains(p.Steps[0], "secondary (hold h-42, quota_exhausted)") || !strings.Contains(p.Steps[2], "unhealthy") {
		t.Errorf("route steps: %q", p.Steps)
	}

	// back to the list, then the refused request: no attempts
	b.click(`#request-back`)
	p = b.requestsPage(`page.dataset.state === "ready" && view.hidden && location.hash === "#requests"`)
	if len(p.Rows) != 3 {
		t.Fatalf("back to the list (the filter kept): %+v", p)
	}
	b.click(`#requests-list tr.request-row[data-outcome="rejected"] a.request-link`)
	p = b.requestsPage(`view.dataset.state === "ready"`)
	if p.ViewID != odd || len(p.Bars) != 0 || !strings.Contains(p.NoAttempt, "no upstream was tried (model_not_allowed)") {
		t.Errorf("refused request: %+v", p)
	}

	// an unknown id, typed into the location
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(location.hash = "#requests/nope-404", true)`)); err != nil {
		t.Fatal(err)
	}
	p = b.requestsPage(`view.dataset.state === "not_found"`)
	if !strings.Contains(p.Error, `"nope-404"`) || !strings.Contains(p.Error, "unsampled") {
		t.Errorf("unknown id: %+v", p)
	}

	// the event naming req-1 links to its bundle
	b.click(`#tab-fleet`)
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`document.querySelectorAll("#events li a.request-link").length > 0`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("no event links to a bundle: %v\npage:\n%s", err, b.dump())
	}
	b.click(`#events li a.request-link`)
	p = b.requestsPage(`view.dataset.state === "ready" && view.dataset.id === "req-1"`)
	if len(p.Bars) != 2 {
		t.Errorf("bundle from the event: %+v", p)
	}
}

// TestRequestsWaterfallInBrowser draws the timeline of a failover with
// many quick attempts of long names: no attempt's text covers another's
// text or bar, and every text and axis label lies inside the drawing (not
// clipped at its edges). DASHBOARD_WATERFALL_SCREENSHOT saves a
// screenshot.
func TestRequestsWaterfallInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	e := startEnv(t, false)
	b := startBrowser(t, 60*time.Second, chromedp.WindowSize(1280, 1000))
	fo := failedBundle("req-failover", time.Now().UTC())
	fo.Attempts = nil
	start := 1.0
	for i, p := range []string{"openai-eu-west-production", "openai-eu-west-production", "azure-openai-sweden-central", "anthropic-direct", "openrouter-fallback"} {
		a := debug.Attempt{N: i + 1, Provider: p, Model: "gpt-4o-2024-11-20-long-deployment-name", KeyID: fmt.Sprintf("key-with-a-long-id-%d", i),
			StartMS: start, DurationMS: 3, Status: 429, Class: "rate_limit", Error: &debug.ProviderError{Code: "rate_limit_exceeded"}, Action: "rotate", BackoffMS: 1}
		if i == 4 {
			a.DurationMS, a.Status, a.Class, a.Error, a.Action, a.BackoffMS = 400, 200, "", nil, "served", 0
		}
		fo.Attempts = append(fo.Attempts, a)
		start += a.DurationMS + a.BackoffMS + 0.5
	}
	fo.LatencyMS = start
	e.publishBundles(fo)

	if err := b.login(e.base, readToken); err != nil {
		t.Fatalf("open the dashboard: %v\npage:\n%s", err, b.dump())
	}
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(location.hash = "#requests/req-failover", true)`)); err != nil {
		t.Fatal(err)
	}
	b.requestsPage(`view.dataset.state === "ready" && view.dataset.id === "req-failover"`)
	b.screenshot("DASHBOARD_WATERFALL_SCREENSHOT") // for a look: DASHBOARD_WATERFALL_SCREENSHOT=/tmp/w.png
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(() => {
  const svg = document.querySelector("#request-bundle svg.timeline"), vb = svg.viewBox.baseVal;
  const box = (e) => { const r = e.getBBox(); return { x: r.x, y: r.y, w: r.width, h: r.height }; };
  const items = [];
  for (const g of svg.querySelectorAll("g.attempt")) {
    items.push({ n: g.dataset.n, what: "text", ...box(g.querySelector("text.aline")) });
    for (const r of g.querySelectorAll("rect")) items.push({ n: g.dataset.n, what: "bar", ...box(r) });
  }
  for (const x of svg.querySelectorAll("text.xlabel")) items.push({ n: "axis", what: "text", ...box(x) });
  return JSON.stringify({ w: vb.width, h: vb.height, items });
})()`))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		W, H  float64
		Items []struct {
			N, What    string
			X, Y, W, H float64
		}
	}
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Items) < 10 {
		t.Fatalf("timeline items: %s", raw)
	}
	for i, a := range got.Items {
		if a.What == "text" && (a.X < 0 || a.Y < 0 || a.X+a.W > got.W || a.Y+a.H > got.H) {
			t.Errorf("attempt %s: text %+v outside the drawing %vx%v (clipped)", a.N, a, got.W, got.H)
		}
		for _, o := range got.Items[i+1:] {
			if a.N == o.N || a.What != "text" && o.What != "text" {
				continue // an attempt's own text and bars; bars among themselves
			}
			if a.X < o.X+o.W && o.X < a.X+a.W && a.Y < o.Y+o.H && o.Y < a.Y+a.H {
				t.Errorf("attempt %s's %s %+v overlaps attempt %s's %s %+v", a.N, a.What, a, o.N, o.What, o)
			}
		}
	}
}
