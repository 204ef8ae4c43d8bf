package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsCoverValues(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	vals := []uint64{0, 1, subCount - 1, subCount, subCount + 1, 1 << 20, math.MaxUint64 >> 1, math.MaxUint64}
	for range 10000 {
		vals = append(vals, r.Uint64()>>r.IntN(64))
	}
	for _, v := range vals {
		i := bucketOf(v)
		if i < 0 || i >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d, out of [0, %d)", v, i, numBuckets)
		}
		lo, hi := bucketRange(i)
		if v < lo || (v >= hi && hi != 0) { // hi wraps to 0 for the last bucket
			t.Fatalf("value %d in bucket %d = [%d, %d)", v, i, lo, hi)
		}
		if v >= subCount && float64(hi-lo)/float64(lo) > 1.0/256+1e-12 {
			t.Fatalf("bucket %d = [%d, %d) wider than 1/256 of its start", i, lo, hi)
		}
	}
}

func TestQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name string
		gen  func(i int) time.Duration
		n    int
	}{
		{name: "constant", n: 1000, gen: func(int) time.Duration { return 1234 * time.Microsecond }},
		{name: "uniform 1us-10ms", n: 100000, gen: func(int) time.Duration {
			return time.Microsecond + time.Duration(r.Int64N(int64(10*time.Millisecond)))
		}},
		{name: "exponential mean 200us", n: 100000, gen: func(int) time.Duration {
			return time.Duration(r.ExpFloat64() * float64(200*time.Microsecond))
		}},
		{name: "bimodal with a slow tail", n: 10000, gen: func(i int) time.Duration {
			if i%100 == 0 {
				return 50 * time.Millisecond
			}
			return 80 * time.Microsecond
		}},
		{name: "one value", n: 1, gen: func(int) time.Duration { return 7 * time.Millisecond }},
		{name: "small exact values", n: 500, gen: func(i int) time.Duration { return time.Duration(i) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h histogram
			exact := make([]time.Duration, tt.n)
			for i := range exact {
				exact[i] = tt.gen(i)
				h.Record(exact[i])
			}
			slices.Sort(exact)
			if h.Count() != uint64(tt.n) {
				t.Fatalf("count %d, want %d", h.Count(), tt.n)
			}
			if h.Max() != exact[len(exact)-1] {
				t.Errorf("max %s, want %s", h.Max(), exact[len(exact)-1])
			}
			for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
				want := exact[int(math.Ceil(q*float64(tt.n)))-1]
				got := h.Quantile(q)
				if diff := math.Abs(float64(got - want)); diff > float64(want)/256+1 {
					t.Errorf("q%.3f = %s, want %s (+- 0.4%%)", q, got, want)
				}
			}
		})
	}
}

func TestEmptyHistogram(t *testing.T) {
	var h histogram
	if s := h.Summary(); s != (summary{}) {
		t.Fatalf("empty summary %+v", s)
	}
	h.Record(-time.Second)
	if h.Quantile(0.5) != 0 {
		t.Fatalf("negative duration recorded as %s, want 0", h.Quantile(0.5))
	}
}

func TestSchedule(t *testing.T) {
	start := time.Unix(1000, 0)
	tests := []struct {
		name    string
		rate    float64
		d       time.Duration
		wantN   int
		spacing time.Duration
	}{
		{name: "2000/s for 5s", rate: 2000, d: 5 * time.Second, wantN: 10000, spacing: 500 * time.Microsecond},
		{name: "5000/s for 1s", rate: 5000, d: time.Second, wantN: 5000, spacing: 200 * time.Microsecond},
		{name: "3/s for 1s", rate: 3, d: time.Second, wantN: 3, spacing: time.Second / 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSchedule(start, tt.rate, tt.d)
			if s.n != tt.wantN {
				t.Fatalf("n = %d, want %d", s.n, tt.wantN)
			}
			for i := 1; i < s.n; i++ {
				gap := s.At(i).Sub(s.At(i - 1))
				if gap < tt.spacing-time.Nanosecond || gap > tt.spacing+time.Nanosecond {
					t.Fatalf("gap before %d = %s, want %s", i, gap, tt.spacing)
				}
			}
			if got := s.Due(start.Add(-time.Nanosecond)); got != 0 {
				t.Errorf("due before start = %d, want 0", got)
			}
			if got := s.Due(start); got != 1 {
				t.Errorf("due at start = %d, want 1", got)
			}
			for _, i := range []int{1, s.n / 2, s.n - 1} {
				if got := s.Due(s.At(i).Add(-time.Nanosecond)); got != i {
					t.Errorf("due just before request %d = %d, want %d", i, got, i)
				}
				if got := s.Due(s.At(i)); got != i+1 {
					t.Errorf("due at request %d = %d, want %d", i, got, i+1)
				}
			}
			if got := s.Due(start.Add(time.Hour)); got != s.n {
				t.Errorf("due long after = %d, want %d", got, s.n)
			}
		})
	}
}

