package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"
)

// The wasted-calls mode (-wasted N): each gateway is configured to fall
// back from a revoked key to a good one, both on one upstream of its own,
// and sent N sequential non-stream requests; the upstream counts the
// calls each key received. A gateway that remembers the rejection calls
// the revoked key about once; one that does not calls it for every
// request, and each such call is latency its client waits for.

// The wasted-calls upstream accepts only wastedGoodKey: wastedRevokedKey
// gets OpenAI's 401 invalid_api_key.
const (
	wastedRevokedKey = "sk-bench-revoked"
	wastedGoodKey    = "sk-bench-good"
	wastedChain      = "wasted" // revoked key's provider, then the good key's
	singleChain      = "single" // the good key's provider alone
)

// wastedPhase is N sequential requests to one target in one configuration,
// with the calls the upstream received while they ran.
type wastedPhase struct {
	Requests     int     `json:"requests"`
	OK           uint64  `json:"ok"`
	Errors       uint64  `json:"errors"`
	ErrorSample  string  `json:"error_sample,omitempty"`
	RevokedCalls int     `json:"revoked_key_calls"`
	GoodCalls    int     `json:"good_key_calls"`
	Latency      summary `json:"latency"`
}

// wastedTarget is one gateway in the wasted-calls mode: its fallback
// configuration (revoked key first, good key second) and the same gateway
// with the good key alone.
type wastedTarget struct {
	Target   string      `json:"target"`
	Fallback wastedPhase `json:"fallback"`
	Single   wastedPhase `json:"single"`
	// AddedP50 is the fallback configuration's p50 over direct's (the good
	// key, no gateway); WastedP50 over the same gateway's with the good
	// key alone: what the calls to the revoked key cost at the median.
	AddedP50  float64 `json:"added_p50_us"`
	WastedP50 float64 `json:"wasted_call_p50_us"`
}

// wastedReport is the wasted-calls mode's results.
type wastedReport struct {
	Requests int            `json:"requests_per_phase"`
	Direct   wastedPhase    `json:"direct"` // the good key, no gateway
	Targets  []wastedTarget `json:"targets"`
}

// wastedProxyConfig is Switchyard's configuration for the mode: two
// providers on the same upstream, "revoked" with the revoked key and
// "good" with the good key, chain wasted over both in that order and chain
// single over the good one alone; otherwise as proxyConfig's baseline
// (metering, debug bundles and traces off).
// featuresOff turns metering, debug bundles and trace export off.
const featuresOff = `metering:
  enabled: false
debug:
  enabled: false
telemetry:
  traces: none
`

func wastedProxyConfig(listen, upstreamURL, natsURL, dir string) string {
	return proxyProcess(listen, natsURL, filepath.Join(dir, "nats-wasted-unused")) + featuresOff + fmt.Sprintf(`providers:
  - name: revoked
    type: openai
    base_url: %[1]s
    keys:
      - id: r1
        secret: env:BENCH_WASTED_REVOKED_KEY
    models:
      - name: %[2]s
  - name: good
    type: openai
    base_url: %[1]s
    keys:
      - id: g1
        secret: env:BENCH_WASTED_GOOD_KEY
    models:
      - name: %[2]s
chains:
  %[3]s:
    steps:
      - target: revoked/%[2]s
      - target: good/%[2]s
  %[4]s:
    steps:
      - target: good/%[2]s
clients:
  - id: bench
    secret: env:BENCH_CLIENT_KEY
    models: ["*"]
`, upstreamURL, upModel, wastedChain, singleChain)
}

// wastedUpstreamConfig is the fake provider's configuration for the mode:
// the good key only, the run's latency and chunks, and a recorder that
// keeps every call of a phase (at most two per request).
func wastedUpstreamConfig(o options, n int) string {
	return fmt.Sprintf("name: bench-wasted\nlatency: %q\nchunks: %d\nmax_calls: %d\nkeys: [%s]\n",
		o.Latency, o.Chunks, 4*n+1024, wastedGoodKey)
}

