package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/config"
)

// TestWastedProxyConfig: Switchyard's configuration for the wasted-calls
// mode loads, with the two providers on one upstream and the two chains.
func TestWastedProxyConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "wasted.yaml")
	if err := os.WriteFile(path, []byte(wastedProxyConfig("127.0.0.1:1", "http://127.0.0.1:2/v1", "", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, []string{
		"BENCH_WASTED_REVOKED_KEY=" + wastedRevokedKey, "BENCH_WASTED_GOOD_KEY=" + wastedGoodKey, "BENCH_CLIENT_KEY=" + clientKey,
	})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if len(cfg.Providers) != 2 || cfg.Providers[0].Name != "revoked" || cfg.Providers[1].Name != "good" ||
		cfg.Providers[0].BaseURL != cfg.Providers[1].BaseURL {
		t.Errorf("providers %+v", cfg.Providers)
	}
	if len(cfg.Chains[wastedChain].Steps) != 2 || len(cfg.Chains[singleChain].Steps) != 1 {
		t.Errorf("chains %+v", cfg.Chains)
	}
}

// TestWastedCalls runs the wasted-calls mode with Switchyard alone (no
// peer: they need node) against real processes: every request succeeds,
// and Switchyard calls the revoked key a few times at most, however many
// requests it serves.
func TestWastedCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes")
	}
	const n = 50
	out := filepath.Join(t.TempDir(), "results.json")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, []string{
		"-duration", "50ms", "-warmup", "10ms", "-rounds", "1",
		"-modes", "seq", "-kinds", "nonstream", "-targets", "direct,switchyard",
		"-proxy", "harness", "-upstream", "harness",
		"-wasted", "50",
		"-out", out,
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "Wasted calls: 50 sequential") {
		t.Errorf("report lacks the wasted-calls table:\n%s", stdout.String())
	}
	rep := readResults(t, out)
	w := rep.Wasted
	if w == nil || w.Requests != n || len(w.Targets) != 1 || w.Targets[0].Target != "switchyard" {
		t.Fatalf("wasted calls %+v", w)
	}
	if d := w.Direct; d.OK != n || d.GoodCalls != n || d.RevokedCalls != 0 {
		t.Errorf("direct %+v", d)
	}
	sy := w.Targets[0]
	if s := sy.Single; s.OK != n || s.Errors != 0 || s.RevokedCalls != 0 || s.GoodCalls != n {
		t.Errorf("switchyard with the good key alone %+v", s)
	}
	f := sy.Fallback
	if f.OK != n || f.Errors != 0 || f.GoodCalls != n {
		t.Errorf("switchyard fallback: %d of %d ok, %d errors (%s), %d calls to the good key", f.OK, n, f.Errors, f.ErrorSample, f.GoodCalls)
	}
	// At least once: the rejection has to be seen (and counted); a few
	// at most: after it the key is held.
	if f.RevokedCalls < 1 || f.RevokedCalls > 3 {
		t.Errorf("switchyard called the revoked key %d times in %d requests, want 1 to 3", f.RevokedCalls, n)
	}
	if f.Latency.Count != n || sy.WastedP50 != f.Latency.P50-sy.Single.Latency.P50 {
		t.Errorf("fallback latency %+v, wasted-call p50 %v", f.Latency, sy.WastedP50)
	}
}

func TestPrintWasted(t *testing.T) {
	ph := func(ok uint64, revoked, good int, p50 float64) wastedPhase {
		return wastedPhase{Requests: 10, OK: ok, RevokedCalls: revoked, GoodCalls: good, Latency: summary{P50: p50, P99: 2 * p50}}
	}
	r := &wastedReport{Requests: 10, Direct: ph(10, 0, 10, 1000), Targets: []wastedTarget{
		{Target: "switchyard", Single: ph(10, 0, 10, 1200), Fallback: ph(10, 1, 10, 1210), AddedP50: 210, WastedP50: 10},
		{Target: "portkey", Single: ph(10, 0, 10, 5000), Fallback: ph(9, 10, 9, 8000), AddedP50: 7000, WastedP50: 3000},
	}}
	r.Targets[1].Fallback.Errors, r.Targets[1].Fallback.ErrorSample = 1, "status 500: boom"
	var buf bytes.Buffer
	if err := printWasted(&buf, r); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	for _, want := range []string{
		"revoked-key calls", "switchyard  fallback", "+210", "+10", "portkey  fallback", "+7000", "+3000",
		"first error of wasted calls portkey fallback: status 500: boom",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}
