package proxy

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/testkit"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/tools/fakeprovider"
)

// fleetFixture is three proxies, each with its own NATS connection, in
// front of the same fake providers, sharing one embedded NATS server.
type fleetFixture struct {
	openai    *fakeprovider.Server
	anthropic *fakeprovider.Server
	ns        *server.Server
	proxies   []*Service
	urls      []string
}

func startNATS(t testing.TB, dir string, listen string) *server.Server {
	t.Helper()
	ns, err := natsembed.Start(natsembed.Options{Listen: listen, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func newFleet(t testing.TB, n int, tweak ...func(*config.Config)) *fleetFixture {
	t.Helper()
	oa, an := startFakes(t)
	ff := &fleetFixture{openai: oa, anthropic: an}
	ff.ns = startNATS(t, t.TempDir(), "127.0.0.1:0")
	t.Cleanup(func() { natsembed.Stop(ff.ns) })
	for i := 0; i < n; i++ {
		cfg := baseConfig(oa, an)
		for _, fn := range tweak {
			fn(cfg)
		}
		nc, _ := testkit.ConnectNATS(t, ff.ns.ClientURL())
		svc, url := startService(t, cfg, Deps{Log: testLogger(t), NATS: nc})
		ff.proxies = append(ff.proxies, svc)
		ff.urls = append(ff.urls, url)
	}
	// Every proxy has bound the hold bucket and loaded its records: a hold
	// written from now on reaches each as a change (not in an initial
	// load, which the propagation metric does not count).
	for _, p := range ff.proxies {
		select {
		case <-p.member.Synced():
		case <-time.After(10 * time.Second):
			t.Fatal("a proxy's hold table did not load")
		}
	}
	return ff
}

func (ff *fleetFixture) call(t testing.TB, i int, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, ff.urls[i]+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// load keeps workers requests with body in flight across the fleet
// (worker w calls proxy w modulo the fleet's size, one request after the
// other) until stop, which waits for the requests in flight.
func (ff *fleetFixture) load(tb testing.TB, workers int, body string) (stop func()) {
	var stopped atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for !stopped.Load() {
				ff.call(tb, w%len(ff.urls), body)
			}
		})
	}
	return func() {
		stopped.Store(true)
		wg.Wait()
	}
}

// holdIn reports whether proxy i has a hold whose id starts with id.
func (ff *fleetFixture) holdIn(i int, id string) bool {
	for _, r := range ff.proxies[i].member.Engine.Holds() {
		if strings.HasPrefix(r.ID, id) {
			return true
		}
	}
	return false
}

func TestFleetKeyRejectedAtOneProxyIsSkippedByAll(t *testing.T) {
	ff := newFleet(t, 3)
	ff.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key"})
	// Until a1 is chosen at proxy A, requests there rotate.
	testkit.WaitFor(t, 5*time.Second, func() bool {
		ff.call(t, 0, directBody)
		return callsWith(ff.openai, "key-a1") == 1
	})
	for i := 1; i < 3; i++ {
		testkit.WaitFor(t, 5*time.Second, func() bool { return ff.holdIn(i, "fake-openai.a1") })
	}
	for i := 0; i < 30; i++ {
		if status := ff.call(t, i%3, directBody); status != 200 {
			t.Fatalf("status %d", status)
		}
	}
	if n := callsWith(ff.openai, "key-a1"); n != 1 {
		t.Errorf("a1 called %d times across the fleet, want 1", n)
	}
	// Proxies B and C measured how long the hold took to reach them.
	for i := 1; i < 3; i++ {
		resp, err := http.Get(ff.urls[i] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "switchyard_hold_propagation_seconds_count 1") {
			t.Errorf("proxy %d: no propagation sample in /metrics", i)
		}
	}
}

func TestFleetWastedCallsBoundedByInFlight(t *testing.T) {
	ff := newFleet(t, 3)
	const workers = 6 // two per proxy
	stop := ff.load(t, workers, directBody)
	testkit.WaitFor(t, 5*time.Second, func() bool { return callsWith(ff.openai, "key-a1") > 10 })
	before := callsWith(ff.openai, "key-a1")
	ff.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key"})
	// Let the fleet run on for a while after the key starts rejecting.
	testkit.WaitFor(t, 10*time.Second, func() bool { return callsWith(ff.openai, "key-a2") > before+200 })
	stop()
	wasted := callsWith(ff.openai, "key-a1") - before
	t.Logf("calls to a1 after it started rejecting: %d (workers in flight: %d)", wasted, workers)
	if wasted < 1 || wasted > workers {
		t.Errorf("%d calls to the rejecting key; want between 1 and the %d requests in flight", wasted, workers)
	}
}

func TestFleetOneProbePerDueHold(t *testing.T) {
	ff := newFleet(t, 3, func(c *config.Config) {
		c.Resilience.StatedWaitFloor = time.Second
		c.Providers[0].Keys = c.Providers[0].Keys[:1] // a1 only; the chain falls back to anthropic
	})
	ff.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.rate_limit", RetryAfter: time.Second})
	if status := ff.call(t, 0, chatBody); status != 200 {
		t.Fatalf("status %d", status)
	}
	for i := 0; i < 3; i++ {
		testkit.WaitFor(t, 5*time.Second, func() bool { return ff.holdIn(i, "fake-openai.a1") })
	}
	// Traffic on all three proxies while the hold falls due, again and
	// again (the key keeps refusing): each due period gets one probe.
	stop := ff.load(t, 6, chatBody)
	testkit.WaitFor(t, 15*time.Second, func() bool { return callsWith(ff.openai, "key-a1") >= 3 })
	stop()
	// Each probe failed the same way and stated the same 1 s wait: the
	// key was called at most once per second, fleet-wide (two probes of
	// one due period would be milliseconds apart). The calls' own times,
	// not when the test saw them: a loaded machine sees them late.
	var at []time.Time
	for _, c := range ff.openai.CallsFor("key-a1") {
		at = append(at, c.At)
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 900*time.Millisecond {
			t.Errorf("a1 called %v after the call before it (calls at %v): two probes in one due period", gap, at)
		}
	}
}

func TestFleetServesWhileNATSIsDown(t *testing.T) {
	oa, an := startFakes(t)
	dir := t.TempDir()
	ns := startNATS(t, dir, "127.0.0.1:0")
	addr := ns.Addr().String()
	cfg := baseConfig(oa, an)
	nc, _ := testkit.ConnectNATS(t, ns.ClientURL())
	svc, url := startService(t, cfg, Deps{Log: testLogger(t), NATS: nc})
	testkit.WaitFor(t, 10*time.Second, func() bool { return svc.member.Resources() != nil })
	f := &fixture{openai: oa, anthropic: an, cfg: cfg, url: url, svc: svc}

	natsembed.Stop(ns)
	oa.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key"})
	for i := 0; i < 6; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = ctx
		if status, _, body := f.call(t, "/v1/chat/completions", directBody); status != 200 {
			cancel()
			t.Fatalf("with NATS down: status %d: %s", status, body)
		}
		cancel()
	}
	if n := callsWith(oa, "key-a1"); n != 1 {
		t.Errorf("a1 called %d times with NATS down; the local hold must apply", n)
	}
	// NATS comes back (same port and store): the local hold is written.
	ns2 := startNATS(t, dir, addr)
	defer natsembed.Stop(ns2)
	check, err := nats.Connect(ns2.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	js, _ := check.JetStream()
	testkit.WaitFor(t, 15*time.Second, func() bool {
		kv, err := js.KeyValue(bus.BucketHolds)
		if err != nil {
			return false
		}
		_, err = kv.Get("fake-openai.a1")
		return err == nil
	})
}

// breakerFleet is three proxies in front of one failing key (one attempt
// per request, fail fast once held) with a breaker of threshold n.
func breakerFleet(t *testing.T, n int) *fleetFixture {
	ff := newFleet(t, 3, func(c *config.Config) {
		c.Providers[0].Keys = c.Providers[0].Keys[:1]
		c.Retry.SameTargetAttempts = 1
		c.Resilience.AllHeldPolicy = config.AllHeldFailFast
		c.Resilience.Breaker.ConsecutiveFailures = new(n)
	})
	ff.openai.AddRule(fakeprovider.Rule{Status: 500})
	return ff
}

// TestFleetBreakerCountsTheFleet: consecutive failures spread round-robin
// over three proxies trip the breaker at the threshold (each proxy hears
// the others' counts), not at threshold x proxies.
func TestFleetBreakerCountsTheFleet(t *testing.T) {
	const threshold = 5
	ff := breakerFleet(t, threshold)
	for i := 1; i <= 2*threshold; i++ {
		status := ff.call(t, (i-1)%3, directBody)
		switch {
		case i <= threshold && status != http.StatusBadGateway:
			t.Fatalf("request %d: status %d, want the provider's failure (502)", i, status)
		case i > threshold && status != http.StatusServiceUnavailable:
			t.Fatalf("request %d: status %d, want 503 (the breaker holds the provider)", i, status)
		case i < threshold:
			// every proxy has heard of every failure before the next request
			for _, svc := range ff.proxies {
				testkit.WaitFor(t, 5*time.Second, func() bool {
					return svc.member.Engine.BreakerCount("fake-openai", "") == i
				})
			}
		case i == threshold:
			for p := range ff.proxies {
				testkit.WaitFor(t, 5*time.Second, func() bool { return ff.holdIn(p, "fake-openai._") })
			}
		}
	}
	if n := len(ff.openai.Calls()); n != threshold {
		t.Errorf("%d upstream calls, want %d: the fleet's %d consecutive failures trip the breaker", n, threshold, threshold)
	}
}

// TestFleetBreakerTripsUnderLoad: with requests in flight on every proxy,
// the breaker trips after about the threshold: at most the threshold plus
// the requests in flight, plus one more per worker started while the last
// failures' tallies were on their way over NATS (on a loaded machine that
// took 13 calls for 8); each proxy counting alone took about threshold x
// proxies (24).
func TestFleetBreakerTripsUnderLoad(t *testing.T) {
	const threshold, workers = 8, 3
	ff := breakerFleet(t, threshold)
	stop := ff.load(t, workers, directBody)
	testkit.WaitFor(t, 10*time.Second, func() bool {
		for p := range ff.proxies {
			if !ff.holdIn(p, "fake-openai._") {
				return false
			}
		}
		return true
	})
	stop()
	n := len(ff.openai.Calls())
	t.Logf("upstream calls until the fleet held the provider: %d (threshold %d, %d in flight)", n, threshold, workers)
	if limit := threshold + 2*workers; n < threshold || n > limit {
		t.Errorf("%d upstream calls, want between %d and %d (threshold + requests in flight + one per worker while tallies travel)", n, threshold, limit)
	}
}

// TestFleetTrySoftOneRequestPerHold: with every target of a chain held by
// a tripped breaker, try_soft lets one request at a time per provider
// through, fleet-wide (an early probe); the others get 503 with
// Retry-After. When the providers recover, that probe releases the hold.
func TestFleetTrySoftOneRequestPerHold(t *testing.T) {
	ff := newFleet(t, 3, func(c *config.Config) {
		c.Retry.SameTargetAttempts = 1
		c.Resilience.AllHeldPolicy = config.AllHeldTrySoft
		c.Resilience.Breaker.ConsecutiveFailures = new(2)
	})
	for _, f := range []*fakeprovider.Server{ff.openai, ff.anthropic} {
		f.AddRule(fakeprovider.Rule{Status: 500, FirstByteLatency: 50 * time.Millisecond})
	}
	held := func() bool {
		for p := range ff.proxies {
			if !ff.holdIn(p, "fake-openai._") || !ff.holdIn(p, "fake-anthropic._") {
				return false
			}
		}
		return true
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		ff.call(t, 0, chatBody)
		return held()
	})
	ff.openai.ResetPeak()
	ff.anthropic.ResetPeak()
	before := len(ff.openai.Calls()) + len(ff.anthropic.Calls())

	type answer struct {
		status     int
		retryAfter string
	}
	var mu sync.Mutex
	var answers []answer
	var stopped atomic.Bool
	var wg sync.WaitGroup
	t.Cleanup(func() { stopped.Store(true); wg.Wait() }) // also when a check below fails
	for w := range 9 {
		wg.Go(func() {
			for !stopped.Load() {
				req, _ := http.NewRequest(http.MethodPost, ff.urls[w%3]+"/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set("Authorization", "Bearer "+clientSecret)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				answers = append(answers, answer{resp.StatusCode, resp.Header.Get("Retry-After")})
				mu.Unlock()
			}
		})
	}
	// a few probes of each provider go out, one after the other
	testkit.WaitFor(t, 15*time.Second, func() bool {
		return len(ff.openai.Calls())+len(ff.anthropic.Calls()) >= before+6
	})
	if p := ff.openai.PeakInFlight(); p != 1 {
		t.Errorf("fake-openai: %d calls in flight at once, want 1 (one early probe at a time)", p)
	}
	if p := ff.anthropic.PeakInFlight(); p != 1 {
		t.Errorf("fake-anthropic: %d calls in flight at once, want 1", p)
	}
	// recovered: the next probe serves and releases
	ff.openai.ClearRules()
	testkit.WaitFor(t, 10*time.Second, func() bool {
		for p := range ff.proxies {
			if liveHold(ff.proxies[p], "fake-openai._") {
				return false
			}
		}
		return true
	})
	stopped.Store(true)
	wg.Wait()

	counts := map[int]int{}
	for _, a := range answers {
		counts[a.status]++
		if a.status == http.StatusServiceUnavailable {
			if ra, err := strconv.Atoi(a.retryAfter); err != nil || ra < 1 {
				t.Errorf("a 503 with Retry-After %q", a.retryAfter)
				break
			}
		}
	}
	t.Logf("answers while every target was held: %v; upstream calls %d", counts, len(ff.openai.Calls())+len(ff.anthropic.Calls())-before)
	if counts[http.StatusServiceUnavailable] == 0 || counts[http.StatusBadGateway] == 0 {
		t.Errorf("answers %v: want 503s (a probe was out) and 502s (the probes' failures)", counts)
	}
	if counts[http.StatusOK] == 0 {
		t.Errorf("answers %v: the recovered provider served nothing", counts)
	}
}

// liveHold reports whether svc holds id (held or probing, not ramping).
func liveHold(svc *Service, id string) bool {
	for _, r := range svc.member.Engine.Holds() {
		if r.ID == id && r.State != hold.StateReleased {
			return true
		}
	}
	return false
}