func TestHasContent(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{name: "role chunk only", in: `data: {"choices":[{"delta":{"role":"assistant","content":""}}]}`, want: false},
		{name: "content chunk", in: `data: {"choices":[{"delta":{"content":"chunk 0"}}]}`, want: true},
		{name: "role then content", in: `data: {"delta":{"content":""}}` + "\n\n" + `data: {"delta":{"content":" x"}}`, want: true},
		{name: "space after colon", in: `{"content": "hi"}`, want: true},
		{name: "cut inside the value", in: `{"content":"`, want: false},
		{name: "nothing", in: "", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hasContent([]byte(tt.in)); got != tt.want {
				t.Fatalf("hasContent(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    modeSpec
		wantErr bool
	}{
		{in: "seq", want: modeSpec{Name: "seq", Kind: "sequential", Conns: 1}},
		{in: "rate2000", want: modeSpec{Name: "rate2000", Kind: "open", Rate: 2000, Conns: 256}},
		{in: "sat64", want: modeSpec{Name: "sat64", Kind: "closed", Conns: 64}},
		{in: "rate0", wantErr: true},
		{in: "satx", wantErr: true},
		{in: "burst", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseMode(tt.in, 256)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCompareAndChecks(t *testing.T) {
	streamCell := func(mode, target string, ttft50, rps, cpu float64) cellResult {
		c := cellResult{Mode: mode, Stream: true, Target: target, Throughput: rps, TTFT: &summary{P50: ttft50, P99: ttft50}}
		if target != "direct" {
			c.CPU = &cpuCost{TotalUs: cpu}
		}
		return c
	}
	cells := []cellResult{
		testCell("seq", "direct", 1000, 1200, 900),
		testCell("seq", "switchyard", 1050, 1400, 850),
		testCell("seq", "floor", 1020, 1190, 880),
		testCell("rate2000", "direct", 1100, 1500, 2000),
		testCell("rate2000", "switchyard", 1200, 3000, 2000),
		testCell("sat64", "direct", 3000, 9000, 10000),
		testCell("sat64", "switchyard", 6000, 12000, 5000),
		testCell("sat64", "floor", 5000, 11000, 5400),
		streamCell("seq", "direct", 1000, 900, 0),
		streamCell("seq", "switchyard", 1110, 800, 90),
		streamCell("seq", "floor", 1100, 820, 100),
		streamCell("sat64", "direct", 3000, 8000, 0),
		streamCell("sat64", "switchyard", 5000, 4000, 150),
		streamCell("sat64", "floor", 4800, 4400, 120),
	}
	cmps := compare(cells)
	if len(cmps) != 5 {
		t.Fatalf("%d comparisons, want 5", len(cmps))
	}
	if s := cmps[3]; s.Kind != "stream" || s.Metric != "ttft" || s.OverheadP50 == nil || *s.OverheadP50 != 1.1 ||
		s.CPUXFloor == nil || *s.CPUXFloor != 0.9 {
		t.Fatalf("seq stream comparison %+v", s)
	}
	if s := cmps[4]; s.ThroughputXFloor == nil || *s.ThroughputXFloor < 0.909 || *s.ThroughputXFloor > 0.91 ||
		s.CPUXFloor == nil || *s.CPUXFloor != 1.25 {
		t.Fatalf("sat64 stream comparison %+v", s)
	}
	seq := cmps[0]
	if seq.Switchyard.AddedP50 != 50 || seq.Floor.AddedP50 != 20 {
		t.Fatalf("seq added p50: switchyard %v floor %v, want 50 and 20", seq.Switchyard.AddedP50, seq.Floor.AddedP50)
	}
	if seq.OverheadP50 == nil || *seq.OverheadP50 != 2.5 {
		t.Fatalf("seq overhead p50 = %v, want 2.5", seq.OverheadP50)
	}
	if seq.OverheadP99 != nil {
		t.Fatalf("seq overhead p99 = %v, want none (the floor's added p99 is negative)", *seq.OverheadP99)
	}
	got := map[string]bool{}
	for _, c := range checks(cmps) {
		got[c.Name] = c.Pass
	}
	want := map[string]bool{
		"seq nonstream: added p50":              true,  // 50 <= 60
		"seq nonstream: added p50 / floor's":    false, // 2.5 > 1.1
		"rate2000 nonstream: added p99":         false, // 1500 > 1000
		"sat64 nonstream: throughput":           true,  // 50 % >= 45 %
		"sat64 nonstream: throughput / floor's": true,  // 5000/5400 = 0.926 >= 1/1.1
		"seq stream ttft: added p50":            false, // 110 > 60
		"seq stream ttft: added p50 / floor's":  true,  // 1.1 <= 1.2
		"sat64 stream: throughput":              true,  // 50 % >= 45 %
		"sat64 stream: throughput / floor's":    false, // 0.91 < 0.95
	}
	if len(got) != len(want) {
		t.Fatalf("checks %v, want %v", got, want)
	}
	for k, v := range want {
		if p, ok := got[k]; !ok || p != v {
			t.Errorf("check %q: pass %v (present %v), want %v", k, p, ok, v)
		}
	}
}

func TestFeatureCosts(t *testing.T) {
	cells := []cellResult{
		testCell("seq", "direct", 1000, 1200, 900),
		testCell("seq", "switchyard", 1050, 1400, 850),
		testCell("seq", "switchyard-metered", 1055, 1410, 840),
		testCell("seq", "switchyard-debug", 1062, 1420, 830),
		testCell("seq", "switchyard-otel", 1064, 1500, 820),
		testCell("sat64", "direct", 3000, 9000, 10000),
		testCell("sat64", "switchyard", 6000, 12000, 5000),
		testCell("sat64", "switchyard-metered", 6100, 12500, 4900),
		testCell("sat64", "switchyard-debug", 6200, 13000, 4700),
		testCell("sat64", "switchyard-otel", 6300, 14000, 4750),
	}
	cmps := compare(cells)
	if len(cmps) != 2 {
		t.Fatalf("%d comparisons, want 2", len(cmps))
	}
	seq, sat := cmps[0], cmps[1]
	if seq.Metering == nil || seq.Debug == nil || seq.OTel == nil {
		t.Fatalf("seq costs: metering %v debug %v otel %v", seq.Metering, seq.Debug, seq.OTel)
	}
	if seq.Debug.AddedP50 != 12 || seq.Debug.AddedP99 != 20 || seq.OTel.AddedP50 != 14 {
		t.Errorf("seq: debug %+v, otel %+v", *seq.Debug, *seq.OTel)
	}
	if sat.Debug.ThroughputPct != 94 || sat.OTel.ThroughputPct != 95 {
		t.Errorf("sat64: debug %+v, otel %+v", *sat.Debug, *sat.OTel)
	}
	if _, ok := seq.Others["switchyard-debug"]; !ok {
		t.Error("switchyard-debug is not compared with direct")
	}
	got := map[string]bool{}
	for _, c := range checks(cmps) {
		got[c.Name] = c.Pass
	}
	for name, want := range map[string]bool{
		"seq nonstream: metering and plan limits, added p50": true,  // 5 <= 10
		"seq nonstream: debug bundles, added p50":            false, // 12 > 10
		"seq nonstream: OTel traces, added p50":              true,  // 14 <= 15
		"sat64 nonstream: metered throughput":                true,  // 98 % >= 95 %
		"sat64 nonstream: throughput with debug bundles":     false, // 94 % < 95 %
		"sat64 nonstream: throughput with OTel traces":       true,  // 95 % >= 95 %
	} {
		if p, ok := got[name]; !ok || p != want {
			t.Errorf("check %q: pass %v (present %v), want %v", name, p, ok, want)
		}
	}
}

// testCell is a non-stream cell with the given latencies and throughput.
func testCell(mode, target string, p50, p99, rps float64) cellResult {
	return cellResult{Mode: mode, Target: target, Throughput: rps, Latency: summary{P50: p50, P99: p99}}
}

// The multiples of the floor's throughput and CPU carry their least and
// most over the rounds, each from one round's pair of turns, and the
// throughput check carries them too.
func TestTurnRanges(t *testing.T) {
	sy := testCell("sat64", "switchyard", 6000, 12000, 5000)
	fl := testCell("sat64", "floor", 5000, 11000, 5400)
	sy.Turns = []turn{{Throughput: 4500, CPUUs: 120}, {Throughput: 5500, CPUUs: 110}, {Throughput: 5000, CPUUs: 0}}
	fl.Turns = []turn{{Throughput: 5000, CPUUs: 100}, {Throughput: 5000, CPUUs: 100}}
	sy.CPU, fl.CPU = &cpuCost{TotalUs: 115}, &cpuCost{TotalUs: 100}
	cmps := compare([]cellResult{testCell("sat64", "direct", 3000, 9000, 10000), sy, fl})
	if len(cmps) != 1 {
		t.Fatalf("%d comparisons", len(cmps))
	}
	c := cmps[0]
	if r := c.ThroughputXFloorTurns; r == nil || r[0] != 0.9 || r[1] != 1.1 {
		t.Errorf("throughput turns %v, want [0.9 1.1] (the third round has no floor turn)", r)
	}
	if r := c.CPUXFloorTurns; r == nil || r[0] != 1.1 || math.Abs(r[1]-1.2) > 1e-12 {
		t.Errorf("cpu turns %v, want [1.1 1.2]", r)
	}
	for _, ch := range checks(cmps) {
		if ch.Name == "sat64 nonstream: throughput / floor's" && (ch.Turns == nil || *ch.Turns != *c.ThroughputXFloorTurns) {
			t.Errorf("check %q turns %v", ch.Name, ch.Turns)
		}
	}
	if r := turnRange(nil, fl.Turns, func(t turn) float64 { return t.Throughput }); r != nil {
		t.Errorf("no turns: %v", r)
	}
	// A turn whose CPU was not read (0) on either side is left out, not
	// counted as 0x or as no range at all; a turn that served nothing is
	// a throughput of 0x, not left out.
	cpu := turnCPU
	if r := turnRange([]turn{{Throughput: 0}, {Throughput: 130}}, []turn{{Throughput: 100}, {Throughput: 100}}, func(t turn) float64 { return t.Throughput }); r == nil || r[0] != 0 || r[1] != 1.3 {
		t.Errorf("a turn that served nothing: %v, want [0 1.3]", r)
	}
	if r := turnRange([]turn{{CPUUs: 0}, {CPUUs: 130}}, []turn{{CPUUs: 100}, {CPUUs: 100}}, cpu); r == nil || r[0] != 1.3 || r[1] != 1.3 {
		t.Errorf("a turn without Switchyard's CPU: %v, want [1.3 1.3]", r)
	}
	if r := turnRange([]turn{{CPUUs: 120}, {CPUUs: 130}}, []turn{{CPUUs: 0}, {CPUUs: 100}}, cpu); r == nil || r[0] != 1.3 || r[1] != 1.3 {
		t.Errorf("a turn without the floor's CPU: %v, want [1.3 1.3]", r)
	}
}
