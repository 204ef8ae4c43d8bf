package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"switchyard.dev/shared/natsembed"
	"switchyard.dev/tools/fakeprovider"
)

// Keys of the bench's setup. The upstream accepts only upstreamKeys; the
// proxy requires clientKey.
var upstreamKeys = [2]string{"sk-bench-upstream-1", "sk-bench-upstream-2"}

const (
	clientKey  = "sk-bench-client"
	benchChain = "bench"
	upModel    = "bench-model"
)

// options are the bench's settings (see flags in main.go).
type options struct {
	Duration   time.Duration `json:"duration_ns"`
	Warmup     time.Duration `json:"warmup_ns"`
	Rounds     int           `json:"rounds"` // interleaved turns per cell
	Modes      []modeSpec    `json:"modes"`
	Streams    []bool        `json:"streams"`
	Targets    []string      `json:"targets"`
	Latency    time.Duration `json:"upstream_latency_ns"`
	Chunks     int           `json:"upstream_chunks"`
	Proxy      string        `json:"proxy"`                    // auto, binary, harness
	Upstream   string        `json:"upstream"`                 // binary, harness
	CPUProfile string        `json:"-"`                        // proxy CPU profile (harness)
	Baseline   string        `json:"baseline_proxy,omitempty"` // prebuilt proxy binary: target switchyard-base
	Peers      []string      `json:"peers,omitempty"`          // other gateways (peers.go)
	Wasted     int           `json:"wasted,omitempty"`         // requests per phase of the wasted-calls mode (wasted.go); 0: off
	Fanout     int           `json:"fanout,omitempty"`         // streams opened at once in the fan-out mode (fanout.go); 0: off
	Perf       bool          `json:"perf,omitempty"`           // split each process's CPU with perf (perf.go)
	Out        string        `json:"-"`
	Progress   io.Writer     `json:"-"`
}

// env is the processes under test.
type env struct {
	upstream, proxy, floor *child
	floorNet               *child // only with the floor-nethttp target
	floorFast              *child // only with the floor-fasthttp target
	baseline               *child // only with -baseline-proxy
	metered                *child // only with the switchyard-metered target
	debug                  *child // only with the switchyard-debug target
	otel                   *child // only with the switchyard-otel target
	sink                   *otlpSink
	proxyKind              string // binary or harness
	// How a proxy process of this run is started (bin with args(config)),
	// and the private NATS server's URL it connects to ("" for the harness).
	proxyBin  string
	proxyArgs func(cfg string) []string
	natsURL   string
	targets   map[string]target
	stop      func()

	peers map[string]*child // the -peers, by name
}

