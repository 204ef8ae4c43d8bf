package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// side is one path compared with direct, on the cell's primary latency
// (time to first token for streams).
type side struct {
	AddedP50      float64 `json:"added_p50_us"`
	AddedP99      float64 `json:"added_p99_us"`
	ThroughputPct float64 `json:"throughput_pct_of_direct"`
}

// comparison is one mode and kind: what Switchyard and the floor add to
// direct, and Switchyard's added latency as a multiple of the floor's.
type comparison struct {
	Mode        string           `json:"mode"`
	Kind        string           `json:"kind"`
	Metric      string           `json:"metric"` // latency or ttft
	Switchyard  *side            `json:"switchyard,omitempty"`
	Floor       *side            `json:"floor,omitempty"`
	Others      map[string]*side `json:"others,omitempty"` // diagnostic targets (floor-nethttp)
	OverheadP50 *float64         `json:"overhead_x_floor_p50,omitempty"`
	OverheadP99 *float64         `json:"overhead_x_floor_p99,omitempty"`
	// ThroughputXFloor is Switchyard's throughput over the floor's, and
	// CPUXFloor its process's CPU time per request over the floor's.
	ThroughputXFloor *float64 `json:"throughput_x_floor,omitempty"`
	CPUXFloor        *float64 `json:"cpu_x_floor,omitempty"`
	// ThroughputXFloorTurns and CPUXFloorTurns are the least and the most
	// of those multiples over the rounds, each from the two targets' turns
	// of one round: how far the run's own noise moves them.
	ThroughputXFloorTurns *[2]float64 `json:"throughput_x_floor_turns,omitempty"`
	CPUXFloorTurns        *[2]float64 `json:"cpu_x_floor_turns,omitempty"`
	// FastHTTP holds the same multiples against the bare fasthttp floor
	// (floor-fasthttp: the floor's handler without fiber), when measured.
	FastHTTP *floorMultiples `json:"x_floor_fasthttp,omitempty"`
	// Metering, Debug and OTel are what one feature costs: the same proxy
	// with it on (switchyard-metered, switchyard-debug, switchyard-otel)
	// against switchyard, in the same run.
	Metering *featureCost `json:"metering,omitempty"`
	Debug    *featureCost `json:"debug,omitempty"`
	OTel     *featureCost `json:"otel,omitempty"`
}

// floorMultiples are Switchyard's added latency, throughput and CPU per
// request as multiples of one floor's.
type floorMultiples struct {
	OverheadP50 *float64 `json:"overhead_p50,omitempty"`
	OverheadP99 *float64 `json:"overhead_p99,omitempty"`
	Throughput  *float64 `json:"throughput,omitempty"`
	CPU         *float64 `json:"cpu,omitempty"`
}

// featureCost is a feature target next to switchyard, on the cell's
// primary latency.
type featureCost struct {
	AddedP50      float64 `json:"added_p50_us"`
	AddedP99      float64 `json:"added_p99_us"`
	ThroughputPct float64 `json:"throughput_pct_of_switchyard"`
}

// feature is a target that is switchyard with one feature on, and the
// checks of what it may cost.
type feature struct {
	Target  string                          // the target, next to switchyard
	Title   string                          // what is on, for the table
	SeqName string                          // the sequential check, after "seq <kind>: "
	SatName string                          // the saturation check, after "sat<N> <kind>: "
	SeqMax  float64                         // most added p50 sequentially, us
	cost    func(*comparison) **featureCost // the comparison's field
}

// satMinPct is the least throughput at saturation of a feature target,
// as a percentage of switchyard's.
const satMinPct = 95

// features are the feature targets, in the order of their tables.
var features = []feature{
	{Target: "switchyard-metered", Title: "metering and plan limits", SeqName: "metering and plan limits, added p50",
		SatName: "metered throughput", SeqMax: 10, cost: func(c *comparison) **featureCost { return &c.Metering }},
	{Target: "switchyard-debug", Title: "debug bundles for every request", SeqName: "debug bundles, added p50",
		SatName: "throughput with debug bundles", SeqMax: 10, cost: func(c *comparison) **featureCost { return &c.Debug }},
	{Target: "switchyard-otel", Title: "OTel trace export", SeqName: "OTel traces, added p50",
		SatName: "throughput with OTel traces", SeqMax: 15, cost: func(c *comparison) **featureCost { return &c.OTel }},
}

