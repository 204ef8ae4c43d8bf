package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// The fan-out mode (-fanout N): N slow streams opened at once through
// each target, the upstream spacing each stream's content chunks by
// fanoutChunkDelay (so every stream is still open when the last caller
// gets its first bytes). It measures how long until every caller had its
// first bytes (the last first byte), the first bytes' p50, and, for
// Switchyard's proxies, the goroutines each open stream holds (the
// process's go_goroutines with the streams open, less before, over N:
// the earlier load's keep-alive connections closing meanwhile move it by
// up to their number over N).

const fanoutChunkDelay = 400 * time.Millisecond

// fanoutResult is one target's fan-out.
type fanoutResult struct {
	Target      string  `json:"target"`
	Streams     int     `json:"streams"`
	OK          int     `json:"ok"`
	Errors      int     `json:"errors"`
	ErrorSample string  `json:"error_sample,omitempty"`
	FirstP50    float64 `json:"first_byte_p50_ms"`
	FirstLast   float64 `json:"first_byte_last_ms"` // when the last caller got its first bytes, from the start
	AllDone     float64 `json:"all_done_ms"`
	// Goroutines per open stream (Switchyard's proxies: their
	// go_goroutines metric; 0: not read).
	Goroutines float64 `json:"goroutines_per_stream,omitempty"`
}

// runFanout runs the fan-out through each target but direct's peers
// (targets in o.Targets order; direct too, as the reference).
func runFanout(ctx context.Context, o options, e *env, body func(t target) []byte) ([]fanoutResult, error) {
	ruleID, err := addUpstreamRule(ctx, e.upstream.addr, map[string]any{"path": "/chat/completions", "chunk_delay": fanoutChunkDelay.String()})
	if err != nil {
		return nil, fmt.Errorf("fan-out: slow the upstream's streams: %w", err)
	}
	defer deleteUpstreamRule(e.upstream.addr, ruleID)
	var out []fanoutResult
	for _, name := range o.Targets {
		t := e.targets[name]
		if isPeer(name) {
			continue
		}
		progress(o, "fan-out: %d streams at once through %s...\n", o.Fanout, name)
		r, err := fanout(ctx, t, o.Fanout, body(t))
		if err != nil {
			return nil, err
		}
		progress(o, "  %-18s last first byte %7.1f ms  p50 %7.1f ms  all done %7.0f ms  errors %d  goroutines/stream %.2f\n",
			name, r.FirstLast, r.FirstP50, r.AllDone, r.Errors, r.Goroutines)
		out = append(out, r)
	}
	return out, nil
}

// fanout opens n streams through t at once.
func fanout(ctx context.Context, t target, n int, body []byte) (fanoutResult, error) {
	res := fanoutResult{Target: t.Name, Streams: n}
	tr := &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 30 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	metrics := strings.HasPrefix(t.Name, "switchyard")
	idle := 0.0
	if metrics {
		g, err := goroutines(ctx, t.Addr)
		if err != nil {
			return res, err
		}
		idle = g
	}
	var (
		mu     sync.Mutex
		firsts []time.Duration
		wg     sync.WaitGroup
		got    sync.WaitGroup // each stream's first bytes (or its failure)
	)
	start := make(chan struct{})
	var t0 time.Time
	fail := func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		res.Errors++
		if res.ErrorSample == "" {
			res.ErrorSample = msg
		}
	}
	got.Add(n)
	for range n {
		wg.Go(func() {
			once := sync.OnceFunc(got.Done)
			defer once()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+t.Addr+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if t.Auth != "" {
				req.Header.Set("Authorization", t.Auth)
			}
			for _, h := range t.Headers {
				req.Header.Set(h.Name, h.Value)
			}
			<-start
			resp, err := client.Do(req)
			if err != nil {
				fail(err.Error())
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				fail(resp.Status + ": " + string(b))
				return
			}
			one := make([]byte, 1)
			if _, err := io.ReadFull(resp.Body, one); err != nil {
				fail("first byte: " + err.Error())
				return
			}
			mu.Lock()
			firsts = append(firsts, time.Since(t0))
			mu.Unlock()
			once()
			rest, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Contains(rest, []byte("[DONE]")) {
				fail(fmt.Sprintf("stream not whole: %v", err))
				return
			}
			mu.Lock()
			res.OK++
			mu.Unlock()
		})
	}
	t0 = time.Now()
	close(start)
	got.Wait()
	if metrics {
		g, err := goroutines(ctx, t.Addr)
		if err != nil {
			return res, fmt.Errorf("fan-out: %s: %w", t.Name, err)
		}
		mu.Lock()
		if len(firsts) > 0 {
			res.Goroutines = (g - idle) / float64(len(firsts))
		}
		mu.Unlock()
	}
	wg.Wait()
	res.AllDone = ms(time.Since(t0))
	if len(firsts) > 0 {
		slices.Sort(firsts)
		res.FirstP50, res.FirstLast = ms(firsts[len(firsts)/2]), ms(firsts[len(firsts)-1])
	}
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// goroutines reads go_goroutines from the /metrics of the process at addr.
func goroutines(ctx context.Context, addr string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s/metrics: no go_goroutines", addr)
}

// addUpstreamRule adds a rule to the fake provider at addr: its id.
func addUpstreamRule(ctx context.Context, addr string, rule map[string]any) (string, error) {
	b, _ := json.Marshal(rule)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/_fake/rules", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, v.Error)
	}
	return v.ID, nil
}

func deleteUpstreamRule(addr, id string) {
	req, _ := http.NewRequest(http.MethodDelete, "http://"+addr+"/_fake/rules/"+id, nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// printFanout writes the fan-out table.
func printFanout(w io.Writer, rs []fanoutResult) error {
	fmt.Fprintf(w, "\nFan-out: streams opened at once, the upstream spacing their chunks by %s (ms from the start):\n", fanoutChunkDelay)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tstreams\tok\terrors\tfirst byte p50\tlast first byte\tall done\tgoroutines/stream\t")
	for _, r := range rs {
		g := "-"
		if r.Goroutines != 0 {
			g = fmt.Sprintf("%.2f", r.Goroutines)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.0f\t%s\t\n", r.Target, r.Streams, r.OK, r.Errors, r.FirstP50, r.FirstLast, r.AllDone, g)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rs {
		if r.ErrorSample != "" {
			fmt.Fprintf(w, "  %s: %s\n", r.Target, r.ErrorSample)
		}
	}
	return nil
}