// setup starts the upstream, the proxy and the floor, each in its own
// process, in dir.
func setup(ctx context.Context, o options, root, dir string) (_ *env, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	e := &env{targets: map[string]target{}}
	var stops []func()
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			for i := len(stops) - 1; i >= 0; i-- {
				stops[i]()
			}
		})
	}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()

	// The upstream: the fake provider.
	upAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	switch o.Upstream {
	case "binary":
		bin, err := goBuild(ctx, root, "./tools/cmd/fakeprovider", dir, "fakeprovider")
		if err != nil {
			return nil, err
		}
		cfg := filepath.Join(dir, "fakeprovider.yaml")
		// Its rate limiter states every answer's windows as a real
		// provider does (x-ratelimit-*), far above anything the bench
		// offers: the proxies read them on every answer.
		body := fmt.Sprintf("name: bench-upstream\nlatency: %q\nchunks: %d\nmax_calls: 1024\nkeys: [%s, %s]\n"+
			"rate_limit: {requests: %d, tokens: %d, window: 1m}\n",
			o.Latency, o.Chunks, upstreamKeys[0], upstreamKeys[1], benchRateLimit.Requests, benchRateLimit.Tokens)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			return nil, fmt.Errorf("write upstream config: %w", err)
		}
		e.upstream, err = startChild(ctx, "upstream", upAddr, bin, []string{"-config", cfg, "-listen", upAddr}, nil)
		if err != nil {
			return nil, err
		}
	default:
		e.upstream, err = startChild(ctx, "upstream", upAddr, self, []string{"-upstream-listen", upAddr,
			"-latency", o.Latency.String(), "-chunks", strconv.Itoa(o.Chunks)}, nil)
		if err != nil {
			return nil, err
		}
	}
	stops = append(stops, e.upstream.stop)
	upstreamURL := "http://" + upAddr + "/v1"
	e.targets["direct"] = target{Name: "direct", Addr: upAddr, Auth: "Bearer " + upstreamKeys[0]}

	// Switchyard.
	proxyAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	e.proxyKind = o.Proxy
	if e.proxyKind == "auto" {
		e.proxyKind = "harness"
		if hasMain(filepath.Join(root, "services/proxy/cmd/proxy")) && o.CPUProfile == "" {
			e.proxyKind = "binary"
		}
	}
	if e.proxyKind != "binary" && slices.Contains(o.Targets, "switchyard-debug") {
		return nil, errors.New("target switchyard-debug needs -proxy=binary: bundles are published to NATS, which the harness proxy has no connection to")
	}
	natsURL := ""
	if e.proxyKind == "binary" || o.Baseline != "" {
		// The proxy's main may want NATS; give it a private server.
		ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "nats"), ServerName: "bench"})
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() { natsembed.Stop(ns) })
		natsURL = ns.ClientURL()
	}
	cfgPath := filepath.Join(dir, "switchyard.yaml")
	if err := os.WriteFile(cfgPath, []byte(proxyConfig(proxyAddr, upstreamURL, natsURL, dir, proxyFeatures{})), 0o600); err != nil {
		return nil, fmt.Errorf("write proxy config: %w", err)
	}
	proxyEnv := []string{
		"BENCH_UPSTREAM_KEY_1=" + upstreamKeys[0],
		"BENCH_UPSTREAM_KEY_2=" + upstreamKeys[1],
		"BENCH_CLIENT_KEY=" + clientKey,
	}
	proxyBin, proxyArgs := self, func(cfg string) []string { return []string{"-proxy-config", cfg} }
	if e.proxyKind == "binary" {
		if proxyBin, err = goBuild(ctx, root, "./services/proxy/cmd/proxy", dir, "switchyard-proxy"); err != nil {
			return nil, err
		}
		proxyArgs = func(cfg string) []string { return []string{"-config", cfg} }
	}
	e.proxyBin, e.proxyArgs, e.natsURL = proxyBin, proxyArgs, natsURL
	args := proxyArgs(cfgPath)
	if e.proxyKind != "binary" && o.CPUProfile != "" {
		args = append(args, "-child-cpuprofile", o.CPUProfile)
	}
	if e.proxy, err = startChild(ctx, "switchyard", proxyAddr, proxyBin, args, proxyEnv); err != nil {
		return nil, err
	}
	stops = append(stops, e.proxy.stop)
	e.targets["switchyard"] = target{Name: "switchyard", Addr: proxyAddr, Auth: "Bearer " + clientKey, Proc: e.proxy}

	// The same proxy with one feature on, each on its own port and, with
	// NATS, its own NATS server: proxies on one NATS follow the fleet's
	// routing configuration, which the first to start imports from its
	// file, so a feature set in a routing key (a plan, a cache policy,
	// routing.headroom) would otherwise be the first proxy's.
	variant := func(name string, f proxyFeatures, env []string) (*child, error) {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		url := natsURL
		if url != "" {
			ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "nats-"+name), ServerName: name})
			if err != nil {
				return nil, err
			}
			stops = append(stops, func() { natsembed.Stop(ns) })
			url = ns.ClientURL()
		}
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(proxyConfig(addr, upstreamURL, url, dir, f)), 0o600); err != nil {
			return nil, fmt.Errorf("write %s config: %w", name, err)
		}
		c, err := startChild(ctx, name, addr, proxyBin, proxyArgs(path), append(slices.Clip(proxyEnv), env...))
		if err != nil {
			return nil, err
		}
		stops = append(stops, c.stop)
		e.targets[name] = target{Name: name, Addr: addr, Auth: "Bearer " + clientKey, Proc: c}
		return c, nil
	}
	if slices.Contains(o.Targets, "switchyard-metered") {
		// Usage records published and the client on a plan.
		if e.metered, err = variant("switchyard-metered", proxyFeatures{Metered: true}, nil); err != nil {
			return nil, err
		}
	}
	if slices.Contains(o.Targets, "switchyard-headroom-off") {
		// The same proxy without headroom routing: it reads no
		// rate-limit header and charges no window.
		if _, err = variant("switchyard-headroom-off", proxyFeatures{NoHeadroom: true}, nil); err != nil {
			return nil, err
		}
	}
	if slices.Contains(o.Targets, "switchyard-cache") {
		// The client's answers cached: the bench asks one question, so
		// every request after the first is a hit from the proxy's memory
		// (a stream one a replay).
		if _, err = variant("switchyard-cache", proxyFeatures{Cache: true}, nil); err != nil {
			return nil, err
		}
	}
	if slices.Contains(o.Targets, "switchyard-debug") {
		// A bundle for every request, published to the private NATS server.
		if e.debug, err = variant("switchyard-debug", proxyFeatures{Debug: true}, nil); err != nil {
			return nil, err
		}
	}
	if slices.Contains(o.Targets, "switchyard-otel") {
		// Every request exported as a trace, to a sink in this process.
		if e.sink, err = startOTLPSink(); err != nil {
			return nil, err
		}
		stops = append(stops, e.sink.stop) // after the proxy's: it flushes its last spans at exit
		if e.otel, err = variant("switchyard-otel", proxyFeatures{OTel: true},
			[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + e.sink.addr}); err != nil {
			return nil, err
		}
	}

	if o.Baseline != "" {
		// The same configuration on its own port, served by the prebuilt
		// binary. A binary older than debug bundles and trace export does
		// not know their keys (it has neither): then it gets the config
		// without them.
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "switchyard-base.yaml")
		start := func(f proxyFeatures) (*child, error) {
			if err := os.WriteFile(path, []byte(proxyConfig(addr, upstreamURL, natsURL, dir, f)), 0o600); err != nil {
				return nil, fmt.Errorf("write baseline proxy config: %w", err)
			}
			return startChild(ctx, "switchyard-base", addr, o.Baseline, []string{"-config", path}, proxyEnv)
		}
		e.baseline, err = start(proxyFeatures{})
		if err != nil && strings.Contains(err.Error(), "unknown key") {
			progress(o, "switchyard-base rejects the debug or telemetry keys; starting it without them\n")
			e.baseline, err = start(proxyFeatures{Legacy: true})
		}
		if err != nil {
			return nil, err
		}
		stops = append(stops, e.baseline.stop)
		e.targets["switchyard-base"] = target{Name: "switchyard-base", Addr: addr, Auth: "Bearer " + clientKey, Proc: e.baseline}
	}

	// The floors: fiber (always), bare fasthttp and net/http's client when
	// asked for.
	startFloor := func(name, client string) (*child, error) {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args := []string{"-floor-listen", addr, "-floor-upstream", upstreamURL, "-floor-key", upstreamKeys[0], "-floor-client", client}
		if o.CPUProfile != "" && client != "nethttp" {
			args = append(args, "-child-cpuprofile", o.CPUProfile+strings.TrimPrefix(name, "floor")+".floor")
		}
		c, err := startChild(ctx, name, addr, self, args, nil)
		if err != nil {
			return nil, err
		}
		stops = append(stops, c.stop)
		e.targets[name] = target{Name: name, Addr: addr, Auth: "Bearer " + clientKey, Proc: c}
		return c, nil
	}
	if e.floor, err = startFloor("floor", "fasthttp"); err != nil {
		return nil, err
	}
	if slices.Contains(o.Targets, "floor-fasthttp") {
		if e.floorFast, err = startFloor("floor-fasthttp", "bare"); err != nil {
			return nil, err
		}
	}
	if slices.Contains(o.Targets, "floor-nethttp") {
		if e.floorNet, err = startFloor("floor-nethttp", "nethttp"); err != nil {
			return nil, err
		}
	}

	peers, peerTargets, err := startPeers(ctx, o, dir, upstreamURL)
	if err != nil {
		return nil, err
	}
	for name, c := range peers {
		stops = append(stops, c.stop)
		e.targets[name] = peerTargets[name]
	}
	e.peers = peers
	return e, nil
}

