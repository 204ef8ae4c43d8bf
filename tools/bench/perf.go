package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// With -perf, each target's process is sampled with Linux perf during its
// last turn of each cell, and its CPU time per request (from /proc, over
// every turn) is split by where the samples fall. The split is shares of
// the samples, so neither perf's own cost nor the moment it attaches moves
// the absolute figures.

// perfPlaces are where a sample is charged: the first whose test its stack
// passes, in this order (a stream's body writer before the server, the
// upstream exchange before the rest of the handler).
var perfPlaces = []struct {
	name string
	in   func(stack string) bool
}{
	{"body writer: upstream reads", func(s string) bool {
		return has(s, "NewStreamReader.func1") && (has(s, "clientStreamBody).Read") || has(s, "requestStream).Read"))
	}},
	{"body writer: flushes", func(s string) bool {
		return has(s, "NewStreamReader.func1") && (has(s, "bufio.(*Writer).Flush") || has(s, "fasthttputil."))
	}},
	{"body writer: own work", func(s string) bool { return has(s, "NewStreamReader.func1") }},
	{"upstream exchange", func(s string) bool {
		return has(s, "(*App).handler") && (has(s, "fasthttp.(*Client).Do") || has(s, "fasthttp.(*HostClient).Do"))
	}},
	{"handler: own work", func(s string) bool { return has(s, "(*App).handler") }},
	{"server: request in, response out", func(s string) bool { return has(s, "workerFunc") }},
	{"garbage collection", func(s string) bool { return has(s, "gcBgMarkWorker") || has(s, "gcDrain") }},
	{"scheduler, sysmon, other", func(string) bool { return true }},
}

func has(s, sub string) bool { return strings.Contains(s, sub) }

// place is one row of a process's split.
type place struct {
	Place string  `json:"place"`
	Share float64 `json:"share"`          // of the samples
	Us    float64 `json:"us_per_request"` // Share of the cell's CPU per request
}

// perfSplit is where a process's samples fell during one turn.
type perfSplit struct {
	Samples int     `json:"samples"`
	Kernel  float64 `json:"kernel_share"` // samples in the kernel
	Places  []place `json:"places"`
}

// splitPerfScript reads `perf script -F ip,sym` output (a sample's frames,
// leaf first, one per line; a blank line ends a sample) and charges each
// sample to its place.
func splitPerfScript(r io.Reader) (perfSplit, error) {
	counts := make([]int, len(perfPlaces))
	var (
		split  perfSplit
		kernel int
		stack  strings.Builder
	)
	end := func() {
		if stack.Len() == 0 {
			return
		}
		s := stack.String()
		for i, p := range perfPlaces {
			if p.in(s) {
				counts[i]++
				break
			}
		}
		if has(s, "entry_SYSCALL_64") || has(s, "\nasm_") {
			kernel++
		}
		split.Samples++
		stack.Reset()
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			end()
			continue
		}
		// "ip sym+0xoff": the symbol is what is matched.
		if _, sym, ok := strings.Cut(line, " "); ok {
			line = sym
		}
		stack.WriteString("\n")
		stack.WriteString(line)
	}
	end()
	if err := sc.Err(); err != nil {
		return split, err
	}
	if split.Samples == 0 {
		return split, errors.New("perf recorded no samples")
	}
	n := float64(split.Samples)
	split.Kernel = float64(kernel) / n
	for i, p := range perfPlaces {
		if counts[i] > 0 {
			split.Places = append(split.Places, place{Place: p.name, Share: float64(counts[i]) / n})
		}
	}
	return split, nil
}

// charge sets each place's µs per request from the process's CPU per
// request.
func (s *perfSplit) charge(cpuUs float64) {
	for i := range s.Places {
		s.Places[i].Us = s.Places[i].Share * cpuUs
	}
}

// perfRecording is perf record attached to one process.
type perfRecording struct {
	cmd  *exec.Cmd
	out  string
	logs bytes.Buffer
}

// startPerf samples pid's stacks (cpu-clock, 4 kHz) into out until stop.
func startPerf(ctx context.Context, pid int, out string) (*perfRecording, error) {
	p := &perfRecording{out: out}
	p.cmd = exec.CommandContext(ctx, "perf", "record", "-q", "-e", "cpu-clock", "-F", "4000", "-g",
		"-p", fmt.Sprint(pid), "-o", out)
	p.cmd.Stdout, p.cmd.Stderr = &p.logs, &p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start perf record (-perf needs perf: Debian's linux-perf): %w", err)
	}
	return p, nil
}

// stop ends the recording (perf writes its file on SIGINT) and splits it.
func (p *perfRecording) stop(ctx context.Context) (perfSplit, error) {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done: // perf exits non-zero on SIGINT on some versions: the file decides
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
		return perfSplit{}, fmt.Errorf("perf record did not stop: %s", p.logs.Bytes())
	}
	defer os.Remove(p.out)
	cmd := exec.CommandContext(ctx, "perf", "script", "-F", "ip,sym", "-i", p.out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return perfSplit{}, err
	}
	if err := cmd.Start(); err != nil {
		return perfSplit{}, fmt.Errorf("perf script: %w", err)
	}
	split, serr := splitPerfScript(stdout)
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		return perfSplit{}, fmt.Errorf("perf script: %w: %s %s", err, stderr.Bytes(), p.logs.Bytes())
	}
	return split, serr
}
