package admin

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"switchyard.dev/shared/usage"
)

// usagePage is what the Usage page shows, read in one evaluation in the
// page (the page re-renders as loads end: separate reads could straddle
// two renders).
type usagePage struct {
	State   string `json:"state"`
	Range   string `json:"range"`
	Empty   bool   `json:"empty"`
	Status  string `json:"status"`
	Summary map[string]string
	Charts  []struct {
		Metric  string   `json:"metric"`
		Caption string   `json:"caption"`
		Series  []string `json:"series"` // the series drawn (uPlot's, by label)
		Lines   int      `json:"lines"`  // series with at least one segment
		YLabels []string `json:"ylabels"`
		XLabels []string `json:"xlabels"`
		Legend  string   `json:"legend"`
		None    string   `json:"none"` // the empty-state text, if any
		// Colors are the series' colours by label
		Colors map[string]string `json:"colors"`
	} `json:"charts"`
	Clients map[string]map[string]string `json:"clients"` // data-key -> cell class -> text
	Keys    map[string]map[string]string `json:"keys"`
}

const readUsagePage = `(() => {
  const q = (s, r) => [...(r || document).querySelectorAll(s)];
  const rows = (id) => Object.fromEntries(q("#" + id + " tbody tr").map((tr) =>
    [tr.dataset.key, Object.fromEntries(q("td", tr).map((td) => [td.classList[td.classList.length - 1], td.innerText.trim()]))]));
  const page = document.querySelector("#usage-page");
  return JSON.stringify({
    state: page.dataset.state || "", range: page.dataset.range || "",
    empty: !document.querySelector("#usage-empty").hidden,
    status: document.querySelector("#usage-status").innerText,
    Summary: Object.fromEntries(q("#usage-summary .stat").map((s) => [s.dataset.stat, s.innerText.replace(/\s+/g, " ").trim()])),
    charts: q("#usage-charts figure").map((f) => ({
      metric: f.dataset.metric,
      caption: f.querySelector("figcaption").innerText,
      series: JSON.parse((f.querySelector("div.chart") || { dataset: {} }).dataset.series || "[]"),
      lines: Number((f.querySelector("div.chart") || { dataset: {} }).dataset.lines || 0),
      ylabels: JSON.parse((f.querySelector("div.chart") || { dataset: {} }).dataset.ylabels || "[]"),
      xlabels: JSON.parse((f.querySelector("div.chart") || { dataset: {} }).dataset.xlabels || "[]"),
      colors: Object.fromEntries((((f.querySelector("div.chart") || {}).__uplot || { series: [] }).series.slice(1)).map((s) => [s.label, s.swatch])),
      legend: (f.querySelector(".u-legend") || {}).innerText || "",
      none: (f.querySelector("p.none") || {}).innerText || "",
    })),
    clients: rows("usage-by-client"),
    keys: rows("usage-by-key"),
  });
})()`