// proxyFeatures are the features a proxy target has on; none for
// switchyard itself.
type proxyFeatures struct {
	Metered bool // usage records and a plan
	Debug   bool // a debug bundle for every request
	OTel    bool // traces exported over OTLP (the endpoint comes from the environment)
	// NoHeadroom turns headroom routing off (routing.headroom.enabled).
	NoHeadroom bool
	// Cache keeps the client's answers (clients[].cache): every request
	// after the first of its kind is a hit.
	Cache bool
	// Legacy leaves out the debug, telemetry and routing sections, for a
	// baseline binary older than them.
	Legacy bool
}

// benchRateLimit is the fake upstream's rate limit: far above anything the
// bench offers, so that it refuses nothing and its answers carry the
// x-ratelimit-* headers real providers send.
var benchRateLimit = fakeprovider.RateLimit{Requests: 1 << 40, Tokens: 1 << 50, Window: time.Minute}

// proxyConfig is Switchyard's configuration for the bench: one OpenAI
// provider (the upstream) with two keys, a one-step chain, one gateway
// key, warn-level logs, and an in-flight limit above anything the bench
// offers (the default 100 would turn the open-loop backlog into 503s).
// Metering, debug bundles and trace export are off unless f turns one on.
// Metered: usage records are published (a price makes each carry a cost)
// and the client is on a plan with every limit set, above anything the
// bench offers, so each request is checked against all of them. Debug: a
// bundle for every request (sample_successes 1), published to NATS. OTel:
// telemetry.traces otlp (otherwise none, whatever OTEL_TRACES_EXPORTER
// the bench's environment has).
func proxyConfig(listen, upstreamURL, natsURL, dir string, f proxyFeatures) string {
	metering := "metering:\n  enabled: false\n"
	plan, cache := "", ""
	if f.Cache {
		cache = "    cache: {ttl: 1h}\n"
	}
	if f.Metered {
		metering = fmt.Sprintf(`metering:
  enabled: true
plans:
  bench:
    requests_per_minute: 1000000000
    tokens_per_minute: 1000000000000
    concurrent_requests: 1000000
    budget: {day: 1000000000, week: 1000000000, month: 1000000000}
prices:
  - provider: upstream
    model: %s
    input: 2.5
    output: 10
`, upModel)
		plan = "    plan: bench\n"
	}
	if !f.Legacy {
		if f.Debug {
			metering += "debug:\n  enabled: true\n  sample_successes: 1\n"
		} else {
			metering += "debug:\n  enabled: false\n"
		}
		if f.OTel {
			metering += "telemetry:\n  traces: otlp\n"
		} else {
			metering += "telemetry:\n  traces: none\n"
		}
		if f.NoHeadroom {
			metering += "routing:\n  headroom:\n    enabled: false\n"
		}
	}
	return metering + proxyProcess(listen, natsURL, filepath.Join(dir, "nats-unused")) + fmt.Sprintf(`providers:
  - name: upstream
    type: openai
    base_url: %s
    keys:
      - id: k1
        secret: env:BENCH_UPSTREAM_KEY_1
      - id: k2
        secret: env:BENCH_UPSTREAM_KEY_2
    models:
      - name: %s
chains:
  %s:
    steps:
      - target: upstream/%s
clients:
  - id: bench
    secret: env:BENCH_CLIENT_KEY
    models: ["*"]
`, upstreamURL, upModel, benchChain, upModel) + plan + cache
}