// runWasted runs the wasted-calls mode: its own upstream (the fake
// provider binary), its own Switchyard process (the kind the run uses),
// and the run's peer processes (their configuration is per request).
func runWasted(ctx context.Context, o options, root, dir string, e *env) (_ *wastedReport, err error) {
	n := o.Wasted
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()

	// The upstream: always the binary, which takes keys and max_calls
	// from its config (setup built it unless -upstream=harness).
	upBin := filepath.Join(dir, "fakeprovider")
	if _, err := os.Stat(upBin); err != nil {
		if upBin, err = goBuild(ctx, root, "./tools/cmd/fakeprovider", dir, "fakeprovider"); err != nil {
			return nil, err
		}
	}
	upAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	upCfg := filepath.Join(dir, "fakeprovider-wasted.yaml")
	if err := os.WriteFile(upCfg, []byte(wastedUpstreamConfig(o, n)), 0o600); err != nil {
		return nil, fmt.Errorf("write wasted-calls upstream config: %w", err)
	}
	up, err := startChild(ctx, "wasted-upstream", upAddr, upBin, []string{"-config", upCfg, "-listen", upAddr}, nil)
	if err != nil {
		return nil, err
	}
	stops = append(stops, up.stop)
	upstreamURL := "http://" + upAddr + "/v1"

	// Switchyard, fresh: no key of it has been rejected yet.
	proxyAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// The run's proxy binary (or harness) and private NATS server: its
	// providers here (revoked, good) are its own, so no hold of the
	// latency cells' proxies concerns it.
	cfgPath := filepath.Join(dir, "switchyard-wasted.yaml")
	if err := os.WriteFile(cfgPath, []byte(wastedProxyConfig(proxyAddr, upstreamURL, e.natsURL, dir)), 0o600); err != nil {
		return nil, fmt.Errorf("write wasted-calls proxy config: %w", err)
	}
	proxy, err := startChild(ctx, "switchyard-wasted", proxyAddr, e.proxyBin, e.proxyArgs(cfgPath), []string{
		"BENCH_WASTED_REVOKED_KEY=" + wastedRevokedKey,
		"BENCH_WASTED_GOOD_KEY=" + wastedGoodKey,
		"BENCH_CLIENT_KEY=" + clientKey,
	})
	if err != nil {
		return nil, err
	}
	stops = append(stops, proxy.stop)

	calls := &callCounter{base: "http://" + upAddr}
	phase := func(name string, t target, model string) (wastedPhase, error) {
		p, err := runPhase(ctx, calls, t, model, n)
		if err != nil {
			return p, fmt.Errorf("wasted calls, %s: %w", name, err)
		}
		progress(o, "  wasted    %-24s %4d/%d ok  revoked-key calls %4d  good-key calls %4d  p50 %7.0fus\n",
			name, p.OK, p.Requests, p.RevokedCalls, p.GoodCalls, p.Latency.P50)
		return p, nil
	}
	rep := &wastedReport{Requests: n}
	if rep.Direct, err = phase("direct", target{Name: "direct", Addr: upAddr, Auth: "Bearer " + wastedGoodKey}, upModel); err != nil {
		return nil, err
	}
	add := func(name string, single, fallback target, singleModel, fallbackModel string) error {
		w := wastedTarget{Target: name}
		var err error
		// The single configuration first: it warms the process up without
		// touching the revoked key, so the fallback phase starts with the
		// rejection still to be seen.
		if w.Single, err = phase(name+" (good key)", single, singleModel); err != nil {
			return err
		}
		if w.Fallback, err = phase(name+" (fallback)", fallback, fallbackModel); err != nil {
			return err
		}
		w.AddedP50 = w.Fallback.Latency.P50 - rep.Direct.Latency.P50
		w.WastedP50 = w.Fallback.Latency.P50 - w.Single.Latency.P50
		rep.Targets = append(rep.Targets, w)
		return nil
	}
	sy := target{Name: "switchyard", Addr: proxyAddr, Auth: "Bearer " + clientKey, Proc: proxy}
	if err := add("switchyard", sy, sy, "chain:"+singleChain, "chain:"+wastedChain); err != nil {
		return nil, err
	}
	for _, p := range o.Peers {
		c := e.peers[p]
		if c == nil {
			return nil, fmt.Errorf("wasted calls: peer %s is not running", p)
		}
		if err := add(p, peers[p].single(c, upstreamURL, wastedGoodKey),
			peers[p].fallback(c, upstreamURL, wastedRevokedKey, wastedGoodKey), upModel, upModel); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// runPhase forgets the upstream's calls, sends n sequential non-stream
// requests to t (no warmup), and counts the calls each key received.
func runPhase(ctx context.Context, calls *callCounter, t target, model string, n int) (wastedPhase, error) {
	if err := calls.reset(ctx); err != nil {
		return wastedPhase{}, err
	}
	l := newLoader(t, 1, false, chatBody(model, false))
	defer l.hc.CloseIdleConnections()
	buf := make([]byte, 0, 4<<10)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		l.one(time.Now(), &buf)
	}
	if err := ctx.Err(); err != nil {
		return wastedPhase{}, err
	}
	p := wastedPhase{Requests: n, OK: l.ok.Load(), Errors: l.errs.Load(), ErrorSample: l.errSample, Latency: l.total.Summary()}
	var err error
	if p.RevokedCalls, err = calls.count(ctx, wastedRevokedKey); err != nil {
		return p, err
	}
	if p.GoodCalls, err = calls.count(ctx, wastedGoodKey); err != nil {
		return p, err
	}
	return p, nil
}

// callCounter reads the fake provider's call recorder (/_fake/calls).
type callCounter struct {
	base string // http://host:port
}

func (c *callCounter) do(ctx context.Context, method, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Close = true // a few calls per phase: no idle connection left behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("upstream calls: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("upstream calls: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("upstream calls: %s %s: status %d: %.200s", method, path, resp.StatusCode, b)
	}
	return b, nil
}