// TestUsageDashboardInBrowser drives the Usage page in headless Chromium:
// its empty state, then the charts and tables of records published to
// SWITCHYARD_USAGE, for each time range. With DASHBOARD_USAGE_SCREENSHOT
// set (a PNG path) it saves a screenshot of the 24 h view.
func TestUsageDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	e := startEnv(t, false)
	b := startBrowser(t, 90*time.Second, chromedp.WindowSize(1280, 1000))

	// a read token is enough for the whole page
	if err := b.login(e.base, readToken); err != nil {
		t.Fatalf("open the dashboard: %v\npage:\n%s", err, b.dump())
	}
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(`#tab-usage`))); err != nil {
		t.Fatal(err)
	}
	p := b.usagePage(`page.dataset.state === "ready"`)
	if !p.Empty || p.Range != "24h" || len(p.Charts) != 0 {
		t.Fatalf("before any record: %+v", p)
	}
	if txt := b.text("#usage-empty"); txt == "" || txt == "(absent)" {
		t.Errorf("empty state text %q", txt)
	}

	now := time.Now().UTC()
	var recs []usage.Record
	add := func(id string, ago time.Duration, opts ...func(*usage.Record)) {
		recs = append(recs, rec(id, now.Add(-ago), opts...))
	}
	// openai/gpt-4o for app on two keys, over the day; one rate limited
	// (price unknown), streams with a first token
	for i, ago := range []time.Duration{10 * time.Minute, 25 * time.Minute, 3 * time.Hour, 7 * time.Hour, 12 * time.Hour, 20 * time.Hour} {
		add(fmt.Sprintf("o%d", i), ago, func(r *usage.Record) {
			r.LatencyMS = float64(200 + 100*i)
			r.Tokens = usage.Tokens{Input: int64(1000 * (i + 1)), Output: 400, CachedInput: 200}
			r.CostUSD = cost(0.004 * float64(i+1))
			if i%2 == 1 {
				r.KeyID = "secondary"
				r.Stream, r.StreamCompleted, r.TTFTMS = true, true, float64(150+20*i)
			}
			if i == 3 {
				r.Status, r.Class, r.CostUSD = 429, "rate_limit", nil
			}
			if i == 0 { // answered from the response cache
				r.Cache, r.CacheSavedUSD = "hit", cost(0.002)
			}
			if i == 1 { // served by secondary after primary was rate-limited twice
				r.Attempts = 3
				limited := usage.FailedAttempt{Provider: "openai", Model: "gpt-4o", KeyID: "primary", Class: "rate_limit"}
				r.FailedAttempts = []usage.FailedAttempt{limited, limited}
			}
		})
	}
	// anthropic/claude-x for ci
	for i, ago := range []time.Duration{15 * time.Minute, 2 * time.Hour, 9 * time.Hour, 18 * time.Hour} {
		add(fmt.Sprintf("a%d", i), ago, func(r *usage.Record) {
			r.ClientID, r.ClientType, r.Endpoint = "ci", "claude-code", "/v1/messages"
			r.Provider, r.ProviderType, r.Model, r.KeyID = "anthropic", "anthropic", "claude-x", "b1"
			r.LatencyMS, r.CostUSD = float64(900+300*i), cost(0.03)
			r.Stream, r.StreamCompleted, r.TTFTMS = true, i != 2, float64(400+50*i)
			r.Tokens = usage.Tokens{Input: 3000, Output: 1200, CacheWrite: 500}
			if i == 1 {
				r.Status, r.Class = 500, "transient"
			}
		})
	}
	// a model without a price, called without a client key
	for i, ago := range []time.Duration{5 * time.Hour, 6 * time.Hour} {
		add(fmt.Sprintf("g%d", i), ago, func(r *usage.Record) {
			r.ClientID, r.Plan = "", ""
			r.Provider, r.ProviderType, r.Model, r.KeyID = "local", "vllm", "llama", ""
			r.CostUSD, r.LatencyMS = nil, 50
		})
	}
	// refused before routing (an unknown model): no provider, no attempt
	add("refused", 30*time.Minute, func(r *usage.Record) {
		r.Provider, r.ProviderType, r.Model, r.KeyID, r.ModelRequested = "", "", "", "", "nope"
		r.Attempts, r.Status, r.Class, r.CostUSD, r.Tokens, r.LatencyMS = 0, 404, "rejected", cost(0), usage.Tokens{}, 0.3
	})
	// three days ago: in the 7 d view only
	add("old", 72*time.Hour)
	e.publishUsage(recs...)

	in := func(d time.Duration, keep func(usage.Record) bool) int {
		n := 0
		for _, r := range recs {
			if now.Sub(r.At) < d && keep(r) {
				n++
			}
		}
		return n
	}
	client := func(id string) func(usage.Record) bool { return func(r usage.Record) bool { return r.ClientID == id } }
	all := func(usage.Record) bool { return true }

	for _, tt := range []struct {
		rng      string
		d        time.Duration
		interval time.Duration
		xlabel   string // the form of an x axis label
	}{
		{"24h", 24 * time.Hour, time.Hour, `^\d\d:\d\d$`},
		{"1h", time.Hour, time.Minute, `^\d\d:\d\d$`},
		{"7d", 7 * 24 * time.Hour, time.Hour, `^(Sun|Mon|Tue|Wed|Thu|Fri|Sat) \d+$`},
	} {
		t.Run(tt.rng, func(t *testing.T) {
			if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(`#usage-range button[data-range="`+tt.rng+`"]`))); err != nil {
				t.Fatal(err)
			}
			p := b.usagePage(`page.dataset.state === "ready" && page.dataset.range === "` + tt.rng + `" && !!document.querySelector("#usage-by-client tbody tr")`)
			if p.Empty {
				t.Fatalf("empty state with records: %+v", p)
			}
			if tt.rng == "24h" {
				b.screenshot("DASHBOARD_USAGE_SCREENSHOT") // for a look: DASHBOARD_USAGE_SCREENSHOT=/tmp/u.png
			}
			// tables: by client and by key, counts from the records
			for id, label := range map[string]string{"app": "app", "ci": "ci", "": "(no client key)"} {
				want := in(tt.d, client(id))
				row, ok := p.Clients[id]
				if want == 0 {
					if ok {
						t.Errorf("client %q listed without records in range: %v", id, row)
					}
					continue
				}
				if row["requests"] != strconv.Itoa(want) || row["name"] != label {
					t.Errorf("client %q: %v, want %d requests", id, row, want)
				}
			}
			if want := in(tt.d, func(r usage.Record) bool { return r.KeyID == "secondary" }); p.Keys["openai/secondary"]["requests"] != strconv.Itoa(want) {
				t.Errorf("key openai/secondary: %v, want %d requests (keys %v)", p.Keys["openai/secondary"], want, p.Keys)
			}
			// the failures the failover hid show under the key that failed
			if f := p.Keys["openai/primary"]["failed-attempts"]; !regexpMatch(`^2 \(\d+(\.\d)?%\)$`, f) || p.Keys["openai/secondary"]["failed-attempts"] != "0" {
				t.Errorf("failed attempts: primary %q, secondary %q", f, p.Keys["openai/secondary"]["failed-attempts"])
			}
			if a := p.Summary["attempts"]; !regexpMatch(` 2 failed `, a) {
				t.Errorf("summary attempts %q", a)
			}
			if tt.rng != "1h" {
				// a keyless provider's requests are listed under its name
				if got := p.Keys["local"]["requests"]; got != "2" {
					t.Errorf("keyless provider local: %v", p.Keys["local"])
				}
				// the unpriced model's requests are counted apart, not as $0
				if c := p.Clients[""]["cost"]; c != "unknown" {
					t.Errorf("cost of the client without prices: %q", c)
				}
				if c := p.Clients["app"]["cost"]; !regexpMatch(`^\$\d+\.\d+ \+1 unknown$`, c) {
					t.Errorf("cost of app: %q", c)
				}
			}
			if got, want := p.Summary["requests"], strconv.Itoa(in(tt.d, all)); !regexpMatch(`^Requests `+want+`( |$)`, got) {
				t.Errorf("summary %q, want %s requests", got, want)
			}
			// the refused request counts, apart, and under "no attempt"
			if got := p.Summary["rejected"]; !strings.HasPrefix(got, "Rejected 1 by the gateway") {
				t.Errorf("summary of the rejected: %q", got)
			}
			if got := p.Summary["cache"]; !strings.HasPrefix(got, "Cache hits 1") || !strings.Contains(got, "saved $0.002") {
				t.Errorf("summary of the cache: %q", got)
			}
			if got := p.Keys[""]; got["requests"] != "1" || !strings.HasPrefix(got["name"], "(no attempt") {
				t.Errorf("the refused request by key: %v", got)
			}
			// charts: every metric, a line per provider/model with data
			var metrics []string
			for _, c := range p.Charts {
				metrics = append(metrics, c.Metric)
			}
			if !slices.Equal(metrics, []string{"requests", "tokens", "cost", "error_rate", "cache_hit_rate", "cache_saved", "latency", "ttft"}) {
				t.Fatalf("charts %v", metrics)
			}
			series := map[string]bool{}
			for _, r := range recs {
				if now.Sub(r.At) < tt.d {
					series[r.Provider+"/"+r.Model] = true
				}
			}
			for _, c := range p.Charts {
				if c.None != "" {
					t.Errorf("%s: empty state %q with records", c.Metric, c.None)
					continue
				}
				drawn := map[string]bool{}
				for _, s := range c.Series {
					drawn[s] = true
				}
				if c.Metric == "requests" && len(drawn) != len(series) {
					t.Errorf("requests: series %v, want %v", c.Series, series)
				}
				if len(c.YLabels) < 2 || len(c.XLabels) < 2 {
					t.Errorf("%s: axis labels y %v x %v", c.Metric, c.YLabels, c.XLabels)
				}
				for _, x := range c.XLabels {
					if !regexpMatch(tt.xlabel, x) {
						t.Errorf("%s: x label %q, want %s", c.Metric, x, tt.xlabel)
						break
					}
				}
				if c.Legend == "" {
					t.Errorf("%s: no legend", c.Metric)
				}
				// no label twice on an axis (the hand-drawn TTFT chart
				// printed rounded values twice)
				if dup := repeated(c.YLabels); dup != "" {
					t.Errorf("%s: y label %q twice in %q", c.Metric, dup, c.YLabels)
				}
			}
			if tt.rng == "24h" {
				b.checkTooltipAndZoom(t, "requests")
				b.checkFineAxis(t)
			}
			if tt.rng == "24h" {
				// openai has records in several hours: its requests are a line
				req := p.Charts[0]
				if req.Lines == 0 {
					t.Errorf("requests: no line drawn (series %v)", req.Series)
				}
				// latency: p95 and p50 per series; TTFT only where streams are
				if lat := p.Charts[6]; len(lat.Series) != 2*len(series) {
					t.Errorf("latency: %d paths for %d series", len(lat.Series), len(series))
				}
				if ttft := p.Charts[7]; slices.Contains(ttft.Series, "local/llama p95") || !slices.Contains(ttft.Series, "anthropic/claude-x p95") {
					t.Errorf("ttft series %v", ttft.Series)
				}
			}
		})
	}
}