// proxyProcess is the part of a bench proxy's configuration that is about
// the process: warn-level JSON logs, NATS at natsURL (the embedded
// server's settings unused), the listeners (only the proxy's on a known
// address), and an in-flight limit above anything the bench offers.
func proxyProcess(listen, natsURL, storeDir string) string {
	return fmt.Sprintf(`log:
  level: warn
  format: json
nats:
  url: %q
  embedded:
    listen: 127.0.0.1:0
    store_dir: %q
proxy:
  listen: %s
admin:
  listen: 127.0.0.1:0
prober:
  listen: 127.0.0.1:0
limits:
  max_in_flight: 4096
`, natsURL, storeDir, listen)
}

// report is everything one run measured.
type report struct {
	Started   time.Time    `json:"started"`
	GoVersion string       `json:"go_version"`
	CPUs      int          `json:"cpus"`
	ProxyKind string       `json:"proxy_process"` // binary or harness
	Options   options      `json:"options"`
	Cells     []cellResult `json:"cells"`
	Memory    []memSample  `json:"memory"`
	Compare   []comparison `json:"comparisons"`
	Checks    []check      `json:"checks"`
	// DebugBundles is switchyard-debug's switchyard_debug_bundles_total by
	// result at the end of the run; OTLPSink what switchyard-otel exported.
	DebugBundles map[string]float64 `json:"debug_bundles,omitempty"`
	OTLPSink     *sinkStats         `json:"otlp_sink,omitempty"`
	Wasted       *wastedReport      `json:"wasted_calls,omitempty"` // -wasted
	Fanout       []fanoutResult     `json:"fanout,omitempty"`       // -fanout
}

