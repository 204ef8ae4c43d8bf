package main

import (
	"bufio"
	"bytes"
	"debug/elf"
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
// the absolute figures. The places are those of a Go fiber/fasthttp
// server, so only Switchyard's proxies and the floor are split.

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
	{"garbage collection (background; assists count where they ran)", func(s string) bool {
		return has(s, "gcBgMarkWorker") || has(s, "gcDrain")
	}},
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
	// UserOnly: perf could not sample the kernel, so the places split the
	// process's user time only.
	UserOnly bool    `json:"user_only,omitempty"`
	Places   []place `json:"places"`
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
// request (user time alone when only user space was sampled).
func (s *perfSplit) charge(c *cpuCost) {
	us := c.TotalUs
	if s.UserOnly {
		us = c.UserUs
	}
	for i := range s.Places {
		s.Places[i].Us = s.Places[i].Share * us
	}
}

// perfRecording is perf record attached to one process.
type perfRecording struct {
	cmd  *exec.Cmd
	out  string
	logs bytes.Buffer
	done chan error // perf record's exit
}

// startPerf samples pid's stacks (cpu-clock, 4 kHz) into out until stop or
// abort. It is tied to no context: perf must end by SIGINT to write its
// file, so stop and abort end it, and the caller calls one of them.
func startPerf(pid int, out string) (*perfRecording, error) {
	p := &perfRecording{out: out, done: make(chan error, 1)}
	p.cmd = exec.Command("perf", "record", "-e", "cpu-clock", "-F", "4000", "-g", "-p", fmt.Sprint(pid), "-o", out)
	p.cmd.Stdout, p.cmd.Stderr = &p.logs, &p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start perf record (-perf needs perf: Debian's linux-perf): %w", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

// abort ends the recording and drops it (a nil p does nothing).
func (p *perfRecording) abort() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	_ = os.Remove(p.out)
}

// stop ends the recording (perf writes its file on SIGINT) and splits it.
func (p *perfRecording) stop() (perfSplit, error) {
	defer os.Remove(p.out)
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done: // perf exits non-zero on SIGINT on some versions: the file decides
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return perfSplit{}, fmt.Errorf("perf record did not stop: %s", p.logs.Bytes())
	}
	// Where perf may not sample the kernel (perf_event_paranoid, not
	// root), it samples user space alone and says so only in a warning.
	ev, err := exec.Command("perf", "evlist", "-v", "-i", p.out).CombinedOutput()
	if err != nil {
		return perfSplit{}, fmt.Errorf("perf evlist: %w: %s %s", err, ev, p.logs.Bytes())
	}
	cmd := exec.Command("perf", "script", "-F", "ip,sym", "-i", p.out)
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
	split.UserOnly = bytes.Contains(ev, []byte("exclude_kernel: 1"))
	return split, serr
}

// perfReady checks what -perf needs: a symbol table in self, the bench's
// own binary (the floor runs in a child of it, and perf names the floor's
// functions from it), which go run leaves out, and in the baseline proxy
// binary when there is one; then perf on the PATH.
func perfReady(self, baseline string) error {
	if err := hasSymbols(self); err != nil {
		return fmt.Errorf("-perf: %w: build the bench with go build -o /tmp/bench ./tools/bench and run /tmp/bench (go run strips it)", err)
	}
	if baseline != "" {
		if err := hasSymbols(baseline); err != nil {
			return fmt.Errorf("-perf: -baseline-proxy: %w: build it without -ldflags=-s", err)
		}
	}
	if _, err := exec.LookPath("perf"); err != nil {
		return errors.New("-perf needs perf on the PATH (Debian: apt-get install linux-perf)")
	}
	return nil
}

// hasSymbols reports whether the ELF binary at path has the symbol table
// perf names a Go process's functions from.
func hasSymbols(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("read %s's symbols: %w", path, err)
	}
	defer f.Close()
	if f.Section(".symtab") == nil {
		return fmt.Errorf("%s has no symbol table", path)
	}
	return nil
}

// perfSplits reports whether -perf splits t's process: the places are a
// fiber/fasthttp server's (Switchyard's proxies and the fasthttp floor),
// not a peer's or net/http's.
func perfSplits(t target) bool {
	return t.Proc != nil && (strings.HasPrefix(t.Name, "switchyard") || t.Name == "floor" || t.Name == "floor-fasthttp")
}
