package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/headroom"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/shared/usage"
)

// fleetKey is one key row of a provider card as the page shows it.
type fleetKey struct {
	State    string    `json:"state"`
	Requests string    `json:"requests"` // the figure beside the sparkline
	Errors   string    `json:"errors"`
	Latency  string    `json:"latency"`
	Values   []float64 `json:"values"` // the requests sparkline's values, a minute each
	Ready    bool      `json:"ready"`  // the sparkline was drawn
	None     string    `json:"none"`   // the text instead of sparklines
}

const readFleetKeys = `(() => {
  const out = {};
  for (const card of document.querySelectorAll(".provider")) {
    for (const tr of card.querySelectorAll("tr.key-row")) {
      const cell = (c) => tr.querySelector("td.traffic." + c + " .figure");
      const spark = tr.querySelector("td.traffic.requests .spark");
      out[card.dataset.provider + "/" + tr.dataset.key] = {
        state: tr.querySelector("td.state").innerText,
        requests: cell("requests") ? cell("requests").innerText : "",
        errors: cell("errors") ? cell("errors").innerText : "",
        latency: cell("latency") ? cell("latency").innerText : "",
        values: spark ? JSON.parse(spark.dataset.values) : null,
        ready: !!spark && spark.dataset.ready === "true",
        none: (tr.querySelector("td.traffic.none") || {}).innerText || "",
      };
    }
  }
  return JSON.stringify(out);
})()`

