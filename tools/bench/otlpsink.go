package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// otlpSink is the least an OTLP/HTTP collector does: it reads each POST
// /v1/traces and answers 200 with an empty body (an empty
// ExportTraceServiceResponse: everything accepted). It counts what it
// receives, so a run shows the export happened. It runs in the bench
// process, on the same cores as everything else.
type otlpSink struct {
	addr     string
	srv      *http.Server
	done     chan error
	requests atomic.Int64
	bytes    atomic.Int64
}

// sinkStats is what the sink received.
type sinkStats struct {
	Requests int64 `json:"requests"`
	Bytes    int64 `json:"bytes"`
}

func startOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("OTLP sink: listen: %w", err)
	}
	s := &otlpSink{addr: ln.Addr().String(), done: make(chan error, 1)}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

func (s *otlpSink) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	n, err := io.Copy(io.Discard, r.Body)
	s.bytes.Add(n)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.requests.Add(1)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

func (s *otlpSink) stats() sinkStats {
	return sinkStats{Requests: s.requests.Load(), Bytes: s.bytes.Load()}
}

// stop shuts the server down (idempotent: Shutdown after Shutdown
// returns at once).
func (s *otlpSink) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	select {
	case err := <-s.done:
		s.done <- err // for a second stop
	case <-ctx.Done():
	}
}

// scrapeCounter reads a Prometheus counter vector with one label from
// http://addr/metrics: label value -> count.
func scrapeCounter(ctx context.Context, addr, name, label string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	prefix := name + "{" + label + "=\""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		value, count, ok := strings.Cut(rest, "\"} ")
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(count), 64)
		if err != nil {
			return nil, fmt.Errorf("%s{%s=%q}: %w", name, label, value, err)
		}
		out[value] = n
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New(name + " not found")
	}
	return out, nil
}
