package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain runs the bench's helper processes when the test binary is
// re-executed as one (the bench starts them from os.Executable).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		// fasthttp's client connection cleaner, its default dialer's DNS
		// cache cleaner and its process-wide clock are never stopped.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.init.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}

// TestSmoke runs every mode, kind and target for a moment against real
// processes (the upstream, the proxy and the floor as children of the test
// binary) and checks the report is whole and error free. It measures
// nothing worth reading.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes and sends a few thousand requests")
	}
	out := filepath.Join(t.TempDir(), "results.json")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, []string{
		"-duration", "100ms", "-warmup", "20ms",
		"-modes", "seq,rate2000,rate5000,sat64",
		"-proxy", "harness", "-upstream", "harness",
		"-workers", "64",
		"-targets", "direct,switchyard,switchyard-metered,switchyard-otel,floor,floor-fasthttp",
		"-fanout", "20",
		"-out", out,
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{"added p50", "Resident memory", "Targets:", "seq nonstream: added p50",
		"Cost of metering and plan limits", "seq nonstream: metering and plan limits, added p50",
		"Cost of OTel trace export", "seq nonstream: OTel traces, added p50", "OTLP sink",
		"CPU time of the process serving each target", "sat64 stream: throughput / floor's",
		"against the bare fasthttp floor", "Fan-out:"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, stdout.String())
		}
	}
	rep := readResults(t, out)
	// modes x kinds x targets (direct, switchyard, switchyard-metered, switchyard-otel, floor, floor-fasthttp)
	if got, want := len(rep.Cells), 4*2*6; got != want {
		t.Fatalf("%d cells, want %d", got, want)
	}
	for _, c := range rep.Cells {
		if c.Errors != 0 || c.OK == 0 {
			t.Errorf("%s %s %s: %d ok, %d errors (%s)", c.Mode, kindName(c.Stream), c.Target, c.OK, c.Errors, c.ErrorSample)
		}
		if (c.CPU == nil) != (c.Target == "direct") || (c.CPU != nil && (c.CPU.Requests != c.OK || c.CPU.Syscalls <= 0)) {
			t.Errorf("%s %s %s: process usage %+v (want one for every target but direct, over its requests)", c.Mode, kindName(c.Stream), c.Target, c.CPU)
		}
		if c.Stream && (c.TTFT == nil || c.TTFT.P50 <= 0 || c.TTFT.P50 > c.Latency.P50) {
			t.Errorf("%s stream %s: ttft %+v, total %+v", c.Mode, c.Target, c.TTFT, c.Latency)
		}
	}
	// after each mode: the proxy, the metered proxy, the OTel proxy and the floors
	if len(rep.Memory) != 4*5 || rep.Memory[0].HWMKiB <= 0 {
		t.Errorf("memory samples %+v", rep.Memory)
	}
	if s := rep.OTLPSink; s == nil || s.Requests == 0 || s.Bytes == 0 {
		t.Errorf("OTLP sink received %+v: switchyard-otel exported no trace", s)
	}
	if len(rep.Checks) == 0 {
		t.Error("no targets checked")
	}
	if len(rep.Fanout) != 6 {
		t.Errorf("fan-out of %d targets, want 6", len(rep.Fanout))
	}
	// (the goroutines per stream are not checked: with 20 streams the
	// load's own connections, closing as they idle, move the count as
	// much as the streams do)
	for _, f := range rep.Fanout {
		if f.OK != 20 || f.Errors != 0 || f.FirstLast <= 0 || f.FirstLast < f.FirstP50 || f.AllDone < f.FirstLast {
			t.Errorf("fan-out %+v", f)
		}
	}
}

// readResults reads the JSON results file a run wrote.
func readResults(t *testing.T, path string) report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("results JSON: %v", err)
	}
	return rep
}
