package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"switchyard.dev/tools/fakeprovider"
)

// The hold-plane mode (-holdplane 200,10000,100000): for each number of
// holds present, a fresh NATS (a child process: one server, or with
// -holdplane-cluster a 3-node cluster with R3 buckets) gets that many
// operator pins written straight to switchyard_holds; then the all-in-one
// gateway (tools/cmd/switchyard) and two standalone proxies
// (services/proxy/cmd/proxy) start on it, and the bench pins -holdplane-pins
// more models, one at a time, through the admin API (POST /admin/holds),
// -holdplane-rounds times (the median round is reported), reading each standalone proxy's switchyard_hold_propagation_seconds
// before and after. Then proxy 1 is restarted: its start-up time with the
// holds in the bucket, and its first answer (a request for the model the
// last preloaded pin holds, which must be refused as held).

const (
	hpProvider   = "up"
	hpAdminToken = "bench-admin-token-0123456789"
	hpClientKey  = "sk-bench-client-hold-plane"
	hpUpKey      = "sk-bench-upstream-hold-plane"
)

// holdPlaneOptions configure the mode.
type holdPlaneOptions struct {
	Present  []int  `json:"present"`
	Pins     int    `json:"pins"`
	Rounds   int    `json:"rounds"`
	Cluster  bool   `json:"cluster"`
	PerfDir  string `json:"perf_dir,omitempty"` // perf record of each process during the pins
	progress io.Writer
}

// holdPlaneRow is what one number of holds present measured.
type holdPlaneRow struct {
	Present   int             `json:"present"`
	Pins      int             `json:"pins"`
	PinsTook  time.Duration   `json:"pins_took_ns"` // the median round
	Rounds    []time.Duration `json:"rounds_ns"`
	PinP50    time.Duration   `json:"pin_p50_ns"`
	PinP99    time.Duration   `json:"pin_p99_ns"`
	Queued    int             `json:"pins_queued"` // answered 202
	Preload   time.Duration   `json:"preload_ns"`
	Loaded    time.Duration   `json:"loaded_ns"` // services started until every table has the holds present
	Proxies   []propagation   `json:"proxies"`
	Restart   restart         `json:"restart"`
	ProxyRSS  []int64         `json:"proxy_rss_kib"`
	ProxyHWM  []int64         `json:"proxy_hwm_kib"`
	LoadAvg   string          `json:"loadavg"`
	StartedAt time.Time       `json:"started_at"`
}

// propagation is one proxy's switchyard_hold_propagation_seconds delta.
type propagation struct {
	Count   uint64  `json:"count"`
	P50     float64 `json:"p50_le_s"` // the bucket bound the median falls under
	P99     float64 `json:"p99_le_s"`
	Under05 float64 `json:"share_le_0_5ms"`
	Under1  float64 `json:"share_le_1ms"`
}

// restart is proxy 1 started again with the holds in the bucket.
type restart struct {
	StartUp     time.Duration `json:"startup_ns"` // process start to its first answer
	FirstStatus int           `json:"first_status"`
	FirstBody   string        `json:"first_body,omitempty"`
}

