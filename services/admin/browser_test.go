package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
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

// TestDashboardInBrowser drives the dashboard in headless Chromium: a key
// held by a failing fake provider shows up live (no reload), Release
// clears it, and the page follows without a reload.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	path := findChromium()
	if path == "" {
		testkit.MissingTool(t, "chromium (or chromium-browser, google-chrome) not found on PATH; install it with `apt-get install -y chromium` (.ci/run does) to run the dashboard browser test")
	}
	e := startEnv(t, true)
	upstream := failingProvider(t)

	opts := []chromedp.ExecAllocatorOption{
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
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()

	const (
		heldRow    = `tr.hold[data-hold-id="openai.primary"][data-state="held"]`
		releaseBtn = `button.release[data-hold-id="openai.primary"]`
		secondRow  = `tr.hold[data-hold-id="openai.secondary"][data-state="held"]`
		pillSel    = `.provider[data-provider="openai"] .pill`
	)
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	// text reads an element's text in one evaluation in the page: the
	// page re-renders rows from events, so a node found by one DevTools
	// call may be gone by the next (chromedp.Text queries, then reads)
	text := func(sel string) string {
		t.Helper()
		expr := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.innerText : "(absent)" })()`, sel)
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	// waitText waits until the element's text is want (the page renders
	// parts of itself from separate fetches and events, in any order)
	waitText := func(sel, want string) {
		t.Helper()
		expr := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.trim() === %q })()`, sel, want)
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
			t.Errorf("%s never showed %q (now %q): %v", sel, want, text(sel), err)
		}
	}
	// dump describes the page for a failure message
	dump := func() string {
		dctx, dcancel := context.WithTimeout(bctx, 5*time.Second)
		defer dcancel()
		v, err := chromedp.Run(dctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
		if err != nil {
			return "(page not readable: " + err.Error() + ")"
		}
		return v
	}
	// start the browser on the long-lived context (a timeout on the first
	// run would bound the browser's life), then bound each step
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}

	// the key is held before the page opens
	e.attempt(upstream.URL, "primary", "sk-old-primary")
	e.waitHold("openai.primary", hold.StateHeld)

	err := chromedp.Do(ctx,
		chromedp.Navigate(e.base+"/"),
		chromedp.WaitVisible(css(`#token`)),
		chromedp.SendKeys(css(`#token`), opToken),
		chromedp.Click(css(`#login-form button[type=submit]`)),
		chromedp.WaitVisible(css(heldRow)),
		chromedp.WaitVisible(css(`#live.on`)),
	)
	if err != nil {
		t.Fatalf("open the dashboard: %v\npage:\n%s", err, dump())
	}
	// a marker that a reload would lose
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__noReload = true`)); err != nil {
		t.Fatal(err)
	}
	waitText(pillSel, "Degraded")
	if reason := text(heldRow + ` td.reason`); !strings.Contains(reason, "invalid_api_key") {
		t.Errorf("reason %q", reason)
	}

	// a new hold appears through the event stream, without a reload
	e.attempt(upstream.URL, "secondary", "sk-old-secondary")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(css(secondRow))); err != nil {
		t.Fatalf("live update: %v\npage:\n%s", err, dump())
	}
	waitText(pillSel, "Offline")
	if path := os.Getenv("DASHBOARD_SCREENSHOT"); path != "" { // for a look: DASHBOARD_SCREENSHOT=/tmp/d.png
		if buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
			_ = os.WriteFile(path, buf, 0o644)
		}
	}
	if countdown := text(heldRow + ` .countdown`); !strings.HasSuffix(countdown, "s") {
		t.Errorf("after the second hold: countdown %q", countdown)
	}

	// Release clears the hold everywhere; the page follows
	err = chromedp.Do(ctx,
		chromedp.Click(css(releaseBtn)),
		chromedp.WaitNotPresent(css(heldRow)),
		chromedp.WaitNotPresent(css(releaseBtn)),
		chromedp.WaitVisible(css(`tr.hold[data-hold-id="openai.primary"][data-state="released"]`)),
		chromedp.WaitVisible(css(`#events li[data-kind="release"]`)),
	)
	if err != nil {
		t.Fatalf("release from the dashboard: %v\npage:\n%s", err, dump())
	}
	marker, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__noReload === true`))
	if err != nil || !marker {
		t.Errorf("the page reloaded (marker %v, %v)", marker, err)
	}
	if _, held := e.proxy.Engine.HeldUntil("openai", "primary", "gpt-4o"); held {
		t.Error("the proxy still holds the released key")
	}
	cancel()
	bcancel()
	acancel()
}