func compare(cells []cellResult) []comparison {
	type key struct {
		mode   string
		stream bool
	}
	var order []key
	by := map[key]map[string]*cellResult{}
	for i := range cells {
		c := &cells[i]
		k := key{c.Mode, c.Stream}
		if by[k] == nil {
			by[k] = map[string]*cellResult{}
			order = append(order, k)
		}
		by[k][c.Target] = c
	}
	var out []comparison
	for _, k := range order {
		d := by[k]["direct"]
		if d == nil {
			continue
		}
		cmp := comparison{Mode: k.mode, Kind: kindName(k.stream), Metric: "latency"}
		if k.stream {
			cmp.Metric = "ttft"
		}
		vs := func(c *cellResult) *side {
			if c == nil {
				return nil
			}
			s := &side{
				AddedP50: c.primary().P50 - d.primary().P50,
				AddedP99: c.primary().P99 - d.primary().P99,
			}
			if d.Throughput > 0 {
				s.ThroughputPct = 100 * c.Throughput / d.Throughput
			}
			return s
		}
		cmp.Switchyard = vs(by[k]["switchyard"])
		cmp.Floor = vs(by[k]["floor"])
		for name, c := range by[k] {
			if name != "direct" && name != "switchyard" && name != "floor" {
				if cmp.Others == nil {
					cmp.Others = map[string]*side{}
				}
				cmp.Others[name] = vs(c)
			}
		}
		if cmp.Switchyard != nil && cmp.Floor != nil {
			sy, fl := by[k]["switchyard"], by[k]["floor"]
			cmp.OverheadP50 = ratio(cmp.Switchyard.AddedP50, cmp.Floor.AddedP50)
			cmp.OverheadP99 = ratio(cmp.Switchyard.AddedP99, cmp.Floor.AddedP99)
			cmp.ThroughputXFloor = ratio(sy.Throughput, fl.Throughput)
			cmp.ThroughputXFloorTurns = turnRange(sy.Turns, fl.Turns, func(t turn) float64 { return t.Throughput })
			if sy.CPU != nil && fl.CPU != nil {
				cmp.CPUXFloor = ratio(sy.CPU.TotalUs, fl.CPU.TotalUs)
				cmp.CPUXFloorTurns = turnRange(sy.Turns, fl.Turns, turnCPU)
			}
		}
		if sy, fl := by[k]["switchyard"], by[k]["floor-fasthttp"]; cmp.Switchyard != nil && sy != nil && fl != nil {
			fs := vs(fl)
			m := &floorMultiples{OverheadP50: ratio(cmp.Switchyard.AddedP50, fs.AddedP50),
				OverheadP99: ratio(cmp.Switchyard.AddedP99, fs.AddedP99), Throughput: ratio(sy.Throughput, fl.Throughput)}
			if sy.CPU != nil && fl.CPU != nil {
				m.CPU = ratio(sy.CPU.TotalUs, fl.CPU.TotalUs)
			}
			cmp.FastHTTP = m
		}
		for _, f := range features {
			sy, on := by[k]["switchyard"], by[k][f.Target]
			if sy == nil || on == nil {
				continue
			}
			fc := &featureCost{AddedP50: on.primary().P50 - sy.primary().P50, AddedP99: on.primary().P99 - sy.primary().P99}
			if sy.Throughput > 0 {
				fc.ThroughputPct = 100 * on.Throughput / sy.Throughput
			}
			*f.cost(&cmp) = fc
		}
		out = append(out, cmp)
	}
	return out
}

// ratio is a/b, or nil when b is not positive (the floor added nothing
// measurable, so no multiple means anything).
func ratio(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	r := a / b
	return &r
}

// check is one target from the issue, evaluated on this run.
type check struct {
	Name   string  `json:"name"`
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Pass   bool    `json:"pass"`
	// Turns is the value's least and most over the rounds, where it has
	// them (the multiples of the floor's throughput).
	Turns *[2]float64 `json:"turns,omitempty"`
}

// Switchyard next to the floor, by kind: sequential added p50 at most
// floorLatencyMax times the floor's, throughput at saturation at least
// floorThroughputMin times the floor's.
var (
	floorLatencyMax    = map[string]float64{"nonstream": 1.1, "stream": 1.2}
	floorThroughputMin = map[string]float64{"nonstream": 0.91, "stream": 0.95} // 0.91: 1/1.1, rounded up
)