func runHoldPlane(ctx context.Context, o holdPlaneOptions, stdout io.Writer) ([]holdPlaneRow, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "switchyard-holdplane-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	progress(options{Progress: o.progress}, "building the all-in-one and the proxy\n")
	gw, err := goBuild(ctx, root, "./tools/cmd/switchyard", dir, "switchyard")
	if err != nil {
		return nil, err
	}
	px, err := goBuild(ctx, root, "./services/proxy/cmd/proxy", dir, "proxy")
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	up, err := fakeprovider.Start(fakeprovider.Options{Name: "hold-plane-upstream", Keys: []string{hpUpKey},
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer up.Close()
	var rows []holdPlaneRow
	for _, n := range o.Present {
		row, err := holdPlaneCell(ctx, o, n, dir, self, gw, px, up.URL())
		if err != nil {
			return rows, fmt.Errorf("%d holds present: %w", n, err)
		}
		rows = append(rows, row)
		printHoldPlaneRow(stdout, row)
	}
	return rows, nil
}

func holdPlaneCell(ctx context.Context, o holdPlaneOptions, n int, dir, self, gwBin, pxBin, upURL string) (row holdPlaneRow, err error) {
	row = holdPlaneRow{Present: n, Pins: o.Pins, StartedAt: time.Now()}
	cell, err := os.MkdirTemp(dir, fmt.Sprintf("n%d-", n))
	if err != nil {
		return row, err
	}
	size, replicas := 1, 1
	if o.Cluster {
		size, replicas = 3, 3
	}
	ns, err := startProcess("nats", self, []string{"-holdplane-nats", cell, "-holdplane-nats-size", strconv.Itoa(size)}, nil)
	if err != nil {
		return row, err
	}
	defer ns.stop()
	urls, err := natsURLs(ctx, ns, cell)
	if err != nil {
		return row, err
	}
	preModel := func(i int) string { return fmt.Sprintf("pre-%06d", i) }
	began := time.Now()
	if err := preloadHolds(ctx, urls, replicas, n, hpProvider, preModel); err != nil {
		return row, err
	}
	row.Preload = time.Since(began)
	began = time.Now()
	progress(options{Progress: o.progress}, "%d holds present: preloaded in %v\n", n, row.Preload.Round(time.Millisecond))
	last := preModel(n - 1)
	cfgPath := filepath.Join(cell, "gateway.yaml")
	if err := os.WriteFile(cfgPath, []byte(holdPlaneConfig(urls, replicas, upURL, o.Rounds, o.Pins, last)), 0o600); err != nil {
		return row, err
	}
	secrets := []string{"BENCH_ADMIN_TOKEN=" + hpAdminToken, "BENCH_CLIENT_KEY=" + hpClientKey, "BENCH_UPSTREAM_KEY=" + hpUpKey}
	addrs := make([]string, 6)
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			return row, err
		}
	}
	adminAddr := addrs[1]
	gw, err := startChild(ctx, "all-in-one", adminAddr, gwBin, []string{"-config", cfgPath}, append([]string{
		"SWITCHYARD_PROXY_LISTEN=" + addrs[0], "SWITCHYARD_ADMIN_LISTEN=" + adminAddr, "SWITCHYARD_PROBER_LISTEN=" + addrs[2],
	}, secrets...))
	if err != nil {
		return row, err
	}
	defer gw.stop()
	proxies := make([]*child, 2)
	for i := range proxies {
		p, err := startChild(ctx, fmt.Sprintf("proxy-%d", i+1), addrs[3+i], pxBin, []string{"-config", cfgPath},
			append([]string{"SWITCHYARD_PROXY_LISTEN=" + addrs[3+i]}, secrets...))
		if err != nil {
			return row, err
		}
		defer p.stop()
		proxies[i] = p
	}
	client := &http.Client{Timeout: 30 * time.Second}
	for _, addr := range []string{adminAddr, addrs[3], addrs[4]} {
		if err := waitReadyz(ctx, client, "http://"+addr); err != nil {
			return row, err
		}
	}
	// Every engine has the holds present (the admin's, the prober's and
	// each proxy's table), so the pins meet a fleet at rest.
	for _, addr := range []string{adminAddr, addrs[2], addrs[0], addrs[3], addrs[4]} {
		if err := waitHolds(ctx, client, "http://"+addr, n); err != nil {
			return row, err
		}
	}
	row.Loaded = time.Since(began)
	before := make([]hist, len(proxies))
	for i, p := range proxies {
		if before[i], err = readPropagation(client, "http://"+p.addr); err != nil {
			return row, err
		}
	}
	var recs []*perfRecording
	if o.PerfDir != "" {
		for _, c := range append([]*child{ns, gw}, proxies...) {
			r, err := startPerf(c.cmd.Process.Pid, filepath.Join(o.PerfDir, fmt.Sprintf("%s-%d.perf.data", c.name, n)))
			if err != nil {
				return row, err
			}
			recs = append(recs, r)
		}
	}
	row.LoadAvg = loadAvg()
	lat := make([]time.Duration, 0, o.Rounds*o.Pins)
	for r := range o.Rounds {
		// A round's pins are timed one after the other; the row keeps
		// the median round (the machine may be shared), and the pins'
		// latencies and the propagation of every round.
		began = time.Now()
		for i := range o.Pins {
			t0 := time.Now()
			status, body, err := pin(client, "http://"+adminAddr, pinModel(r, i))
			if err != nil {
				return row, err
			}
			switch status {
			case http.StatusCreated:
			case http.StatusAccepted:
				row.Queued++
			default:
				return row, fmt.Errorf("pin %s: %d %s", pinModel(r, i), status, body)
			}
			lat = append(lat, time.Since(t0))
		}
		row.Rounds = append(row.Rounds, time.Since(began))
	}
	row.PinsTook = slices.Sorted(slices.Values(row.Rounds))[len(row.Rounds)/2]
	slices.Sort(lat)
	row.PinP50, row.PinP99 = lat[len(lat)/2], lat[len(lat)*99/100]
	for i, p := range proxies {
		h, err := waitPropagation(ctx, client, "http://"+p.addr, before[i].count+uint64(o.Rounds*o.Pins))
		if err != nil {
			return row, err
		}
		row.Proxies = append(row.Proxies, h.sub(before[i]).summary())
		m, err := p.memory()
		if err != nil {
			return row, err
		}
		row.ProxyRSS, row.ProxyHWM = append(row.ProxyRSS, m.RSSKiB), append(row.ProxyHWM, m.HWMKiB)
	}
	for _, r := range recs {
		_ = r.cmd.Process.Signal(os.Interrupt)
		<-r.done
	}
	// Proxy 1 again, with every hold in the bucket.
	p1 := proxies[0]
	p1.stop()
	began = time.Now()
	p, err := startProcess(p1.name, pxBin, []string{"-config", cfgPath}, append([]string{"SWITCHYARD_PROXY_LISTEN=" + p1.addr}, secrets...))
	if err != nil {
		return row, err
	}
	defer p.stop()
	p.addr = p1.addr
	// A proxy listens at once but accepts connections only once it has
	// the fleet's holds: the first answer is the start-up time, and it
	// must refuse the model the last preloaded pin holds.
	for {
		status, body, err := chat(client, "http://"+p.addr, last)
		if err == nil {
			row.Restart.StartUp = time.Since(began)
			row.Restart.FirstStatus, row.Restart.FirstBody = status, body
			return row, nil
		}
		select {
		case <-p.done:
			return row, fmt.Errorf("restarted %s exited: %v\n%s", p.name, p.err, p.logs)
		case <-ctx.Done():
			return row, ctx.Err()
		default:
		}
		if time.Since(began) > 60*time.Second {
			return row, fmt.Errorf("restarted %s: no answer within 60 s: %v", p.name, err)
		}
		time.Sleep(5 * time.Millisecond) // polling for the listener
	}
}

