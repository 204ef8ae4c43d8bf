package main

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// A histogram records durations in log-linear buckets, HDR style: values
// below 2^subBits ns are exact, and every power of two above is split into
// 2^(subBits-1) buckets, so a recorded value is off by at most 1/256
// (0.4 %) of itself. Memory is fixed (about 115 KiB) whatever the count,
// and Record is safe for concurrent use.
type histogram struct {
	counts [numBuckets]atomic.Uint64
	n      atomic.Uint64
	sum    atomic.Uint64 // ns
	max    atomic.Uint64 // ns
}

const (
	subBits    = 9
	subCount   = 1 << subBits
	halfCount  = subCount / 2
	numBuckets = subCount + (64-subBits)*halfCount
)

// bucketOf is the index of the bucket holding v (ns).
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - subBits // >= 1
	return subCount + (e-1)*halfCount + int(v>>e) - halfCount
}

// bucketRange is the interval [lo, hi) of values bucket i holds.
func bucketRange(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i) + 1
	}
	e := (i-subCount)/halfCount + 1
	m := uint64((i-subCount)%halfCount + halfCount)
	return m << e, (m + 1) << e
}

// Record adds one observation; negative durations count as 0.
func (h *histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Count is the number of observations.
func (h *histogram) Count() uint64 { return h.n.Load() }

// Quantile returns the value at quantile q (0 < q <= 1): the midpoint of
// the bucket holding the ceil(q*n)-th smallest observation, never more
// than the largest one. It is 0 when nothing was recorded.
func (h *histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			lo, hi := bucketRange(i)
			mid := lo + (hi-lo-1)/2
			return time.Duration(min(mid, h.max.Load()))
		}
	}
	return time.Duration(h.max.Load())
}

// Mean is the average observation.
func (h *histogram) Mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}

// Max is the largest observation.
func (h *histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// summary is a histogram's figures in microseconds, as reported.
type summary struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_us"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p999_us"`
	Max   float64 `json:"max_us"`
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func (h *histogram) Summary() summary {
	return summary{
		Count: h.Count(),
		Mean:  us(h.Mean()),
		P50:   us(h.Quantile(0.50)),
		P90:   us(h.Quantile(0.90)),
		P99:   us(h.Quantile(0.99)),
		P999:  us(h.Quantile(0.999)),
		Max:   us(h.Max()),
	}
}

// schedule is an open-loop arrival plan: request i is due at
// start + i/rate, whatever happened to the requests before it, so a slow
// answer delays no later send and is charged from its intended time (no
// coordinated omission).
type schedule struct {
	start time.Time
	rate  float64 // requests per second
	n     int     // requests in the plan
}

func newSchedule(start time.Time, rate float64, d time.Duration) schedule {
	return schedule{start: start, rate: rate, n: int(math.Round(rate * d.Seconds()))}
}

// At is when request i is due.
func (s schedule) At(i int) time.Time {
	return s.start.Add(time.Duration(float64(i) * float64(time.Second) / s.rate))
}

// Due is how many requests are due at t (all of 0..Due-1 are), capped at n.
func (s schedule) Due(t time.Time) int {
	if t.Before(s.start) {
		return 0
	}
	k := int(t.Sub(s.start).Seconds()*s.rate) + 1
	// float rounding: step back or forward so At(k-1) <= t < At(k).
	for k > 0 && s.At(k-1).After(t) {
		k--
	}
	for k < s.n && !s.At(k).After(t) {
		k++
	}
	return min(k, s.n)
}