// checks evaluates the targets: added p50 <= 60 us sequentially, added p99
// <= 1 ms at 2,000 requests/s, saturation throughput >= 45 % of direct,
// and, next to the floor, the added p50 sequentially and the throughput
// at saturation (floorLatencyMax, floorThroughputMin).
func checks(cmps []comparison) []check {
	var out []check
	for _, c := range cmps {
		if c.Switchyard == nil {
			continue
		}
		label := c.Kind
		if c.Metric == "ttft" {
			label += " ttft"
		}
		switch {
		case c.Mode == "seq":
			out = append(out, check{
				Name: "seq " + label + ": added p50", Target: "<= 60 us",
				Value: c.Switchyard.AddedP50, Unit: "us", Pass: c.Switchyard.AddedP50 <= 60,
			})
			if c.OverheadP50 != nil {
				limit := floorLatencyMax[c.Kind]
				out = append(out, check{
					Name: "seq " + label + ": added p50 / floor's", Target: fmt.Sprintf("<= %gx", limit),
					Value: *c.OverheadP50, Unit: "x", Pass: *c.OverheadP50 <= limit,
				})
			}
		case c.Mode == "rate2000":
			out = append(out, check{
				Name: "rate2000 " + label + ": added p99", Target: "<= 1000 us",
				Value: c.Switchyard.AddedP99, Unit: "us", Pass: c.Switchyard.AddedP99 <= 1000,
			})
		case strings.HasPrefix(c.Mode, "sat"):
			out = append(out, check{
				Name: c.Mode + " " + c.Kind + ": throughput", Target: ">= 45 % of direct",
				Value: c.Switchyard.ThroughputPct, Unit: "%", Pass: c.Switchyard.ThroughputPct >= 45,
			})
			if c.ThroughputXFloor != nil {
				least := floorThroughputMin[c.Kind]
				out = append(out, check{
					Name: c.Mode + " " + c.Kind + ": throughput / floor's", Target: fmt.Sprintf(">= %.2fx", least),
					Value: *c.ThroughputXFloor, Unit: "x", Pass: *c.ThroughputXFloor >= least, Turns: c.ThroughputXFloorTurns,
				})
			}
		}
		for _, f := range features {
			m := *f.cost(&c)
			if m == nil {
				continue
			}
			switch {
			case c.Mode == "seq":
				out = append(out, check{
					Name: "seq " + label + ": " + f.SeqName, Target: fmt.Sprintf("<= %g us", f.SeqMax),
					Value: m.AddedP50, Unit: "us", Pass: m.AddedP50 <= f.SeqMax,
				})
			case strings.HasPrefix(c.Mode, "sat"):
				out = append(out, check{
					Name: c.Mode + " " + c.Kind + ": " + f.SatName, Target: fmt.Sprintf(">= %d %% of switchyard", satMinPct),
					Value: m.ThroughputPct, Unit: "%", Pass: m.ThroughputPct >= satMinPct,
				})
			}
		}
	}
	return out
}