// holdPlaneConfig is the fleet's configuration: one provider with one key
// and the models pinned during the measure (pin-000...) plus last, the
// model of the last preloaded pin; an operator token; metering, debug
// bundles and traces off; a start-up wait long enough to see how long the
// holds take to load.
func holdPlaneConfig(urls string, replicas int, upURL string, rounds, pins int, last string) string {
	var models strings.Builder
	for r := range rounds {
		for i := range pins {
			fmt.Fprintf(&models, "      - name: %s\n", pinModel(r, i))
		}
	}
	fmt.Fprintf(&models, "      - name: %s\n", last)
	return fmt.Sprintf(`log:
  level: warn
  format: json
nats:
  url: %q
  replicas: %d
proxy:
  startup_wait: 60s
limits:
  max_in_flight: 4096
admin:
  tokens:
    - id: bench
      secret: env:BENCH_ADMIN_TOKEN
      role: operator
%sproviders:
  - name: %s
    type: openai
    base_url: %s/v1
    keys:
      - id: k1
        secret: env:BENCH_UPSTREAM_KEY
    models:
%sclients:
  - id: bench
    secret: env:BENCH_CLIENT_KEY
    models: ["*"]
`, urls, replicas, featuresOff, hpProvider, upURL, models.String())
}

// pinModel is the model of round r's pin i.
func pinModel(r, i int) string { return fmt.Sprintf("pin-%d-%03d", r, i) }

