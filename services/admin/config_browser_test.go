package admin

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// configPage is what the Configuration page shows, read in one
// evaluation in the page (it re-renders on every load: separate reads
// could straddle two renders).
type configPage struct {
	State   string `json:"state"`
	Version string `json:"version"`
	Active  string `json:"active"` // the active version's card
	// Steps: "<chain>/<index>" -> {state, switch: "on", "off" or "" without one}
	Steps map[string]struct {
		State  string `json:"state"`
		Switch string `json:"switch"`
	} `json:"steps"`
	// Keys: "<provider>/<key>" -> "on|off priority weight"
	Keys map[string]string `json:"keys"`
	// Trip: the trip rules table's text
	Trip string `json:"trip"`
	// History: one line per version: "<version> <source>: <changes>"
	History  []string `json:"history"`
	Editor   bool     `json:"editor"` // the preview / activate panel is shown
	Result   string   `json:"result"` // its result's state and text
	Error    string   `json:"error"`
	Rollback []string `json:"rollback"`
}

const readConfigPage = `(() => {
  const q = (s, r) => [...(r || document).querySelectorAll(s)];
  const page = document.querySelector("#config-page");
  const txt = (s) => { const e = document.querySelector(s); return e ? e.innerText.replace(/\s+/g, " ").trim() : "" };
  return JSON.stringify({
    state: page.dataset.state || "",
    version: page.dataset.version || "",
    active: txt("#config-active"),
    steps: Object.fromEntries(q("#config-chains tr.step").map((tr) => {
      const sw = tr.querySelector("input.step-switch");
      return [tr.dataset.chain + "/" + tr.dataset.step, { state: tr.dataset.state, switch: sw ? (sw.checked ? "on" : "off") : "" }];
    })),
    keys: Object.fromEntries(q("#config-keys tr.key").map((tr) => {
      const v = (f) => { const i = tr.querySelector("input.key-" + f); return i ? i.value : tr.querySelector("td." + f).innerText };
      return [tr.dataset.provider + "/" + tr.dataset.key, (tr.dataset.enabled === "true" ? "on " : "off ") + v("priority") + " " + v("weight")];
    })),
    trip: txt("#config-trip"),
    history: q("#config-history tr.version").map((tr) => tr.dataset.version + " " + tr.children[3].innerText + ": " +
      tr.querySelector("td.diff").innerText.replace(/\s+/g, " ").trim()),
    editor: !document.querySelector("#config-editor").hidden,
    result: (document.querySelector("#config-result").dataset.state || "") + ": " + txt("#config-result"),
    error: txt("#config-error"),
    rollback: q("#config-history button.rollback").map((b) => b.dataset.version),
  });
})()`

// configPage waits until cond (a JavaScript expression over page, the
// #config-page element) holds, then reads the page in one evaluation.
func (b *browser) configPage(cond string) configPage {
	b.t.Helper()
	expr := `(() => { const page = document.querySelector("#config-page");
	  const result = document.querySelector("#config-result");
	  const row = (chain, i) => document.querySelector('#config-chains tr.step[data-chain="' + chain + '"][data-step="' + i + '"]');
	  return !!page && !page.hidden && (` + cond + `) })()`
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		b.t.Fatalf("configuration page never met %s: %v\npage:\n%s", cond, err, b.dump())
	}
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](readConfigPage))
	if err != nil {
		b.t.Fatalf("read the configuration page: %v", err)
	}
	var p configPage
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		b.t.Fatalf("read the configuration page: %v: %s", err, raw)
	}
	return p
}