// printReport writes the tables.
func printReport(w io.Writer, r *report) error {
	fmt.Fprintf(w, "\nSwitchyard bench: %s, %d CPUs, proxy as %s; upstream latency %s, %d chunks; %s per cell in %d interleaved turns, %s warmup\n",
		r.GoVersion, r.CPUs, r.ProxyKind, r.Options.Latency, r.Options.Chunks, r.Options.Duration, r.Options.Rounds, r.Options.Warmup)
	fmt.Fprintf(w, "latencies in us; open-loop latencies count from the intended send time; streams: p50/p99 of the whole stream, ttft of the first content chunk;\n")
	fmt.Fprintf(w, "added = over direct, on ttft for streams and the whole answer otherwise\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tkind\ttarget\treq/s\tp50\tp99\tttft p50\tttft p99\terrors\tadded p50\tadded p99\t% direct\t")
	cmp := map[string]comparison{}
	for _, c := range r.Compare {
		cmp[c.Mode+"/"+c.Kind] = c
	}
	for _, c := range r.Cells {
		ttft50, ttft99 := "-", "-"
		if c.TTFT != nil {
			ttft50, ttft99 = f0(c.TTFT.P50), f0(c.TTFT.P99)
		}
		added50, added99, pct := "-", "-", "-"
		k := cmp[c.Mode+"/"+kindName(c.Stream)]
		var s *side
		switch c.Target {
		case "switchyard":
			s = k.Switchyard
		case "floor":
			s = k.Floor
		default:
			s = k.Others[c.Target]
		}
		if s != nil {
			added50, added99, pct = signed(s.AddedP50), signed(s.AddedP99), fmt.Sprintf("%.0f%%", s.ThroughputPct)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t\n", c.Mode, kindName(c.Stream), c.Target,
			c.Throughput, f0(c.Latency.P50), f0(c.Latency.P99), ttft50, ttft99, c.Errors, added50, added99, pct)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nCPU time of the process serving each target, per request (user + sys from /proc/<pid>/stat over the")
	fmt.Fprintln(w, "measured turns, 10 ms ticks; rw calls = read-like + write-like system calls from /proc/<pid>/io), us:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tkind\ttarget\trequests\tuser\tsys\tcpu\trw calls\t")
	for _, c := range r.Cells {
		if p := c.CPU; p != nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t\n", c.Mode, kindName(c.Stream), c.Target,
				p.Requests, p.UserUs, p.SysUs, p.TotalUs, p.Syscalls)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if err := printWhere(w, r.Cells); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nSwitchyard next to the floor: added latency, throughput and CPU per request as multiples of the floor's")
	fmt.Fprintln(w, "(in parentheses, the least and the most of the rounds' own multiples, each from one round's turn of each target):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tkind\tadded p50\tadded p99\tthroughput\tcpu/request\t")
	for _, c := range r.Compare {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s%s\t%s%s\t\n", c.Mode, c.Kind, times(c.OverheadP50, 1), times(c.OverheadP99, 1),
			times(c.ThroughputXFloor, 2), spread(c.ThroughputXFloorTurns), times(c.CPUXFloor, 2), spread(c.CPUXFloorTurns))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if slices.ContainsFunc(r.Compare, func(c comparison) bool { return c.FastHTTP != nil }) {
		fmt.Fprintln(w, "\nThe same multiples against the bare fasthttp floor (floor-fasthttp: the floor's handler, no fiber):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\tkind\tadded p50\tadded p99\tthroughput\tcpu/request\t")
		for _, c := range r.Compare {
			if m := c.FastHTTP; m != nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", c.Mode, c.Kind, times(m.OverheadP50, 1), times(m.OverheadP99, 1),
					times(m.Throughput, 2), times(m.CPU, 2))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	for _, f := range features {
		if !slices.ContainsFunc(r.Compare, func(c comparison) bool { return *f.cost(&c) != nil }) {
			continue
		}
		fmt.Fprintf(w, "\nCost of %s (%s next to switchyard, us; %% throughput of switchyard's):\n", f.Title, f.Target)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\tkind\tadded p50\tadded p99\t% throughput\t")
		for _, c := range r.Compare {
			if m := *f.cost(&c); m != nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f%%\t\n", c.Mode, c.Kind, signed(m.AddedP50), signed(m.AddedP99), m.ThroughputPct)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if b := r.DebugBundles; b != nil {
		fmt.Fprintf(w, "\nswitchyard-debug's bundles (switchyard_debug_bundles_total at the end of the run):")
		for _, k := range slices.Sorted(maps.Keys(b)) {
			fmt.Fprintf(w, " %s %.0f", k, b[k])
		}
		fmt.Fprintln(w)
	}
	if s := r.OTLPSink; s != nil {
		fmt.Fprintf(w, "\nOTLP sink (switchyard-otel's exporter): %d POST /v1/traces, %d bytes received\n", s.Requests, s.Bytes)
	}

	if len(r.Fanout) > 0 {
		if err := printFanout(w, r.Fanout); err != nil {
			return err
		}
	}
	if r.Wasted != nil {
		if err := printWasted(w, r.Wasted); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "\nResident memory (VmHWM peak / VmRSS now, MiB), after each mode:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "after\tprocess\tpeak\tnow\t")
	for _, m := range r.Memory {
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t\n", m.After, m.Process, float64(m.HWMKiB)/1024, float64(m.RSSKiB)/1024)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	for _, c := range r.Cells {
		if c.ErrorSample != "" {
			fmt.Fprintf(w, "\nfirst error of %s %s %s: %s", c.Mode, kindName(c.Stream), c.Target, c.ErrorSample)
		}
	}

	fmt.Fprintln(w, "\nTargets:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range r.Checks {
		mark := "FAIL"
		if c.Pass {
			mark = "pass"
		}
		prec := 1
		if c.Unit == "x" {
			prec = 2 // multiples near their limit (1.1x, 0.95x)
		}
		turns := ""
		if c.Turns != nil {
			turns = fmt.Sprintf("turns %.2f-%.2f", c.Turns[0], c.Turns[1])
		}
		fmt.Fprintf(tw, "  %s\t%s\t%.*f %s\ttarget %s\t%s\t\n", mark, c.Name, prec, c.Value, c.Unit, c.Target, turns)
	}
	return tw.Flush()
}

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }

func signed(v float64) string { return fmt.Sprintf("%+.0f", v) }

// turnRange is the least and the most over the rounds of a's value over
// b's in the same round (nil without a round with both). v is NaN for a
// turn that did not measure it; a throughput of 0 is a measurement.
func turnRange(a, b []turn, v func(turn) float64) *[2]float64 {
	var r *[2]float64
	for i := range min(len(a), len(b)) {
		if math.IsNaN(v(a[i])) || math.IsNaN(v(b[i])) {
			continue // not measured in that turn
		}
		x := ratio(v(a[i]), v(b[i]))
		if x == nil {
			continue
		}
		if r == nil {
			r = &[2]float64{*x, *x}
		}
		r[0], r[1] = min(r[0], *x), max(r[1], *x)
	}
	return r
}

// turnCPU is a turn's CPU per request, NaN when it was not read.
func turnCPU(t turn) float64 {
	if t.CPUUs <= 0 {
		return math.NaN()
	}
	return t.CPUUs
}

// spread is " (lo-hi)" of a turn range, "" without one.
func spread(r *[2]float64) string {
	if r == nil {
		return ""
	}
	return fmt.Sprintf(" (%.2f-%.2f)", r[0], r[1])
}

// times is a multiple to prec decimals, n/a when there is none.
func times(v *float64, prec int) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.*fx", prec, *v)
}

// writeJSON writes the report to path, creating its directory.
func writeJSON(path string, r any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// printWhere prints, for each mode and kind measured with -perf, each
// target's CPU per request split by where its perf samples fell.
func printWhere(w io.Writer, cells []cellResult) error {
	type key struct {
		mode   string
		stream bool
	}
	var order []key
	byKey := map[key][]cellResult{}
	for _, c := range cells {
		if c.Where == nil {
			continue
		}
		k := key{c.Mode, c.Stream}
		if byKey[k] == nil {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], c)
	}
	if len(order) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nWhere each process's CPU per request goes (-perf: its samples in its last turn, perf record -g at 4 kHz,")
	fmt.Fprintln(w, "each charged to the first place its stack is under; the shares of the cpu column above), us:")
	for _, k := range order {
		cs := byKey[k]
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%s %s\t", k.mode, kindName(k.stream))
		for _, c := range cs {
			fmt.Fprintf(tw, "%s\t", c.Target)
		}
		fmt.Fprintln(tw)
		for _, p := range perfPlaces {
			fmt.Fprintf(tw, "%s\t", p.name)
			for _, c := range cs {
				us := 0.0
				for _, pl := range c.Where.Places {
					if pl.Place == p.name {
						us = pl.Us
					}
				}
				fmt.Fprintf(tw, "%.1f\t", us)
			}
			fmt.Fprintln(tw)
		}
		row := func(name string, v func(c cellResult) string) {
			fmt.Fprintf(tw, "%s\t", name)
			for _, c := range cs {
				fmt.Fprintf(tw, "%s\t", v(c))
			}
			fmt.Fprintln(tw)
		}
		row("total (cpu; user alone where the kernel was not sampled)", func(c cellResult) string {
			if c.Where.UserOnly {
				return fmt.Sprintf("%.1f", c.CPU.UserUs)
			}
			return fmt.Sprintf("%.1f", c.CPU.TotalUs)
		})
		row("in the kernel", func(c cellResult) string {
			if c.Where.UserOnly {
				return "not sampled"
			}
			return fmt.Sprintf("%.0f%%", 100*c.Where.Kernel)
		})
		row("samples", func(c cellResult) string { return fmt.Sprint(c.Where.Samples) })
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
