// Command bench measures what Switchyard's proxy adds to an LLM call: the
// fake provider (upstream), the proxy and a bare fiber pass-through (the
// floor) run as separate processes, and a load generator in this process
// measures direct, switchyard and floor side by side. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"switchyard.dev/tools/fakeprovider"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run parses args and runs the bench, or one of its helper processes when
// a hidden child flag is set.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 5*time.Second, "measured time per cell (mode x kind x target)")
	warmup := fs.Duration("warmup", time.Second, "warmup before each cell, same load, not recorded")
	rounds := fs.Int("rounds", 3, "interleaved turns per cell: each target measured for duration/rounds per turn, the order rotating each round")
	short := fs.Bool("short", false, "1 s cells after a 250 ms warmup (overrides -duration and -warmup)")
	modes := fs.String("modes", "seq,rate2000,rate5000,sat64", "comma-separated modes: seq, rate<N> (N requests/s, open loop), sat<N> (N connections, closed loop)")
	kinds := fs.String("kinds", "nonstream,stream", "comma-separated request kinds: nonstream, stream")
	targets := fs.String("targets", "direct,switchyard,switchyard-metered,floor", "comma-separated targets: direct, switchyard (metering, debug bundles and traces off, no plan), switchyard-metered (usage records published and a plan's limits checked), switchyard-debug (a debug bundle for every request, published to NATS; needs the proxy binary), switchyard-otel (every request exported as an OTLP trace to a sink in the bench), switchyard-headroom-off (headroom routing off: the rate-limit headers unread), switchyard-cache (the client's answers cached: every request after the first a hit), floor, and floor-nethttp (the floor with net/http's client, for diagnosis)")
	workers := fs.Int("workers", 256, "open loop: most requests in flight at once")
	latency := fs.Duration("latency", time.Millisecond, "upstream first-byte latency")
	chunks := fs.Int("chunks", 5, "upstream content chunks per stream (no delay between them)")
	proxyKind := fs.String("proxy", "auto", "how to run Switchyard: binary (services/proxy/cmd/proxy), harness (proxy.New in a child of this binary), auto (binary when it exists)")
	upstreamKind := fs.String("upstream", "binary", "how to run the fake provider: binary (tools/cmd/fakeprovider) or harness (a child of this binary)")
	baseline := fs.String("baseline-proxy", "", "a prebuilt proxy binary (say, of an earlier commit) measured as target switchyard-base, side by side with the current one")
	peers := fs.String("peers", "", "comma-separated peer gateways, measured as targets of their own name: portkey (npm @portkey-ai/gateway, installed on demand under the user cache directory; needs node and npm)")
	fanoutN := fs.Int("fanout", 0, "after the latency cells, the fan-out mode: N slow streams opened at once through each target, timing the last caller's first bytes and counting the proxy's goroutines per open stream (0: off)")
	wasted := fs.Int("wasted", 0, "after the latency cells, the wasted-calls mode: N sequential requests per gateway (switchyard and each peer) configured to fall back from a revoked key to a good one, counting the revoked key's upstream calls (0: off)")
	perf := fs.Bool("perf", false, "sample each target's process with Linux perf during its last turn of each cell, and split its CPU per request by where it is spent: the handler's own work, the upstream exchange, the server, a stream's body writer, GC, the scheduler (needs perf: Debian's linux-perf)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the proxy to this file, and one of the floor to this file + .floor (implies -proxy=harness)")
	out := fs.String("out", "tools/bench/results/latest.json", "JSON results file (relative to the repo root; the hold-plane mode writes holdplane.json beside it)")
	holdPlane := fs.String("holdplane", "", "the hold-plane mode instead of the latency cells: comma-separated numbers of holds present (e.g. 200,10000,100000), each preloaded into a fresh NATS, then -holdplane-pins operator pins through the admin API of an all-in-one gateway, with two standalone proxies' propagation histograms read before and after (see README.md)")
	holdPins := fs.Int("holdplane-pins", 200, "hold-plane mode: pins timed per number of holds present")
	holdRounds := fs.Int("holdplane-rounds", 3, "hold-plane mode: rounds of -holdplane-pins pins per number of holds present; the median round is reported")
	holdCluster := fs.Bool("holdplane-cluster", false, "hold-plane mode: a 3-node NATS cluster with R3 buckets instead of one server")
	holdPerf := fs.String("holdplane-perf", "", "hold-plane mode: record each process (all-in-one, proxies) with Linux perf during the pins into this directory (<process>-<holds>.perf.data)")
	// Hidden: the helper processes.
	floorListen := fs.String("floor-listen", "", "")
	floorUpstream := fs.String("floor-upstream", "", "")
	floorKey := fs.String("floor-key", "", "")
	floorClient := fs.String("floor-client", "fasthttp", "")
	proxyConfig := fs.String("proxy-config", "", "")
	upstreamListen := fs.String("upstream-listen", "", "")
	childProfile := fs.String("child-cpuprofile", "", "")
	natsChild := fs.String("holdplane-nats", "", "")
	natsSize := fs.Int("holdplane-nats-size", 1, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}

	switch {
	case *natsChild != "":
		return serveNATSChild(ctx, *natsChild, *natsSize)
	case *holdPlane != "":
		return holdPlaneMain(ctx, *holdPlane, *holdPins, *holdRounds, *holdCluster, *holdPerf, *out, stdout, stderr)
	case *floorListen != "" && *floorClient == "nethttp":
		return serveFloorNetHTTP(ctx, *floorListen, *floorUpstream, *floorKey)
	case *floorListen != "":
		return serveFloor(ctx, *floorListen, *floorUpstream, *floorKey, *childProfile, *floorClient == "bare")
	case *proxyConfig != "":
		return serveProxyHarness(ctx, *proxyConfig, *childProfile)
	case *upstreamListen != "":
		return serveUpstreamHarness(ctx, fakeprovider.Options{
			Name: "bench-upstream", Addr: *upstreamListen, Latency: *latency, Chunks: *chunks,
			MaxCalls: 1024, Keys: upstreamKeys[:], RateLimit: benchRateLimit,
		})
	}

	o := options{
		Duration: *duration, Warmup: *warmup, Rounds: *rounds, Latency: *latency, Chunks: *chunks,
		Proxy: *proxyKind, Upstream: *upstreamKind, Progress: stderr, Wasted: *wasted, Perf: *perf, Fanout: *fanoutN,
	}
	var err error
	if o.Peers, err = parsePeers(*peers); err != nil {
		return err
	}
	if o.Wasted < 0 {
		return errors.New("-wasted must be >= 0")
	}
	if *baseline != "" {
		p, err := filepath.Abs(*baseline)
		if err != nil {
			return err
		}
		o.Baseline = p
	}
	if o.Perf {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		if err := perfReady(self, o.Baseline); err != nil {
			return err
		}
	}
	if *short {
		o.Duration, o.Warmup = time.Second, 250*time.Millisecond
	}
	if o.Duration <= 0 || o.Rounds <= 0 || o.Warmup < 0 || *workers <= 0 || *chunks <= 0 || *latency < 0 {
		return errors.New("-duration, -rounds, -workers and -chunks must be > 0; -warmup and -latency >= 0")
	}
	for _, m := range splitList(*modes) {
		spec, err := parseMode(m, *workers)
		if err != nil {
			return err
		}
		o.Modes = append(o.Modes, spec)
	}
	for _, k := range splitList(*kinds) {
		switch k {
		case "nonstream":
			o.Streams = append(o.Streams, false)
		case "stream":
			o.Streams = append(o.Streams, true)
		default:
			return fmt.Errorf("unknown kind %q (want nonstream or stream)", k)
		}
	}
	for _, t := range splitList(*targets) {
		if isPeer(t) { // a peer, started as with -peers
			if !slices.Contains(o.Peers, t) {
				o.Peers = append(o.Peers, t)
			}
			o.Targets = append(o.Targets, t)
			continue
		}
		switch t {
		case "direct", "switchyard", "switchyard-metered", "switchyard-debug", "switchyard-otel", "switchyard-headroom-off", "switchyard-cache", "floor", "floor-fasthttp", "floor-nethttp":
		case "switchyard-base":
			if o.Baseline == "" {
				return errors.New("target switchyard-base needs -baseline-proxy")
			}
		default:
			return fmt.Errorf("unknown target %q (want direct, switchyard, switchyard-metered, switchyard-debug, switchyard-otel, switchyard-headroom-off, switchyard-cache, switchyard-base, floor, floor-nethttp or a peer: %s)", t, strings.Join(knownPeers, ", "))
		}
		o.Targets = append(o.Targets, t)
	}
	switch o.Proxy {
	case "auto", "binary", "harness":
	default:
		return fmt.Errorf("-proxy: want auto, binary or harness, got %q", o.Proxy)
	}
	if o.Upstream != "binary" && o.Upstream != "harness" {
		return fmt.Errorf("-upstream: want binary or harness, got %q", o.Upstream)
	}
	if *cpuprofile != "" {
		if o.Proxy == "binary" {
			return errors.New("-cpuprofile needs -proxy=harness (or auto)")
		}
		p, err := filepath.Abs(*cpuprofile)
		if err != nil {
			return err
		}
		o.Proxy, o.CPUProfile = "harness", p
	}
	for _, p := range o.Peers {
		if !slices.Contains(o.Targets, p) {
			o.Targets = append(o.Targets, p)
		}
	}
	if o.Baseline != "" && !slices.Contains(o.Targets, "switchyard-base") {
		o.Targets = append(o.Targets, "switchyard-base")
	}
	if len(o.Modes) == 0 || len(o.Streams) == 0 || len(o.Targets) == 0 {
		return errors.New("nothing to measure: -modes, -kinds and -targets must not be empty")
	}

	rep, err := runBench(ctx, o)
	if err != nil {
		return err
	}
	if err := printReport(stdout, rep); err != nil {
		return err
	}
	path := *out
	if !filepath.IsAbs(path) {
		root, err := repoRoot()
		if err != nil {
			return err
		}
		path = filepath.Join(root, path)
	}
	if err := writeJSON(path, rep); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nresults: %s\n", path)
	return nil
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
