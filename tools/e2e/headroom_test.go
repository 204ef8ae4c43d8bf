package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/tools/fakeprovider"
)

const headroomYAML = `
nats:
  url: NATS_URL
  storage: memory
clients:
  - {id: team, secret: env:SY_CLIENT, models: ["*"]}
routing:
  headroom:
    enabled: ENABLED
    max_wait: 0s
retry:
  same_target_attempts: 1
providers:
  - name: fake-openai
    type: openai
    base_url: OA_URL/v1
    selection: SELECTION
    keys:
      - {id: k1, secret: env:SY_K1}
      - {id: k2, secret: env:SY_K2}
      - {id: k3, secret: env:SY_K3}
    models:
      - {name: demo-model}
  - name: fake-anthropic
    type: anthropic
    base_url: AN_URL
    keys:
      - {id: k4, secret: env:SY_K3}
    models:
      - {name: demo-claude, upstream: claude-upstream}
`

// headroomRun is what one load through the fleet brought: the gateway's
// statuses, the upstream's refusals per key, and whether each of the
// gateway's own 429s said to come back no earlier than the provider's
// reset.
type headroomRun struct {
	statuses  map[int]int
	limited   map[string]int // upstream 429s by key
	gateway   int            // 429s the gateway answered itself (X-Switchyard-Attempts: 0)
	earlyWait []string       // of those, the ones whose Retry-After ends before any key's window resets
}

// runHeadroomLoad sends n requests through three proxies in bursts spread
// evenly over one window of the fake's limit (three keys of perKey
// requests each).
func runHeadroomLoad(t *testing.T, n int, perKey int64, window time.Duration, on bool, selection string) headroomRun {
	t.Helper()
	ns := natstest.Start(t, "127.0.0.1:0", "")
	oa, an := startFakePair(t)
	if err := oa.SetRateLimit(fakeprovider.RateLimit{Requests: perKey, Window: window}); err != nil {
		t.Fatal(err)
	}
	yaml := strings.NewReplacer("ENABLED", strconv.FormatBool(on), "SELECTION", selection).Replace(headroomYAML)
	cfg := loadGateway(t, yaml, ns.ClientURL(), oa, an)
	proxies := serveProxies(t, cfg, ns, 3)
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	// warm each proxy's connections (models lists go nowhere near the limit)
	for _, p := range proxies {
		req, _ := http.NewRequest(http.MethodGet, p+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer sk-e2e-client")
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}

	run := headroomRun{statuses: map[int]int{}, limited: map[string]int{}}
	var mu sync.Mutex
	const burst = 5
	bursts := (n + burst - 1) / burst
	gap := window * 9 / 10 / time.Duration(bursts)
	start := time.Now()
	sent := 0
	for b := range bursts {
		time.Sleep(time.Until(start.Add(time.Duration(b) * gap))) // the load's own schedule, not a wait for a condition
		var wg sync.WaitGroup
		for i := 0; i < burst && sent < n; i++ {
			url := proxies[sent%len(proxies)]
			sent++
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions",
					strings.NewReader(`{"model":"demo-model","messages":[{"role":"user","content":"hi"}]}`))
				req.Header.Set("Authorization", "Bearer sk-e2e-client")
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("request: %v", err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				answered := time.Now()
				mu.Lock()
				defer mu.Unlock()
				run.statuses[resp.StatusCode]++
				if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Switchyard-Attempts") != "0" {
					return
				}
				run.gateway++
				ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
				// the soonest a key is whole again: no retry can pass before it
				back := answered.Add(time.Duration(ra) * time.Second)
				var first time.Time
				spent := 0
				for _, st := range oa.RateLimitStats() {
					if st.Requests >= perKey {
						spent++
						if first.IsZero() || st.Reset.Before(first) {
							first = st.Reset
						}
					}
				}
				if spent == 3 && back.Before(first) {
					run.earlyWait = append(run.earlyWait, fmt.Sprintf("Retry-After %d s, the first key resets in %v: %s", ra, first.Sub(answered), body))
				}
			})
		}
		wg.Wait()
	}
	for _, st := range oa.RateLimitStats() {
		run.limited[st.Key] += st.Limited
	}
	return run
}

// TestHeadroomRoutingAcrossTheFleet: three proxies, three keys of 20
// requests a window each. 55 requests in bursts over the window are all
// served without an upstream 429 (with headroom routing off, a heavier
// load is refused upstream); 80 requests (more than the keys allow) see at
// most one upstream 429 per key, the excess answered 429 by the gateway
// itself with a Retry-After no earlier than the provider's reset. The
// window is scaled down from a minute (SWITCHYARD_LONG_TESTS=1: the
// minute).
func TestHeadroomRoutingAcrossTheFleet(t *testing.T) {
	window := 4 * time.Second
	if testing.Short() {
		t.Skip("a load over a rate-limit window")
	}
	if v, _ := strconv.ParseBool(os.Getenv("SWITCHYARD_LONG_TESTS")); v {
		window = time.Minute
	}
	for _, sel := range []string{"headroom", "round_robin"} {
		t.Run("55 requests, "+sel, func(t *testing.T) {
			r := runHeadroomLoad(t, 55, 20, window, true, sel)
			if r.statuses[200] != 55 {
				t.Errorf("statuses %v, want 55 served", r.statuses)
			}
			// none: the proxies share readings, and split each key's
			// last requests among them so that two never send the same
			total := 0
			for _, n := range r.limited {
				total += n
			}
			if total != 0 {
				t.Errorf("upstream 429s by key %v, want none", r.limited)
			}
		})
	}
	t.Run("80 requests, headroom off", func(t *testing.T) {
		r := runHeadroomLoad(t, 80, 20, window, false, "round_robin")
		total := 0
		for _, n := range r.limited {
			total += n
		}
		if total == 0 {
			t.Errorf("headroom off: no upstream 429 (statuses %v): the load does not reach the limit", r.statuses)
		}
		t.Logf("headroom off, 80 requests: statuses %v, upstream 429s by key %v", r.statuses, r.limited)
	})
	t.Run("80 requests", func(t *testing.T) {
		r := runHeadroomLoad(t, 80, 20, window, true, "headroom")
		t.Logf("statuses %v, upstream 429s by key %v", r.statuses, r.limited)
		upstream := 0
		for key, n := range r.limited {
			upstream += n
			if n > 1 {
				t.Errorf("key %s: %d upstream 429s, want at most 1", key, n)
			}
		}
		// (the target allows one upstream 429 per key and window; those
		// are relayed, the rest the gateway answers itself)
		if r.statuses[200] < 57 || r.statuses[200]+r.statuses[429] != 80 || r.gateway < 80-60-upstream {
			t.Errorf("statuses %v: want the keys' 60 served (less at most one per key refused upstream), the rest 429, all but those refused upstream the gateway's own (%d)", r.statuses, r.gateway)
		}
		for _, e := range r.earlyWait {
			t.Errorf("a gateway 429 says to come back before the window resets: %s", e)
		}
	})
}
