package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// childEnv marks a process started by the bench as one of its own helper
// processes (floor, proxy harness, upstream harness), so that a test binary
// re-executed as a child runs the child instead of the tests.
const childEnv = "BENCH_CHILD"

// repoRoot is the directory holding go.work, searched upwards from the
// working directory (the repo root under make, tools/bench under go test).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repo root: no go.work above the working directory")
		}
		dir = parent
	}
}

// goBuild builds the main package pkg (relative to root) into dir/name.
func goBuild(ctx context.Context, root, pkg, dir, name string) (string, error) {
	out := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// hasMain reports whether dir holds a Go main package.
func hasMain(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err == nil && bytes.Contains(b, []byte("package main")) {
			return true
		}
	}
	return false
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a free port: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// child is a helper process: the upstream, the proxy or the floor.
type child struct {
	name string
	addr string // where it serves
	cmd  *exec.Cmd
	logs *tail
	done chan struct{}
	err  error // set before done closes
	once sync.Once
}

// startChild runs path with args and env added to the bench's own
// environment, and waits until addr accepts connections.
func startChild(ctx context.Context, name, addr, path string, args, env []string) (*child, error) {
	c, err := startProcess(name, path, args, env)
	if err != nil {
		return nil, err
	}
	c.addr = addr
	if err := c.waitReady(ctx, 60*time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// startProcess runs path with args and env added to the bench's own
// environment, without waiting for it to serve.
func startProcess(name, path string, args, env []string) (*child, error) {
	c := &child{name: name, logs: &tail{max: 4 << 10}, done: make(chan struct{})}
	c.cmd = exec.Command(path, args...)
	c.cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	c.cmd.Stdout = c.logs
	c.cmd.Stderr = c.logs
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// waitReady polls addr until it accepts a connection, the process exits,
// or the timeout passes.
func (c *child) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := net.DialTimeout("tcp", c.addr, time.Second)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-c.done:
			return fmt.Errorf("%s exited before serving on %s: %v\n%s", c.name, c.addr, c.err, c.logs)
		case <-ctx.Done():
			return fmt.Errorf("%s not serving on %s: %w\n%s", c.name, c.addr, ctx.Err(), c.logs)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM, waits up to 10 s, then kills. It is idempotent.
func (c *child) stop() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
}

// memory is a process's resident memory, from /proc/<pid>/status.
type memory struct {
	HWMKiB int64 `json:"vm_hwm_kib"` // peak resident set
	RSSKiB int64 `json:"vm_rss_kib"` // resident set now
}

func (c *child) usage() (usage, error) {
	return readUsage(c.cmd.Process.Pid)
}

func (c *child) memory() (memory, error) {
	return readMemory(c.cmd.Process.Pid)
}

func readMemory(pid int) (memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	defer f.Close()
	var m memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return memory{}, fmt.Errorf("read memory of pid %d: %s: %w", pid, k, err)
		}
		if k == "VmHWM" {
			m.HWMKiB = n
		} else {
			m.RSSKiB = n
		}
	}
	return m, sc.Err()
}

// tail keeps the last max bytes written to it, for error messages.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// usage is what a process has used so far: CPU time from /proc/<pid>/stat
// (user and system, all its threads, exited ones included) and system
// calls from /proc/<pid>/io (read-like and write-like: socket reads and
// writes are most of a proxy's).
type usage struct {
	User   time.Duration `json:"user_ns"`
	Sys    time.Duration `json:"sys_ns"`
	Reads  uint64        `json:"read_syscalls"`
	Writes uint64        `json:"write_syscalls"`
}

// clockTick is the unit of /proc/<pid>/stat's times: USER_HZ is 100 on
// every Linux architecture the bench runs on.
const clockTick = 10 * time.Millisecond

func (u usage) add(v usage) usage {
	return usage{User: u.User + v.User, Sys: u.Sys + v.Sys, Reads: u.Reads + v.Reads, Writes: u.Writes + v.Writes}
}

func (u usage) sub(v usage) usage {
	return usage{User: u.User - v.User, Sys: u.Sys - v.Sys, Reads: u.Reads - v.Reads, Writes: u.Writes - v.Writes}
}

func readUsage(pid int) (usage, error) {
	var u usage
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses, so
	// the fields are counted from the last ')'. utime and stime are the
	// 14th and 15th fields, the 12th and 13th after comm.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return u, fmt.Errorf("read CPU time of pid %d: unexpected /proc/%d/stat", pid, pid)
	}
	for j, d := range []*time.Duration{&u.User, &u.Sys} {
		n, err := strconv.ParseInt(f[11+j], 10, 64)
		if err != nil {
			return u, fmt.Errorf("read CPU time of pid %d: %w", pid, err)
		}
		*d = time.Duration(n) * clockTick
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return u, fmt.Errorf("read system calls of pid %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		var dst *uint64
		switch k {
		case "syscr":
			dst = &u.Reads
		case "syscw":
			dst = &u.Writes
		default:
			continue
		}
		if *dst, err = strconv.ParseUint(strings.TrimSpace(v), 10, 64); err != nil {
			return u, fmt.Errorf("read system calls of pid %d: %s: %w", pid, k, err)
		}
	}
	return u, nil
}