func (c *callCounter) reset(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodDelete, "/_fake/calls")
	return err
}

// count is how many recorded calls carried key.
func (c *callCounter) count(ctx context.Context, key string) (int, error) {
	b, err := c.do(ctx, http.MethodGet, "/_fake/calls?key="+key)
	if err != nil {
		return 0, err
	}
	var calls []struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(b, &calls); err != nil {
		return 0, fmt.Errorf("upstream calls: %w", err)
	}
	n := 0
	for _, call := range calls {
		if call.Key == key {
			n++
		}
	}
	return n, nil
}

// printWasted writes the wasted-calls table.
func printWasted(w io.Writer, r *wastedReport) error {
	fmt.Fprintf(w, "\nWasted calls: %d sequential non-stream requests per row, each gateway configured to fall back from a revoked key\n", r.Requests)
	fmt.Fprintf(w, "(OpenAI's 401 invalid_api_key) to a good one on the same upstream; calls counted by the upstream; latencies in us;\n")
	fmt.Fprintf(w, "added = p50 over direct's with the good key; wasted-call p50 = p50 over the same gateway's with the good key alone\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tconfig\trequests\tok\terrors\trevoked-key calls\tgood-key calls\tp50\tp99\tadded p50\twasted-call p50\t")
	row := func(name, cfg string, p wastedPhase, added, wasted string) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n", name, cfg, p.Requests, p.OK, p.Errors,
			p.RevokedCalls, p.GoodCalls, f0(p.Latency.P50), f0(p.Latency.P99), added, wasted)
	}
	row("direct", "good key", r.Direct, "-", "-")
	for _, t := range r.Targets {
		row(t.Target, "good key", t.Single, signed(t.Single.Latency.P50-r.Direct.Latency.P50), "-")
		row(t.Target, "fallback", t.Fallback, signed(t.AddedP50), signed(t.WastedP50))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, t := range r.Targets {
		for _, p := range []struct {
			cfg string
			ph  wastedPhase
		}{{"good key", t.Single}, {"fallback", t.Fallback}} {
			if p.ph.ErrorSample != "" {
				fmt.Fprintf(w, "first error of wasted calls %s %s: %s\n", t.Target, p.cfg, p.ph.ErrorSample)
			}
		}
	}
	if r.Direct.ErrorSample != "" {
		fmt.Fprintf(w, "first error of wasted calls direct: %s\n", r.Direct.ErrorSample)
	}
	return nil
}
