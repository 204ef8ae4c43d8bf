package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// limitOpenAI has the fake OpenAI upstream limit each key to n requests
// per window, stating it in OpenAI's x-ratelimit-* headers.
func limitOpenAI(t testing.TB, s *fakeprovider.Server, n int64, window time.Duration) {
	t.Helper()
	if err := s.SetRateLimit(fakeprovider.RateLimit{Requests: n, Window: window}); err != nil {
		t.Fatal(err)
	}
}

// upstream429s counts the upstream's refusals by its rate limiter.
func upstream429s(s *fakeprovider.Server) int {
	n := 0
	for _, st := range s.RateLimitStats() {
		n += st.Limited
	}
	return n
}

// TestHeadroomSkipsSpentKeys: with two keys of 3 requests a minute, six
// requests are served without one upstream 429 (each key skipped once its
// stated window is spent), and the seventh is answered 429 rate_limited by
// the gateway itself, with a Retry-After of the window's reset, without
// calling upstream. Explanations and debug bundles name the keys skipped
// for headroom; the metric shows them spent.
func TestHeadroomSkipsSpentKeys(t *testing.T) {
	ff := newFleet(t, 1)
	limitOpenAI(t, ff.openai, 3, time.Minute)
	for i := range 6 {
		if st := post(t, ff.urls[0], fmt.Sprintf("req-room-%d", i), directBody); st != 200 {
			t.Fatalf("request %d: %d", i, st)
		}
	}
	if n := upstream429s(ff.openai); n != 0 {
		t.Fatalf("%d upstream 429s, want none", n)
	}
	calls := len(ff.openai.Calls())
	req, _ := http.NewRequest(http.MethodPost, ff.urls[0]+"/v1/chat/completions", strings.NewReader(directBody))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	req.Header.Set("X-Request-Id", "req-room-spent")
	req.Header.Set("X-Switchyard-Debug", "true")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || errorCode(t, body) != gwerror.RateLimited {
		t.Fatalf("seventh request: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get(headerAttempts) != "0" {
		t.Errorf("%s %q, want 0: the gateway answered itself", headerAttempts, resp.Header.Get(headerAttempts))
	}
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 50 || ra > 60 {
		t.Errorf("Retry-After %q, want the window's reset (about 60 s)", resp.Header.Get("Retry-After"))
	}
	if len(ff.openai.Calls()) != calls || upstream429s(ff.openai) != 0 {
		t.Errorf("the gateway's own 429 called upstream: %d calls, %d refused", len(ff.openai.Calls())-calls, upstream429s(ff.openai))
	}

	x := explainOn(t, ff.proxies[0], bus.ExplainRequest{V: 1, Model: "fake-openai/demo-model"})
	for _, k := range x.Candidates[0].Keys {
		if k.State != route.KeyNoHeadroom || k.Until == "" || len(k.Headroom) == 0 || k.Headroom[0].Kind != "requests" || k.Headroom[0].Remaining != 0 {
			t.Errorf("explained key %+v, want state headroom until the reset", k)
		}
	}

	b := bundleOf(t, debugStream(t, ff.ns.ClientURL()), "req-room-spent")
	if b.Status != 429 || len(b.Attempts) != 0 || b.Route == nil {
		t.Fatalf("bundle: status %d, %d attempts, route %v", b.Status, len(b.Attempts), b.Route)
	}
	st := b.Route.Steps[0]
	if st.Reason != "headroom" || len(st.Headroom) != 2 || st.Headroom[0].Reset.IsZero() {
		t.Errorf("bundle step %+v, want both keys skipped for headroom", st)
	}

	metrics := scrape(t, ff.urls[0])
	for _, key := range []string{"a1", "a2"} {
		if want := `switchyard_key_headroom_ratio{key="` + key + `",kind="requests",provider="fake-openai"} 0`; !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// scrape reads a proxy's /metrics.
func scrape(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestHeadroomWaitsForAReset: when every key's window is spent and the
// earliest reset falls within routing.headroom.max_wait, the request
// waits for it and is served; with headroom routing off the same request
// goes upstream and is refused there.
func TestHeadroomWaitsForAReset(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("headroom %v", on), func(t *testing.T) {
			f := newFixture(t, func(c *config.Config) {
				c.Routing.Headroom.Enabled = bptr(on)
			})
			const window = 400 * time.Millisecond
			limitOpenAI(t, f.openai, 2, window)
			statuses := map[int]int{}
			var waited time.Duration
			for i := range 5 {
				start := time.Now()
				st, _, _ := f.call(t, "/v1/chat/completions", directBody)
				statuses[st]++
				if i == 4 {
					waited = time.Since(start)
				}
			}
			switch {
			case on && (statuses[200] != 5 || upstream429s(f.openai) != 0):
				t.Fatalf("headroom on: statuses %v, %d upstream 429s; want all served, none refused upstream", statuses, upstream429s(f.openai))
			case on && waited > window+time.Second:
				t.Errorf("the fifth request took %v: want about the rest of the %v window", waited, window)
			case !on && upstream429s(f.openai) == 0:
				t.Fatalf("headroom off: statuses %v and no upstream 429: the test does not exercise the limiter", statuses)
			}
		})
	}
}

// TestHeadroomAcrossTheFleet: a proxy that never called a key learns its
// window is spent from another proxy's report (switchyard.headroom.>),
// and skips it.
func TestHeadroomAcrossTheFleet(t *testing.T) {
	ff := newFleet(t, 2, func(c *config.Config) {
		c.Providers[0].Keys = c.Providers[0].Keys[:1]
	})
	limitOpenAI(t, ff.openai, 2, time.Minute)
	for i := range 2 {
		if st := ff.call(t, 0, directBody); st != 200 {
			t.Fatalf("request %d on proxy 0: %d", i, st)
		}
	}
	// proxy 1 has sent nothing: it knows a1 is spent once proxy 0's
	// report reaches it
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		x := explainOn(t, ff.proxies[1], bus.ExplainRequest{V: 1, Model: "fake-openai/demo-model"})
		if k := x.Candidates[0].Keys[0]; k.State != route.KeyNoHeadroom {
			return fmt.Errorf("proxy 1 explains a1 as %+v", k)
		}
		return nil
	})
	if st := ff.call(t, 1, directBody); st != 429 {
		t.Errorf("proxy 1: %d, want the gateway's 429", st)
	}
	if n := upstream429s(ff.openai); n != 0 {
		t.Errorf("%d upstream 429s, want none", n)
	}
}