// pin pins provider+model for two hours through the admin API.
func pin(client *http.Client, base, model string) (int, string, error) {
	return post(client, base+"/admin/holds", hpAdminToken,
		fmt.Sprintf(`{"provider":%q,"model":%q,"duration":"2h","reason":"bench"}`, hpProvider, model))
}

// chat asks the proxy for one chat completion of model.
func chat(client *http.Client, base, model string) (int, string, error) {
	return post(client, base+"/v1/chat/completions", hpClientKey,
		fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model))
}

// post sends a JSON body with a bearer token.
func post(client *http.Client, url, token, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	return do(client, req)
}

func do(client *http.Client, req *http.Request) (int, string, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitReadyz polls base/readyz until it answers 200.
func waitReadyz(ctx context.Context, client *http.Client, base string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		status, body, err := do(client, req)
		if err == nil && status == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s/readyz: %d %s %v", base, status, body, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition
	}
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func printHoldPlaneRow(w io.Writer, r holdPlaneRow) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(w, "holds present %7d (preloaded in %.1f s, in every table %.1f s later)\n", r.Present, r.Preload.Seconds(), r.Loaded.Seconds())
	fmt.Fprintf(w, "  %d pins took %.3f s (median of %v) (per pin p50 %s ms, p99 %s ms, %d queued); load %s\n",
		r.Pins, r.PinsTook.Seconds(), roundsOf(r.Rounds), ms(r.PinP50), ms(r.PinP99), r.Queued, r.LoadAvg)
	for i, p := range r.Proxies {
		fmt.Fprintf(w, "  proxy-%d propagation: %d applied, p50 <= %.2g ms, p99 <= %.2g ms, %.0f%% <= 0.5 ms, %.0f%% <= 1 ms; RSS %d KiB\n",
			i+1, p.Count, p.P50*1e3, p.P99*1e3, 100*p.Under05, 100*p.Under1, r.ProxyRSS[i])
	}
	fmt.Fprintf(w, "  proxy-1 restarted: first answer after %s ms: %d\n", ms(r.Restart.StartUp), r.Restart.FirstStatus)
}

// holdPlaneMain parses the mode's flags, runs it and writes its JSON
// results beside out.
func holdPlaneMain(ctx context.Context, present string, pins, rounds int, cluster bool, perfDir, out string, stdout, stderr io.Writer) error {
	o := holdPlaneOptions{Pins: pins, Rounds: rounds, Cluster: cluster, progress: stderr}
	for _, f := range splitList(present) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return fmt.Errorf("-holdplane: want numbers of holds >= 1, got %q", f)
		}
		o.Present = append(o.Present, n)
	}
	if pins < 1 || pins > 1000 || rounds < 1 || rounds > 9 {
		return fmt.Errorf("-holdplane-pins: want 1 to 1000, got %d; -holdplane-rounds: want 1 to 9, got %d", pins, rounds)
	}
	if perfDir != "" {
		p, err := filepath.Abs(perfDir)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		o.PerfDir = p
	}
	rows, err := runHoldPlane(ctx, o, stdout)
	if len(rows) > 0 {
		path := filepath.Join(filepath.Dir(out), "holdplane.json")
		if !filepath.IsAbs(path) {
			root, rerr := repoRoot()
			if rerr != nil {
				return rerr
			}
			path = filepath.Join(root, path)
		}
		if werr := writeJSON(path, map[string]any{"options": o, "rows": rows}); werr != nil {
			return werr
		}
		fmt.Fprintf(stdout, "\nresults: %s\n", path)
	}
	if err != nil {
		return err
	}
	for _, r := range rows {
		if r.Restart.FirstStatus != http.StatusServiceUnavailable {
			return fmt.Errorf("%d holds present: the restarted proxy's first answer for the last preloaded pin's model was %d, want 503 (held): %s",
				r.Present, r.Restart.FirstStatus, r.Restart.FirstBody)
		}
	}
	return nil
}

func roundsOf(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%.3f", d.Seconds())
	}
	return strings.Join(out, ", ")
}