// TestConfigDashboardInBrowser drives the Configuration page in headless
// Chromium: the imported version 1 with its chain, keys and trip rules;
// an operator switches a chain step off (a new version, the switch off);
// an invalid document's preview shows the loader's message; a valid one
// shows its changes and is activated after a confirmation; a key is
// switched off (it stays listed, off); a read token sees no switch and no
// editor. With DASHBOARD_CONFIG_SCREENSHOT set (a
// PNG path) it saves a screenshot of the page with a previewed document
// waiting for its confirmation.
func TestConfigDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	e := startConfigEnv(t)
	b := startBrowser(t, 90*time.Second, chromedp.WindowSize(1280, 1000))
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	if err := b.login(e.base, opToken); err != nil {
		t.Fatalf("open the dashboard: %v\npage:\n%s", err, b.dump())
	}
	if err := chromedp.Do(b.ctx, chromedp.Click(css(`#tab-config`))); err != nil {
		t.Fatal(err)
	}
	p := b.configPage(`page.dataset.state === "ready" && page.dataset.version === "1" && page.dataset.applied === "1" && !document.querySelector("#config-history td.diff span.none")`)
	if !strings.Contains(p.Active, "Version 1") || !strings.Contains(p.Active, "import") || !strings.Contains(p.Active, "applied here") {
		t.Errorf("active version card: %q", p.Active)
	}
	if s := p.Steps["default/1"]; s.State != "on" || s.Switch != "on" {
		t.Errorf("step 1 before: %+v", s)
	}
	if p.Keys["openai/primary"] != "on 0 1" || p.Keys["openai/secondary"] != "on 0 1" || !p.Editor {
		t.Errorf("keys %v, editor %v", p.Keys, p.Editor)
	}
	if !strings.Contains(p.Trip, "org-suspended") || !strings.Contains(p.Trip, "global-rule") {
		t.Errorf("trip rules: %q", p.Trip)
	}
	if len(p.History) != 1 || !strings.Contains(p.History[0], "providers.openai") {
		t.Errorf("history: %q", p.History)
	}
	// a marker that a reload would lose
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.__noReload = true`)); err != nil {
		t.Fatal(err)
	}

	// switch step 1 of the chain off from the page: version 2
	if err := chromedp.Do(b.ctx, chromedp.Click(css(`input.step-switch[data-chain="default"][data-step="1"]`))); err != nil {
		t.Fatal(err)
	}
	p = b.configPage(`page.dataset.version === "2" && page.dataset.applied === "2" && row("default", 1).dataset.state === "off"`)
	if s := p.Steps["default/1"]; s.Switch != "off" || p.Steps["default/0"].Switch != "on" {
		t.Errorf("switches after the edit: %+v", p.Steps)
	}
	if !strings.Contains(p.Active, "Version 2") || !strings.Contains(p.Active, "edit of version 1") ||
		!strings.Contains(p.Active, "chains.default.steps[1].active: true -> false") || !strings.Contains(p.Active, "by oncall") {
		t.Errorf("active version after the edit: %q", p.Active)
	}
	if r := e.do("GET", "/admin/config", readToken, nil); num(r.body["version"]) != 2 || r.body["source"] != "edit" {
		t.Errorf("GET /admin/config after the switch: %s", r.raw)
	}
	if rv := e.do("GET", "/admin/config/routing", readToken, nil); !strings.Contains(string(rv.raw), `{"index":1,"target":"local/llama","active":false`) {
		t.Errorf("routing after the switch: %s", rv.raw)
	}

	// an invalid document: the loader's message, no Activate button
	err := chromedp.Do(b.ctx, chromedp.SetValue(css(`#config-doc`), docBadType), chromedp.Click(css(`#config-preview`)))
	if err != nil {
		t.Fatal(err)
	}
	p = b.configPage(`result.dataset.state === "invalid"`)
	if !strings.Contains(p.Result, `candidate: providers[0].type: unknown type "openai-ng"`) || strings.Contains(p.Result, "Activate") {
		t.Errorf("preview of an invalid document: %q", p.Result)
	}
	if errs := b.text(`#config-preview-errors`); !strings.HasPrefix(errs, `candidate: providers[0].type: unknown type "openai-ng"`) {
		t.Errorf("the loader's message: %q", errs)
	}

	// a valid one: its changes, then Activate asks for a confirmation
	err = chromedp.Do(b.ctx, chromedp.SetValue(css(`#config-doc`), docV2), chromedp.Click(css(`#config-preview`)))
	if err != nil {
		t.Fatal(err)
	}
	p = b.configPage(`result.dataset.state === "valid"`)
	if !strings.Contains(p.Result, "providers.openai.keys.third") || !strings.Contains(p.Result, "Changes against the active version 2") {
		t.Errorf("preview of a valid document: %q", p.Result)
	}
	err = chromedp.Do(b.ctx, chromedp.SendKeys(css(`#config-comment`), "third key from the page"),
		chromedp.Click(css(`#config-activate`)), chromedp.WaitVisible(css(`#config-confirm-activate`)))
	if err != nil {
		t.Fatalf("activate: %v\npage:\n%s", err, b.dump())
	}
	if r := e.do("GET", "/admin/config", readToken, nil); num(r.body["version"]) != 2 {
		t.Fatalf("activated before the confirmation: %s", r.raw)
	}
	b.screenshot("DASHBOARD_CONFIG_SCREENSHOT") // for a look: DASHBOARD_CONFIG_SCREENSHOT=/tmp/cfg.png
	if err := chromedp.Do(b.ctx, chromedp.Click(css(`#config-confirm-activate`))); err != nil {
		t.Fatal(err)
	}
	p = b.configPage(`page.dataset.version === "3" && page.dataset.applied === "3" && result.dataset.state === "activated"`)
	if !strings.Contains(p.Result, "Version 3 is active (replaces 2)") || !strings.Contains(p.Result, "Instances: 1 applied, 0 refused, 0 pending.") || !strings.Contains(p.Active, "third key from the page") {
		t.Errorf("after the activation: result %q, active %q", p.Result, p.Active)
	}
	if p.Keys["openai/third"] != "on 0 5" {
		t.Errorf("keys after the activation: %v", p.Keys)
	}
	r := e.do("GET", "/admin/config", readToken, nil)
	if num(r.body["version"]) != 3 || r.body["comment"] != "third key from the page" || r.body["document"] != docV2 {
		t.Errorf("GET /admin/config after the activation: %s", r.raw)
	}
	p = b.configPage(`document.querySelectorAll("#config-history tr.version").length === 3 && !document.querySelector("#config-history td.diff span.none")`)
	if len(p.History) != 3 || !strings.HasPrefix(p.History[0], "3 activate") || !strings.Contains(p.History[0], "providers.openai.keys.third") ||
		!strings.Contains(p.History[1], "chains.default.steps[1].active") {
		t.Errorf("history: %q", p.History)
	}
	if strings.Join(p.Rollback, ",") != "2,1" {
		t.Errorf("roll back buttons for %v", p.Rollback)
	}
	// switch a key off from the page: version 4; it stays listed, off
	if err := chromedp.Do(b.ctx, chromedp.Click(css(`input.key-switch[data-provider="openai"][data-key="secondary"]`))); err != nil {
		t.Fatal(err)
	}
	p = b.configPage(`page.dataset.version === "4" && page.dataset.applied === "4" && document.querySelector('#config-keys tr.key[data-key="secondary"]').dataset.enabled === "false"`)
	if p.Keys["openai/secondary"] != "off 0 1" || p.Keys["openai/primary"] != "on 0 1" || !strings.Contains(p.Active, "providers.openai.keys.secondary.enabled") {
		t.Errorf("after switching a key off: keys %v, active %q", p.Keys, p.Active)
	}
	if marker, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.__noReload === true`)); err != nil || !marker {
		t.Errorf("the page reloaded (marker %v, %v)", marker, err)
	}

	// a read token sees the configuration, no switch, no editor, no rollback
	err = chromedp.Do(b.ctx, chromedp.Click(css(`#logout`)), chromedp.WaitVisible(css(`#token`)),
		chromedp.SendKeys(css(`#token`), readToken), chromedp.Click(css(`#login-form button[type=submit]`)))
	if err != nil {
		t.Fatal(err)
	}
	p = b.configPage(`page.dataset.state === "ready" && page.dataset.version === "4" && page.dataset.applied === "4"`)
	// the event feed (Fleet page) has each activation once, though the
	// page was signed out and in again
	feed := `[...document.querySelectorAll('#events li[data-kind="config"]')].map((li) => li.innerText).join("\n")`
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](feed+`.split("\n").length >= 4`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Errorf("config events in the feed: %v", err)
	}
	if txt, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](feed)); err != nil || strings.Count(txt, "\n") != 3 ||
		!strings.Contains(txt, "version 3 (activate) by oncall — third key from the page") ||
		!strings.Contains(txt, "version 2 (edit) by oncall: chains.default.steps[1].active: true -> false") {
		t.Errorf("config events in the feed (%v):\n%s", err, txt)
	}
	if p.Editor || len(p.Rollback) != 0 || p.Steps["default/0"].Switch != "" || p.Steps["default/0"].State != "on" || p.Keys["openai/third"] != "on 0 5" ||
		p.Keys["openai/secondary"] != "off 0 1" {
		t.Errorf("read token: editor %v, rollbacks %v, steps %+v, keys %v", p.Editor, p.Rollback, p.Steps, p.Keys)
	}
}