// usagePage waits until cond (a JavaScript expression over page, the
// #usage-page element) holds, then reads the page in one evaluation.
func (b *browser) usagePage(cond string) usagePage {
	b.t.Helper()
	expr := `(() => { const page = document.querySelector("#usage-page"); return !!page && !page.hidden && (` + cond + `) })()`
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		b.t.Fatalf("usage page never met %s: %v\npage:\n%s", cond, err, b.dump())
	}
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](readUsagePage))
	if err != nil {
		b.t.Fatalf("read the usage page: %v", err)
	}
	var p usagePage
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		b.t.Fatalf("read the usage page: %v: %s", err, raw)
	}
	return p
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// repeated is a value of vs given twice, or "".
func repeated(vs []string) string {
	seen := map[string]bool{}
	for _, v := range vs {
		if seen[v] {
			return v
		}
		seen[v] = true
	}
	return ""
}

// checkTooltipAndZoom moves the mouse over the chart of metric (a tooltip
// shows the time and the series' values there), drags across its middle
// third (the x axis zooms in), then double-clicks (it zooms back out).
func (b *browser) checkTooltipAndZoom(t *testing.T, metric string) {
	t.Helper()
	over := `document.querySelector('div.chart[data-metric="` + metric + `"] .u-over')`
	scale := `(() => { const u = document.querySelector('div.chart[data-metric="` + metric + `"]').__uplot; return JSON.stringify([u.scales.x.min, u.scales.x.max]) })()`
	var box []float64
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(() => { const e = `+over+`; e.scrollIntoView({block: "center"}); const r = e.getBoundingClientRect(); return JSON.stringify([r.left, r.top, r.width, r.height]) })()`))
	if err == nil {
		err = json.Unmarshal([]byte(raw), &box)
	}
	if err != nil || len(box) != 4 {
		t.Fatalf("%s chart: %v %s", metric, err, raw)
	}
	x0, y := box[0]+box[2]/3, box[1]+box[3]/2
	x1 := box[0] + 2*box[2]/3
	before, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](scale))
	err = chromedp.Do(b.ctx, chromedp.MouseEvent("mouseMoved", x0, y))
	if err != nil {
		t.Fatal(err)
	}
	tip := b.text(`div.chart[data-metric="` + metric + `"] .chart-tip`)
	if !strings.Contains(tip, "openai/gpt-4o") || !regexpMatch(`\d{1,2}:\d\d`, tip) {
		t.Errorf("%s tooltip %q: want the time and the series", metric, tip)
	}
	err = chromedp.Do(b.ctx,
		chromedp.MouseEvent("mousePressed", x0, y, chromedp.ButtonLeft),
		chromedp.MouseEvent("mouseMoved", (x0+x1)/2, y, chromedp.ButtonLeft),
		chromedp.MouseEvent("mouseMoved", x1, y, chromedp.ButtonLeft),
		chromedp.MouseEvent("mouseReleased", x1, y, chromedp.ButtonLeft))
	if err != nil {
		t.Fatal(err)
	}
	zoomed, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](scale))
	var bs, zs []float64
	_ = json.Unmarshal([]byte(before), &bs)
	_ = json.Unmarshal([]byte(zoomed), &zs)
	if len(bs) != 2 || len(zs) != 2 || !(zs[0] > bs[0] && zs[1] < bs[1]) || (zs[1]-zs[0]) > 0.5*(bs[1]-bs[0]) {
		t.Errorf("%s: a drag over the middle third did not zoom in: x %v -> %v", metric, bs, zs)
	}
	if err := chromedp.Do(b.ctx, chromedp.MouseClickXY(x1, y, chromedp.ClickCount(2))); err != nil {
		t.Fatal(err)
	}
	if back, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](scale)); back != before {
		t.Errorf("%s: a double click did not zoom back out: %s, want %s", metric, back, before)
	}
}

// checkFineAxis draws a chart of error rates far below 1 % with the Usage
// page's percent format (one decimal): its y labels are still distinct
// (the finer format takes over).
func (b *browser) checkFineAxis(t *testing.T) {
	t.Helper()
	const draw = `(() => {
  const charts = window.SwitchyardCharts({ el: (tag, attrs, ...kids) => { const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) { if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v); }
    for (const k of kids) if (k != null) e.append(k); return e; } });
  const box = document.createElement("div"); box.id = "fine-axis"; box.style.width = "500px"; document.body.append(box);
  const t0 = Date.now() - 10 * 60e3, xs = [...Array(10).keys()].map((i) => t0 + i * 60e3);
  box.append(charts.line({ id: "fine", title: "fine", xs, series: [{ name: "x", values: xs.map((_, i) => 0.01 * i) }],
    fmt: (v) => +v.toFixed(1) + "%", fine: (v) => +v.toPrecision(4) + "%" }));
  return true;
})()`
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](draw)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`!!document.querySelector('#fine-axis div.chart[data-ylabels]')`, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("fine axis chart not drawn: %v", err)
	}
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(() => { const h = document.querySelector('#fine-axis div.chart'); const l = h.dataset.ylabels; document.querySelector('#fine-axis').remove(); return l })()`))
	var labels []string
	if err == nil {
		err = json.Unmarshal([]byte(raw), &labels)
	}
	if err != nil || len(labels) < 3 || repeated(labels) != "" {
		t.Errorf("y labels of error rates below 0.1 %%: %q (%v)", labels, err)
	}
}
