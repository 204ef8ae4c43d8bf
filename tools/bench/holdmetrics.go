package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// What the hold-plane mode reads from the services' /metrics pages: the
// proxies' propagation histogram and the holds in each table.

// hist is a Prometheus histogram read from a /metrics page: cumulative
// counts by upper bound.
type hist struct {
	le    []float64
	cum   []uint64
	count uint64
}

const propagationMetric = "switchyard_hold_propagation_seconds"

func readPropagation(client *http.Client, base string) (hist, error) {
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		return hist{}, err
	}
	defer resp.Body.Close()
	return parseHist(resp.Body, propagationMetric)
}

// parseHist reads the histogram name from a Prometheus text page.
func parseHist(r io.Reader, name string) (hist, error) {
	var h hist
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, name+`_bucket{le="`):
			rest := strings.TrimPrefix(line, name+`_bucket{le="`)
			bound, val, ok := strings.Cut(rest, `"} `)
			if !ok {
				continue
			}
			le, err1 := strconv.ParseFloat(bound, 64)
			c, err2 := strconv.ParseFloat(val, 64)
			if err1 != nil || err2 != nil {
				return h, fmt.Errorf("%s: bad bucket line %q", name, line)
			}
			h.le, h.cum = append(h.le, le), append(h.cum, uint64(c))
		case strings.HasPrefix(line, name+"_count "):
			c, err := strconv.ParseFloat(strings.TrimPrefix(line, name+"_count "), 64)
			if err != nil {
				return h, err
			}
			h.count = uint64(c)
		}
	}
	if len(h.le) == 0 {
		return h, fmt.Errorf("no %s on the page", name)
	}
	return h, sc.Err()
}

func (h hist) sub(b hist) hist {
	d := hist{le: h.le, cum: make([]uint64, len(h.cum)), count: h.count - b.count}
	for i := range h.cum {
		d.cum[i] = h.cum[i] - b.cum[i]
	}
	return d
}

// summary gives the bucket bounds under which the median and the 99th
// percentile fall (0: over the largest bound) and the shares
// at or under 0.5 ms and 1 ms.
func (h hist) summary() propagation {
	p := propagation{Count: h.count}
	if h.count == 0 {
		return p
	}
	q := func(f float64) float64 {
		for i, c := range h.cum {
			if float64(c) >= f*float64(h.count) && !math.IsInf(h.le[i], 1) {
				return h.le[i]
			}
		}
		return 0 // over the largest bound
	}
	p.P50, p.P99 = q(0.5), q(0.99)
	for i, le := range h.le {
		switch le {
		case 0.0005:
			p.Under05 = float64(h.cum[i]) / float64(h.count)
		case 0.001:
			p.Under1 = float64(h.cum[i]) / float64(h.count)
		}
	}
	return p
}

// waitPropagation polls the proxy's histogram until it counted want.
func waitPropagation(ctx context.Context, client *http.Client, base string, want uint64) (hist, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		h, err := readPropagation(client, base)
		if err == nil && h.count >= want {
			return h, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return h, fmt.Errorf("%s: propagation count %d, want %d (%v)", base, h.count, want, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
}

// waitHolds polls base/metrics until its switchyard_holds series add up
// to at least n records.
func waitHolds(ctx context.Context, client *http.Client, base string, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := countHolds(client, base)
		if err == nil && got >= n {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %d holds in its table, want %d (%v)", base, got, n, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition
	}
}

func countHolds(client *http.Client, base string) (int, error) {
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "switchyard_holds{"); ok {
			if _, v, ok := strings.Cut(rest, "} "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, err
				}
				sum += f
			}
		}
	}
	return int(sum), sc.Err()
}
