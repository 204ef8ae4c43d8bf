package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/shared/usage"
	"switchyard.dev/tools/fakeprovider"
)

// The fleet of TestFleetPlanLimitProcesses: the plan's limit, the report
// interval, and the pace of the load.
const (
	planLimit    = 30                    // plans.small.requests_per_minute
	planRequests = 3 * planLimit         // sent round-robin over the three proxies
	planInterval = 20 * time.Millisecond // metering.limits_interval
	planPace     = 5 * time.Millisecond  // at least this between two requests
	planProxies  = 3
)

// Secrets of the fleet, handed to the proxies in their environment (the
// configuration names the variables).
const (
	planUpKey1    = "e2e-upstream-key-1"
	planUpKey2    = "e2e-upstream-key-2"
	planClientKey = "e2e-team-gateway-key"
)

// TestFleetPlanLimitProcesses: three proxy processes (the standalone
// command, each with its own NATS connection and listener) share one
// configuration with a plan of 30 requests per minute. 90 requests sent
// round-robin over them are admitted about 30 times in total: at least
// the limit, and at most the limit plus what the fleet admits within one
// report interval. Refused requests get 429 rate_limited naming the limit
// and the plan, with Retry-After, and never go upstream; every admitted
// request, and no other, leaves one usage record on SWITCHYARD_USAGE, and
// the fleet's request counters in switchyard_limits add up to the
// admitted requests.
func TestFleetPlanLimitProcesses(t *testing.T) {
	began := time.Now()
	step := func(what string) { t.Logf("%6.2fs %s", time.Since(began).Seconds(), what) }
	bin := buildBinary(t, "switchyard.dev/services/proxy/cmd/proxy")
	step("proxy command built")

	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsembed.Stop(ns) })
	fake, err := fakeprovider.Start(fakeprovider.Options{Name: "upstream", Keys: []string{planUpKey1, planUpKey2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })

	cfgPath := filepath.Join(t.TempDir(), "gateway.yaml")
	cfg := fmt.Sprintf(`log:
  level: warn
  format: json
nats:
  url: %s
providers:
  - name: upstream
    type: openai
    base_url: %s/v1
    keys:
      - id: k1
        secret: env:UP_KEY_1
      - id: k2
        secret: env:UP_KEY_2
    models:
      - name: demo-model
clients:
  - id: team
    secret: env:CLIENT_KEY
    models: ["*"]
    plan: small
plans:
  small:
    requests_per_minute: %d
metering:
  limits_interval: %s
`, ns.ClientURL(), fake.URL(), planLimit, planInterval)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	tr := &http.Transport{MaxIdleConnsPerHost: 2}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	// One configuration for the fleet; each proxy's listener comes from
	// its environment (proxy.listen).
	var proxies []*proxyProcess
	for i := range planProxies {
		proxies = append(proxies, startProxyProcess(t, bin, fmt.Sprintf("proxy-%d", i), cfgPath,
			"UP_KEY_1="+planUpKey1, "UP_KEY_2="+planUpKey2, "CLIENT_KEY="+planClientKey))
	}
	for _, p := range proxies {
		p.awaitReady(t, client, 30*time.Second)
	}
	step("three proxies ready")

	// The load: one request at a time, round-robin. The pause after each
	// shapes the load (at most interval/pace requests per report
	// interval, which the overshoot bound below is derived from); it is
	// not synchronisation, nothing waits for a report.
	var (
		admitted, refused int
		perProxy          [planProxies]int
		admittedIDs       = map[string]bool{}
		refusedIDs        = map[string]bool{}
		refusals          []refusal
	)
	loadStart := time.Now()
	for i := range planRequests {
		p := proxies[i%planProxies]
		sent := time.Now()
		status, h, body := p.chat(t, client, planClientKey)
		id := h.Get("X-Request-Id")
		if id == "" || admittedIDs[id] || refusedIDs[id] {
			t.Fatalf("request %d to %s: request id %q missing or repeated", i, p.name, id)
		}
		switch status {
		case http.StatusOK:
			admitted++
			perProxy[i%planProxies]++
			admittedIDs[id] = true
		case http.StatusTooManyRequests:
			refused++
			refusedIDs[id] = true
			what := fmt.Sprintf("request %d to %s", i, p.name)
			refusals = append(refusals, refusal{what: what, sent: sent, answered: time.Now(),
				retryAfter: checkRateLimited(t, what, h, body)})
		default:
			t.Fatalf("request %d to %s: status %d (want 200 or 429): %s", i, p.name, status, body)
		}
		time.Sleep(planPace) // pacing, see above
	}
	loadEnd := time.Now()

	// The bound. Each proxy admits from its own exact count plus the
	// others' last reports; a report leaves every interval and reaches
	// the others well under a millisecond later. What a proxy does not
	// see is therefore what the others admitted since their last report:
	// with one request at a time, at least planPace apart, at most
	// interval/pace requests over the fleet (interval/(3*pace) per proxy,
	// three proxies), plus one for the report in transit or a late tick.
	// Nothing else is in flight: the requests are sequential. If the load
	// crossed a minute boundary, the sliding minute lets the previous
	// minute's count (at most limit + that overshoot) fade by its share
	// of the time into the new minute: that many more.
	overshoot := int((planInterval+planPace-1)/planPace) + 1
	if m := loadEnd.Truncate(time.Minute); m.After(loadStart) {
		overshoot += int(math.Ceil(float64(planLimit+overshoot) * loadEnd.Sub(m).Minutes()))
	}
	t.Logf("admitted %d of %d (per proxy %v), refused %d, in %v; limit %d, overshoot bound %d (interval %v, pace %v)",
		admitted, planRequests, perProxy, refused, loadEnd.Sub(loadStart).Round(time.Millisecond),
		planLimit, overshoot, planInterval, planPace)
	if admitted < planLimit || admitted > planLimit+overshoot {
		t.Errorf("admitted %d of %d, want %d to %d", admitted, planRequests, planLimit, planLimit+overshoot)
	}

	// Retry-After is when the sliding minute falls below the limit if
	// nothing more is consumed: the rest of the minute, then the time the
	// minute's count (at most the admitted requests) takes to fade below
	// the limit. A refusal in the load's first minute (nothing before it)
	// waits at least for the rest of that minute.
	fade := time.Duration(max(0, 1-float64(planLimit)/float64(admitted)) * float64(time.Minute))
	first := loadStart.Truncate(time.Minute)
	raMin, raMax := math.MaxInt, 0
	for _, r := range refusals {
		raMin, raMax = min(raMin, r.retryAfter), max(raMax, r.retryAfter)
		hi := int(math.Ceil((r.sent.Truncate(time.Minute).Add(time.Minute).Sub(r.sent) + fade).Seconds()))
		lo := 1
		if m := r.answered.Truncate(time.Minute); m.Equal(first) {
			lo = max(1, int(m.Add(time.Minute).Sub(r.answered).Seconds()))
		}
		if r.retryAfter < lo || r.retryAfter > hi {
			t.Errorf("%s: Retry-After %d s, want %d to %d s", r.what, r.retryAfter, lo, hi)
		}
	}
	if len(refusals) > 0 {
		t.Logf("Retry-After of the refusals: %d to %d s", raMin, raMax)
	}

	// Refused requests never go upstream.
	calls := fake.Calls()
	byKey := map[string]int{}
	for _, c := range calls {
		byKey[c.Key]++
		if !strings.HasSuffix(c.Path, "/chat/completions") {
			t.Errorf("an upstream call to %s %s", c.Method, c.Path)
		}
	}
	t.Logf("upstream calls: %d (%d with k1, %d with k2)", len(calls), byKey[planUpKey1], byKey[planUpKey2])
	if len(calls) != admitted || byKey[planUpKey1] == 0 || byKey[planUpKey2] == 0 {
		t.Errorf("the upstream received %d calls (by key %v), want exactly the %d admitted, over both keys",
			len(calls), byKey, admitted)
	}

	// One usage record per admitted request.
	_, js := testkit.ConnectNATS(t, ns.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	records := readUsage(ctx, t, js, admitted)
	step(fmt.Sprintf("%d usage records read", len(records)))
	seen := map[string]bool{}
	for _, r := range records {
		rec := r.rec
		switch {
		case refusedIDs[rec.RequestID]:
			t.Errorf("a usage record for the refused request %s: %+v", rec.RequestID, rec)
		case !admittedIDs[rec.RequestID]:
			t.Errorf("a usage record for a request no response carried (%q): %+v", rec.RequestID, rec)
		case seen[rec.RequestID]:
			t.Errorf("two usage records for request %s", rec.RequestID)
		}
		seen[rec.RequestID] = true
		if rec.V != usage.SchemaVersion || rec.ClientID != "team" || rec.Plan != "small" || rec.Status != http.StatusOK ||
			rec.Class != "" || rec.Provider != "upstream" || (rec.KeyID != "k1" && rec.KeyID != "k2") {
			t.Errorf("usage record %s: %+v", rec.RequestID, rec)
		}
		if r.subject != "switchyard.usage.upstream.team" || r.msgID == "" || strings.HasPrefix(r.msgID, "req_") {
			t.Errorf("usage record %s on %q in a message of id %q (want the proxy's own id, not a request's)", rec.RequestID, r.subject, r.msgID)
		}
	}
	if len(records) != admitted || len(seen) != admitted {
		t.Errorf("%d usage records (%d requests), want one for each of the %d admitted", len(records), len(seen), admitted)
	}

	// Once the proxies have stopped (each flushes its records and its
	// last report on the way out) nothing more comes: the stream holds
	// exactly the admitted requests, and the fleet's counters of the
	// client add up to them, one instance per proxy.
	var wg sync.WaitGroup
	for _, p := range proxies {
		wg.Go(func() {
			if err := p.stop(); err != nil {
				t.Errorf("%s: %v", p.name, err)
			}
		})
	}
	wg.Wait()
	step("three proxies stopped")
	info, err := js.Stream(ctx, bus.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	if all := readUsage(ctx, t, js, admitted); len(all) != admitted {
		t.Errorf("after the proxies stopped the usage stream holds %d records (in %d messages), want %d",
			len(all), info.CachedInfo().State.Msgs, admitted)
	}
	reqs, instances := fleetRequests(ctx, t, js, "team")
	t.Logf("switchyard_limits: %d requests over %d instances", reqs, len(instances))
	if reqs != int64(admitted) || len(instances) != planProxies {
		t.Errorf("switchyard_limits counts %d requests of team over instances %v, want %d over %d",
			reqs, instances, admitted, planProxies)
	}
}

// refusal is a 429 the load got.
type refusal struct {
	what           string
	sent, answered time.Time
	retryAfter     int // seconds
}

// checkRateLimited checks a 429 of the plan's requests per minute (code
// rate_limited, the limit and the plan named) and returns its
// Retry-After, which must be whole seconds.
func checkRateLimited(t *testing.T, what string, h http.Header, body []byte) int {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%s: 429 body %s: %v", what, body, err)
	}
	if e.Error.Code != "rate_limited" || !strings.Contains(e.Error.Message, "requests_per_minute") ||
		!strings.Contains(e.Error.Message, `plan "small"`) {
		t.Errorf("%s: 429 %s, want code rate_limited naming requests_per_minute and plan \"small\"", what, body)
	}
	ra, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil {
		t.Errorf("%s: 429 with Retry-After %q, want seconds", what, h.Get("Retry-After"))
	}
	return ra
}

// usageMsg is one usage record as read from the stream, with its
// message's subject and id.
type usageMsg struct {
	subject, msgID string
	rec            usage.Record
}

// readUsage reads SWITCHYARD_USAGE from its start with an ordered
// consumer until it has want records (or 15 s passed).
func readUsage(ctx context.Context, t *testing.T, js jetstream.JetStream, want int) []usageMsg {
	t.Helper()
	stream, err := js.Stream(ctx, bus.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []usageMsg
	testkit.CheckFor(t, 15*time.Second, time.Millisecond, func() error {
		batch, err := cons.Fetch(planRequests, jetstream.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			// a message holds the records of a batch that share a
			// subject, one JSON record per line
			for line := range bytes.Lines(m.Data()) {
				u := usageMsg{subject: m.Subject(), msgID: m.Headers().Get(nats.MsgIdHdr)}
				if err := json.Unmarshal(line, &u.rec); err != nil {
					t.Fatalf("usage record on %s: %v: %s", m.Subject(), err, line)
				}
				out = append(out, u)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		if len(out) < want {
			return fmt.Errorf("%d of %d usage records", len(out), want)
		}
		return nil
	})
	return out
}

// fleetRequests adds up the request counters of client in
// switchyard_limits (<client>.req.m<minute>.<instance>: the instance's
// total of the minute) and returns the instances that wrote them.
func fleetRequests(ctx context.Context, t *testing.T, js jetstream.JetStream, client string) (int64, map[string]int64) {
	t.Helper()
	kv, err := js.KeyValue(ctx, bus.BucketLimits)
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kv.ListKeysFiltered(ctx, client+".req.>")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	instances := map[string]int64{}
	for key := range lister.Keys() {
		parts := strings.Split(key, ".")
		if len(parts) != 4 || !strings.HasPrefix(parts[2], "m") {
			t.Errorf("limits key %q is not <client>.req.m<minute>.<instance>", key)
			continue
		}
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		var v struct {
			V int   `json:"v"`
			N int64 `json:"n"`
		}
		if err := json.Unmarshal(e.Value(), &v); err != nil || v.V != 1 {
			t.Errorf("limits key %s: %s (%v)", key, e.Value(), err)
		}
		total += v.N
		instances[parts[3]] += v.N
	}
	return total, instances
}

// proxyProcess is a service command (the standalone proxy, the admin
// service) run as a child process.
type proxyProcess struct {
	name    string
	url     string
	cmd     *exec.Cmd
	out     testkit.SyncBuffer
	done    chan struct{} // closed once the process exited; err is then its exit
	err     error
	once    sync.Once
	stopErr error
}

// startProxyProcess runs bin -config cfgPath on a free port (from
// SWITCHYARD_PROXY_LISTEN) with env added to an environment without this
// process's SWITCHYARD_ variables (an unknown one fails the load, e.g.
// SWITCHYARD_LONG_TESTS). The process is stopped when the test ends, and
// its output (warnings and errors) logged if the test failed or runs with
// -v.
func startProxyProcess(t *testing.T, bin, name, cfgPath string, env ...string) *proxyProcess {
	t.Helper()
	return startServiceProcess(t, bin, name, cfgPath, "SWITCHYARD_PROXY_LISTEN", env...)
}

// startServiceProcess is startProxyProcess for any service command: its
// listener on a free port from the variable listenVar
// (SWITCHYARD_ADMIN_LISTEN for the admin service).
func startServiceProcess(t *testing.T, bin, name, cfgPath, listenVar string, env ...string) *proxyProcess {
	t.Helper()
	addr := testkit.FreeAddr(t)
	p := &proxyProcess{name: name, url: "http://" + addr, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "-config", cfgPath)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SWITCHYARD_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(append(p.cmd.Env, listenVar+"="+addr), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if out := p.out.String(); t.Failed() || (testing.Verbose() && out != "") {
			t.Logf("%s output:\n%s", name, out)
		}
	})
	return p
}

// stop sends SIGTERM and waits for the graceful exit (up to 15 s, then
// SIGKILL). It returns an error unless the process exited with status 0
// (a race the detector found in it exits 66).
func (p *proxyProcess) stop() error {
	p.once.Do(func() {
		select {
		case <-p.done:
			p.stopErr = fmt.Errorf("exited before it was stopped: %v", p.err)
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			if p.err != nil {
				p.stopErr = fmt.Errorf("exit after SIGTERM: %v", p.err)
			}
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			p.stopErr = errors.New("still running 15 s after SIGTERM: killed")
		}
	})
	return p.stopErr
}

// kill ends the process with SIGKILL (a crash: nothing it did not write
// yet survives) and waits for it; stop then reports nothing.
func (p *proxyProcess) kill() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
}

// awaitReady polls GET /readyz until it answers 200. A proxy accepts
// connections only once the fleet's holds have loaded, so a poll may
// wait in the listen backlog: each has a short timeout.
func (p *proxyProcess) awaitReady(t *testing.T, client *http.Client, total time.Duration) {
	t.Helper()
	testkit.CheckFor(t, total, 20*time.Millisecond, func() error {
		select {
		case <-p.done:
			t.Fatalf("%s exited: %v\n%s", p.name, p.err, p.out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s/readyz: %d %s", p.url, resp.StatusCode, b)
		}
		return nil
	})
}

// chat sends one chat completion with the gateway key and returns the
// answer.
func (p *proxyProcess) chat(t *testing.T, client *http.Client, key string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"demo-model","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", p.url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read: %v", p.url, err)
	}
	return resp.StatusCode, resp.Header, body
}