// TestFleetDashboardInBrowser drives the Fleet tab in headless Chromium:
// each key's traffic, error rate and latency of the last minutes as
// sparklines from the usage records (a healthy key shows its traffic, a
// key without requests says so), a tooltip on a sparkline, an open
// circuit beside a healthy check saying which one wins, and a health
// event naming its provider and status. DASHBOARD_FLEET_SCREENSHOT saves
// a screenshot.
func TestFleetDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	e := startEnv(t, true)
	b := startBrowser(t, 90*time.Second, chromedp.WindowSize(1200, 1000))

	// traffic: primary 5 requests over 3 minutes (one failed), secondary 2
	now := time.Now().UTC()
	var recs []usage.Record
	for i, ago := range []time.Duration{30 * time.Second, 90 * time.Second, 95 * time.Second, 150 * time.Second, 155 * time.Second} {
		recs = append(recs, rec(fmt.Sprintf("p%d", i), now.Add(-ago), func(r *usage.Record) {
			r.LatencyMS = float64(100 + 50*i)
			if i == 2 {
				r.Status, r.Class = 500, "transient"
			}
		}))
	}
	for i := range 2 {
		recs = append(recs, rec(fmt.Sprintf("s%d", i), now.Add(-time.Duration(i+1)*time.Minute), func(r *usage.Record) { r.KeyID = "secondary" }))
	}
	e.publishUsage(recs...)
	// a proxy's headroom report: the primary has 5 of 20 requests left
	e.publishHeadroom(headroom.Report{Version: 1, Provider: "openai", Instance: "proxy-1", At: now, Slots: []headroom.ReportSlot{
		{Key: "primary", Model: "gpt-4o", Windows: []headroom.ReportWindow{{Kind: "requests", Limit: 20, Remaining: 5, Reset: now.Add(time.Hour), At: now}}},
	}}, func(r reply) error {
		if !strings.Contains(string(r.raw), `"headroom"`) {
			return fmt.Errorf("no headroom in the status yet")
		}
		return nil
	})

	// the prober says healthy (a record and its event) while the breaker
	// trips on three transient failures
	st := health.NewStore(e.proxy.Resources().Health)
	if _, err := st.Put(context.Background(), health.Record{Provider: "openai", Status: health.Healthy, CircuitState: health.CircuitClosed}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(context.Background(), health.Record{Provider: "openai", Key: "primary", Status: health.Healthy, CircuitState: health.CircuitClosed}); err != nil {
		t.Fatal(err)
	}
	if err := health.Publish(e.pnc, health.EventFor(health.Record{Provider: "openai", Key: "primary", Status: health.Healthy, Reason: "check answered 200"}, health.Unhealthy, now)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.fail("openai", "primary", "gpt-4o", failure.Result{Class: failure.Transient, Code: "503", Reason: "status 503"}, 503)
	}

	if err := b.login(e.base, readToken); err != nil {
		t.Fatalf("open the dashboard: %v\npage:\n%s", err, b.dump())
	}
	const verdict = `.provider[data-provider="openai"] p.verdict.circuit-open`
	err := chromedp.Do(b.ctx,
		chromedp.WaitVisible(chromedp.CSS(verdict)),
		chromedp.WaitVisible(chromedp.CSS(`.provider[data-provider="openai"] tr.key-row[data-key="primary"] .spark[data-ready="true"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#events li[data-kind="health"]`)))
	if err != nil {
		t.Fatalf("fleet page: %v\npage:\n%s", err, b.dump())
	}
	b.waitText(`.provider[data-provider="openai"] .pill`, "Circuit Open")
	b.waitText(`.provider[data-provider="openai"] tr.key-row[data-key="primary"] td.headroom .room`, "requests 5/20 (gpt-4o) · 25%")
	if cd := b.text(`.provider[data-provider="openai"] tr.key-row[data-key="primary"] td.headroom .countdown`); !strings.HasPrefix(cd, "59m") && !strings.HasPrefix(cd, "1h") {
		t.Errorf("headroom reset countdown %q, want about an hour", cd)
	}
	if v := b.text(verdict); !strings.Contains(v, "the breaker wins") || !strings.Contains(v, "said healthy") {
		t.Errorf("verdict %q: want the breaker named the winner over the healthy check", v)
	}
	if ev := b.text(`#events li[data-kind="health"]`); !strings.Contains(ev, "health openai/primary unhealthy → healthy") || !strings.Contains(ev, "check answered 200") {
		t.Errorf("health event %q", ev)
	}

	// Read once the primary's sparkline is drawn: the tab redraws on each
	// event and refresh, and a chart being redrawn is briefly not ready.
	var keys map[string]fleetKey
	testkit.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](readFleetKeys))
		if err != nil {
			return err
		}
		keys = nil
		if err := json.Unmarshal([]byte(raw), &keys); err != nil {
			return err
		}
		if !keys["openai/primary"].Ready {
			return fmt.Errorf("the primary's sparkline is not drawn: %+v", keys["openai/primary"])
		}
		return nil
	})
	sum := func(vs []float64) (n float64) {
		for _, v := range vs {
			n += v
		}
		return n
	}
	p, s, l := keys["openai/primary"], keys["openai/secondary"], keys["local/"]
	if p.State != "no traffic: the open circuit wins over health healthy" {
		t.Errorf("primary state %q: want the circuit named the winner over the key's healthy check", p.State)
	}
	if p.Requests != "5 req" || p.Errors != "1 err (20%)" || !regexpMatch(`^p95 ≤ [23]\d\d ms$`, p.Latency) || !p.Ready || sum(p.Values) != 5 || len(p.Values) < 15 {
		t.Errorf("primary: %+v", p)
	}
	if s.Requests != "2 req" || s.Errors != "0 err" || sum(s.Values) != 2 || s.State != "no traffic: the open circuit wins" {
		t.Errorf("secondary (healthy, no hold): %+v", s)
	}
	if _, ok := keys["local/"]; ok {
		t.Errorf("keyless local has a key row: %+v", l)
	}
	if txt := b.text(`.provider[data-provider="local"] tr.provider-row td.traffic`); txt != "no requests in the last 15 minutes" {
		t.Errorf("local traffic %q", txt)
	}
	if txt := b.text(`.provider[data-provider="openai"] tr.provider-row td.requests .figure`); txt != "7 req" {
		t.Errorf("openai traffic %q, want 7 req", txt)
	}

	// a tooltip follows the cursor over a sparkline (polled: a chart being
	// replaced by a redraw is briefly absent)
	testkit.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		tip, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(() => {
  const over = document.querySelector('.provider[data-provider="openai"] tr.key-row[data-key="primary"] td.requests .u-over');
  if (!over) return "(no chart)";
  const r = over.getBoundingClientRect();
  over.dispatchEvent(new MouseEvent("mouseenter", { clientX: r.right - 2, clientY: r.top + 5, bubbles: true }));
  over.dispatchEvent(new MouseEvent("mousemove", { clientX: r.right - 2, clientY: r.top + 5, bubbles: true }));
  const tip = over.querySelector(".chart-tip");
  return tip && !tip.hidden ? tip.innerText : "(hidden)";
})()`))
		if err != nil || !strings.Contains(tip, "req/min") {
			return fmt.Errorf("tooltip %q (%v)", tip, err)
		}
		return nil
	})
	b.screenshot("DASHBOARD_FLEET_SCREENSHOT") // for a look: DASHBOARD_FLEET_SCREENSHOT=/tmp/f.png
}