type memSample struct {
	After   string `json:"after_mode"`
	Process string `json:"process"`
	memory
}

// runBench measures every target in every mode and kind.
func runBench(ctx context.Context, o options) (*report, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "switchyard-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	progress(o, "starting upstream, switchyard and floor (building binaries)...\n")
	e, err := setup(ctx, o, root, dir)
	if err != nil {
		return nil, err
	}
	defer e.stop()

	rep := &report{Started: time.Now().UTC(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), ProxyKind: e.proxyKind, Options: o}
	ts := make([]target, len(o.Targets))
	for i, name := range o.Targets {
		ts[i] = e.targets[name]
	}
	bodyOf := func(stream bool) func(t target) []byte {
		return func(t target) []byte {
			if t.Name == "direct" {
				return chatBody(upModel, stream)
			}
			if t.Model != "" {
				return chatBody(t.Model, stream)
			}
			return chatBody("chain:"+benchChain, stream)
		}
	}
	for _, m := range o.Modes {
		for _, stream := range o.Streams {
			body := bodyOf(stream)
			perfDir := ""
			if o.Perf {
				perfDir = dir
			}
			cells, err := measure(ctx, modeTargets(o, ts, m), m, stream, body, o.Warmup, o.Duration, o.Rounds, perfDir)
			if err != nil {
				return nil, err
			}
			for _, c := range cells {
				cpu := ""
				if c.CPU != nil {
					cpu = fmt.Sprintf("  cpu %5.0fus/req", c.CPU.TotalUs)
				}
				progress(o, "  %-9s %-10s %-18s %8.0f req/s  p50 %7.0fus  p99 %7.0fus  errors %d%s\n",
					m.Name, kindName(stream), c.Target, c.Throughput, c.primary().P50, c.primary().P99, c.Errors, cpu)
			}
			rep.Cells = append(rep.Cells, cells...)
		}
		procs := []*child{e.proxy, e.metered, e.debug, e.otel, e.baseline, e.floor, e.floorFast, e.floorNet}
		if m.Kind != "open" { // peers are not measured in open-loop modes
			procs = append(procs, peerProcs(o, e)...)
		}
		for _, p := range procs {
			if p == nil {
				continue
			}
			mem, err := p.memory()
			if err != nil {
				return nil, err
			}
			rep.Memory = append(rep.Memory, memSample{After: m.Name, Process: p.name, memory: mem})
		}
	}
	if o.Fanout > 0 {
		if rep.Fanout, err = runFanout(ctx, o, e, bodyOf(true)); err != nil {
			return nil, err
		}
	}
	if o.Wasted > 0 {
		if rep.Wasted, err = runWasted(ctx, o, root, dir, e); err != nil {
			return nil, err
		}
	}
	rep.Compare = compare(rep.Cells)
	rep.Checks = checks(rep.Compare)
	if e.debug != nil {
		if rep.DebugBundles, err = scrapeCounter(ctx, e.debug.addr, "switchyard_debug_bundles_total", "result"); err != nil {
			progress(o, "switchyard-debug's metrics: %v\n", err)
		}
	}
	e.stop() // the OTel proxy exports its last spans as it stops
	if e.sink != nil {
		st := e.sink.stats()
		rep.OTLPSink = &st
	}
	return rep, nil
}

// modeTargets are the targets measured in mode m: every one, but peers
// only in closed-loop modes (seq, sat<N>). An open-loop rate a peer
// cannot sustain leaves it a backlog that it keeps serving (and sending
// upstream) into the next target's turn, which would then measure both.
func modeTargets(o options, ts []target, m modeSpec) []target {
	if m.Kind != "open" {
		return ts
	}
	out := make([]target, 0, len(ts))
	for _, t := range ts {
		if isPeer(t.Name) {
			progress(o, "  %-9s %s: not measured in open-loop modes (peers run in seq and sat<N>)\n", m.Name, t.Name)
			continue
		}
		out = append(out, t)
	}
	return out
}

func progress(o options, format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format, args...)
	}
}

func kindName(stream bool) string {
	if stream {
		return "stream"
	}
	return "nonstream"
}
