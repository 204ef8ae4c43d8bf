package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/testkit"
)

// findChromium returns the path of a Chromium binary, or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// failingProvider is a fake OpenAI upstream that rejects every key.
func failingProvider(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided: sk-old****mary.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// attempt sends one chat request to the fake upstream the way a proxy
// would, classifies the answer and reports it to the stand-in proxy's
// engine.
func (e *env) attempt(upstream, key, secret string) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", upstream+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	res := failure.Classify(failure.Input{Provider: "openai", Status: resp.StatusCode, Header: resp.Header, Body: body})
	if res.Class != failure.CredentialRejected {
		e.t.Fatalf("fake provider answer classified %v", res.Class)
	}
	e.proxy.Engine.Report("openai", key, "gpt-4o", false, hold.Outcome{Result: res, Status: resp.StatusCode})
}

// browser is a headless Chromium for one test: ctx bounds the test's
// steps, bctx is the browser's life.
type browser struct {
	t    *testing.T
	bctx context.Context
	ctx  context.Context
}

// startBrowser starts Chromium (skipping the test, or failing it with
// CI=true, when there is none) with the test's steps bounded by timeout;
// it closes when the test ends.
func startBrowser(t *testing.T, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	path := findChromium()
	if path == "" {
		testkit.MissingTool(t, "chromium (or chromium-browser, google-chrome) not found on PATH; install it with `apt-get install -y chromium` (.ci/run does) to run the dashboard browser test")
	}
	opts := append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	}, extra...)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(bctx, timeout)
	t.Cleanup(func() { cancel(); bcancel(); acancel() })
	// start the browser on the long-lived context (a timeout on the first
	// run would bound the browser's life), then bound each step
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &browser{t: t, bctx: bctx, ctx: ctx}
}

// text reads an element's text in one evaluation in the page: the page
// re-renders parts of itself, so a node found by one DevTools call may be
// gone by the next (chromedp.Text queries, then reads).
func (b *browser) text(sel string) string {
	b.t.Helper()
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.innerText : "(absent)" })()`, sel)
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return v
}

// waitText waits until the element's text is want (the page renders
// parts of itself from separate fetches and events, in any order).
func (b *browser) waitText(sel, want string) {
	b.t.Helper()
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.trim() === %q })()`, sel, want)
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		b.t.Errorf("%s never showed %q (now %q): %v", sel, want, b.text(sel), err)
	}
}

// dump describes the page for a failure message.
func (b *browser) dump() string {
	dctx, dcancel := context.WithTimeout(b.bctx, 5*time.Second)
	defer dcancel()
	v, err := chromedp.Run(dctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
	if err != nil {
		return "(page not readable: " + err.Error() + ")"
	}
	return v
}

// screenshot writes the whole page to the PNG file the environment
// variable env names, if it is set.
func (b *browser) screenshot(env string) {
	path := os.Getenv(env)
	if path == "" {
		return
	}
	buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot: %v", err)
		return
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Logf("screenshot: %v", err)
	}
}

// login opens the dashboard at base and signs in with token.
func (b *browser) login(base, token string) error {
	return chromedp.Do(b.ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Click(chromedp.CSS(`#login-form button[type=submit]`)),
	)
}

// TestDashboardInBrowser drives the dashboard in headless Chromium: a key
// held by a failing fake provider shows up live (no reload), Release
// clears it, and the page follows without a reload.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	e := startEnv(t, true)
	upstream := failingProvider(t)
	b := startBrowser(t, 90*time.Second) // closed before the fleet (cleanups run last first)
	ctx := b.ctx

	const (
		heldRow    = `tr.hold[data-hold-id="openai.primary"][data-state="held"]`
		releaseBtn = `button.release[data-hold-id="openai.primary"]`
		secondRow  = `tr.hold[data-hold-id="openai.secondary"][data-state="held"]`
		pillSel    = `.provider[data-provider="openai"] .pill`
	)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }

	// the key is held before the page opens
	e.attempt(upstream.URL, "primary", "sk-old-primary")
	e.waitHold("openai.primary", hold.StateHeld)

	err := b.login(e.base, opToken)
	if err == nil {
		err = chromedp.Do(ctx, chromedp.WaitVisible(css(heldRow)), chromedp.WaitVisible(css(`#live.on`)))
	}
	if err != nil {
		t.Fatalf("open the dashboard: %v\npage:\n%s", err, b.dump())
	}
	// a marker that a reload would lose
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__noReload = true`)); err != nil {
		t.Fatal(err)
	}
	b.waitText(pillSel, "Degraded")
	if reason := b.text(heldRow + ` td.reason`); !strings.Contains(reason, "invalid_api_key") {
		t.Errorf("reason %q", reason)
	}

	// a new hold appears through the event stream, without a reload
	e.attempt(upstream.URL, "secondary", "sk-old-secondary")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(css(secondRow))); err != nil {
		t.Fatalf("live update: %v\npage:\n%s", err, b.dump())
	}
	b.waitText(pillSel, "Offline")
	b.screenshot("DASHBOARD_SCREENSHOT") // for a look: DASHBOARD_SCREENSHOT=/tmp/d.png
	if countdown := b.text(heldRow + ` .countdown`); !strings.HasSuffix(countdown, "s") {
		t.Errorf("after the second hold: countdown %q", countdown)
	}

	// Release clears the hold everywhere; the page follows. The button is
	// clicked where it is at that moment: the live table redraws its rows
	// (a node found by one call may be gone by the next).
	clicked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const b = document.querySelector(`+strconv.Quote(releaseBtn)+`); if (!b) return false; b.click(); return true })()`))
	if err != nil || !clicked {
		t.Fatalf("click release: %v %v\npage:\n%s", clicked, err, b.dump())
	}
	err = chromedp.Do(ctx,
		chromedp.WaitNotPresent(css(heldRow)),
		chromedp.WaitNotPresent(css(releaseBtn)),
		chromedp.WaitVisible(css(`tr.hold[data-hold-id="openai.primary"][data-state="released"]`)),
		chromedp.WaitVisible(css(`#events li[data-kind="release"]`)),
	)
	if err != nil {
		t.Fatalf("release from the dashboard: %v\npage:\n%s", err, b.dump())
	}
	marker, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__noReload === true`))
	if err != nil || !marker {
		t.Errorf("the page reloaded (marker %v, %v)", marker, err)
	}
	if _, held := e.proxy.Engine.HeldUntil("openai", "primary", "gpt-4o"); held {
		t.Error("the proxy still holds the released key")
	}
}
