package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

const trySoftYAML = `
nats:
  url: NATS_URL
  storage: memory
clients:
  - {id: team, secret: env:SY_CLIENT, models: ["*"]}
retry:
  same_target_attempts: 1
resilience:
  all_held_policy: try_soft
  jitter: 0
  breaker:
    consecutive_failures: 2
    cooldown: 4s
    max_cooldown: 1m
` + fakePairYAML

// TestTrySoftRespectsOpenBreakers: three proxies on one NATS server, a
// chain whose two providers are both tripped (one answers 500 and 503,
// the other 529), try_soft, 50 requests a second for 10 s. Each hold is
// probed early at most once per early-probe interval fleet-wide (1 s
// here, the breaker's cooldown being 4 s), so neither provider gets more
// than 2 calls in any second, every step of the chain gets its probes
// (the declared order), the requests in between are answered 503 with
// Retry-After, and the holds' rungs are no higher than due probes alone
// would have made them. Before, the same load made 677 upstream calls to
// the two "open" providers and climbed a hold to rung 476.
func TestTrySoftRespectsOpenBreakers(t *testing.T) {
	ns := natstest.Start(t, "127.0.0.1:0", "")
	oa, an := startFakePair(t)
	oa.AddRule(fakeprovider.Rule{Error: "openai.server_error", Probability: 0.5})
	oa.AddRule(fakeprovider.Rule{Error: "openai.server_error", Status: 503})
	an.AddRule(fakeprovider.Rule{Error: "anthropic.overloaded"})
	cfg := loadGateway(t, trySoftYAML, ns.ClientURL(), oa, an)
	proxies := serveProxies(t, cfg, ns, 3)
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	chat := func(url string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions",
			strings.NewReader(`{"model":"demo-chat","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer sk-e2e-client")
		resp, err := client.Do(req)
		if err != nil {
			return 0, ""
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	for _, p := range proxies {
		testkit.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
			if st := statusOf(client, p+"/readyz"); st != http.StatusOK {
				return fmt.Errorf("proxy readyz %d", st)
			}
			return nil
		})
	}

	js, err := jetstream.New(connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	holds, err := js.KeyValue(context.Background(), bus.BucketHolds) // the proxies made it
	if err != nil {
		t.Fatal(err)
	}
	trips := []string{"fake-openai._", "fake-anthropic._"}
	record := func(id string) (hold.Record, error) {
		e, err := holds.Get(context.Background(), id)
		if err != nil {
			return hold.Record{}, err
		}
		var rec hold.Record
		return rec, json.Unmarshal(e.Value(), &rec)
	}
	// Trip both breakers (the fleet counts the failures together).
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, id := range trips {
			if rec, err := record(id); err != nil || rec.State == hold.StateReleased {
				chat(proxies[0])
				return fmt.Errorf("%s not tripped yet (%v)", id, err)
			}
		}
		return nil
	})
	tripped := time.Now()
	calls := map[string]int{"fake-openai": len(oa.Calls()), "fake-anthropic": len(an.Calls())}

	// 50 requests a second for 10 s, spread over the three proxies.
	const rate, run = 50, 10 * time.Second
	var mu sync.Mutex
	statuses := map[int]int{}
	noRetryAfter := 0
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / rate)
	for i := 0; i < rate*int(run/time.Second); i++ {
		<-tick.C
		wg.Go(func() {
			st, ra := chat(proxies[i%len(proxies)])
			mu.Lock()
			defer mu.Unlock()
			statuses[st]++
			if st == http.StatusServiceUnavailable && ra == "" {
				noRetryAfter++
			}
		})
	}
	tick.Stop()
	wg.Wait()
	elapsed := time.Since(tripped)

	// The rung a due-probe schedule gives: cooldown 4 s doubling, no
	// jitter, a probe failing at each due time since the trip.
	due := 0
	for wait, at := 4*time.Second, 4*time.Second; at <= elapsed; at += wait {
		due++
		wait *= 2
	}
	for name, f := range map[string]*fakeprovider.Server{"fake-openai": oa, "fake-anthropic": an} {
		got := f.Calls()[calls[name]:]
		// Within a probe's early-probe interval (1 s) no early probe
		// goes out: two calls closer than that (900 ms, for the time
		// from a lease to its call) are a due probe after an early one.
		near := 0
		for i := 1; i < len(got); i++ {
			if got[i].At.Sub(got[i-1].At) < 900*time.Millisecond {
				near++
			}
		}
		if near > due {
			t.Errorf("%s: %d calls within the early-probe interval of the one before, want at most %d (a due probe's)", name, near, due)
		}
		t.Logf("%s: %d upstream calls in %s", name, len(got), elapsed.Round(time.Millisecond))
		if len(got) == 0 {
			t.Errorf("%s: no probe at all: every step is tried, in declared order", name)
		}
		for i := range got {
			n := 0
			for j := i; j < len(got) && got[j].At.Sub(got[i].At) < time.Second; j++ {
				n++
			}
			if n > 2 {
				t.Errorf("%s: %d calls within a second from %s (want at most 2: one early probe per interval, and a due one)",
					name, n, got[i].At.Sub(tripped).Round(time.Millisecond))
				break
			}
		}
	}
	for _, id := range trips {
		rec, err := record(id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Rung > due {
			t.Errorf("%s on rung %d after %s, want at most %d (the due probes')", id, rec.Rung, elapsed.Round(time.Millisecond), due)
		}
	}
	t.Logf("answers: %v", statuses)
	if statuses[http.StatusServiceUnavailable] == 0 || noRetryAfter > 0 {
		t.Errorf("answers %v, %d 503s without Retry-After: want 503s with Retry-After between the probes", statuses, noRetryAfter)
	}
}

// statusOf is the status of a GET of url (0 when it got no answer).
func statusOf(c *http.Client, url string) int {
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
