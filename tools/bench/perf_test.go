package main

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A few samples as `perf script -F ip,sym` prints them (leaf first).
const perfScript = `
	  4a1b2c runtime.memmove+0x1c
	  4a2b3c switchyard.dev/shared/jsonfield.scanValid+0x40
	  4a3b4c switchyard.dev/services/proxy.readBody+0x80
	  4a4b5c github.com/gofiber/fiber/v2.(*App).handler+0x10
	  4a5b6c github.com/valyala/fasthttp.(*workerPool).workerFunc+0x9

	ffffffff81000000 entry_SYSCALL_64_after_hwframe+0x76
	  4b1b2c internal/runtime/syscall/linux.Syscall6+0xe
	  4b2b3c net.(*conn).Write+0x20
	  4b3b4c github.com/valyala/fasthttp.(*HostClient).Do+0x30
	  4b4b5c github.com/valyala/fasthttp.(*Client).Do+0x30
	  4b5b6c github.com/gofiber/fiber/v2.(*App).handler+0x10
	  4b6b7c github.com/valyala/fasthttp.(*workerPool).workerFunc+0x9

	  4c1b2c bufio.(*Writer).Flush+0x10
	  4c2b3c switchyard.dev/services/proxy.(*relay).run+0x99
	  4c3b4c github.com/valyala/fasthttp.NewStreamReader.func1+0x20

	  4d1b2c switchyard.dev/shared/sse.(*Reader).Next+0x10
	  4d2b3c switchyard.dev/services/proxy.(*relay).run+0x99
	  4d3b4c github.com/valyala/fasthttp.NewStreamReader.func1+0x20

	  4e1b2c github.com/valyala/fasthttp.(*Server).serveConn+0x10
	  4e2b3c github.com/valyala/fasthttp.(*workerPool).workerFunc+0x9

	  4f1b2c runtime.gcDrain+0x10
	  4f2b3c runtime.gcBgMarkWorker+0x10

	  501b2c runtime.findRunnable+0x10
	  502b3c runtime.schedule+0x10
	ffffffff81000010 asm_sysvec_apic_timer_interrupt+0x1a

`

func TestSplitPerfScript(t *testing.T) {
	split, err := splitPerfScript(strings.NewReader(perfScript))
	if err != nil {
		t.Fatal(err)
	}
	if split.Samples != 7 {
		t.Fatalf("samples = %d, want 7", split.Samples)
	}
	want := map[string]float64{
		"handler: own work":                1,
		"upstream exchange":                1,
		"body writer: flushes":             1,
		"body writer: own work":            1,
		"server: request in, response out": 1,
		"garbage collection (background; assists count where they ran)": 1,
		"scheduler, sysmon, other":                                      1,
	}
	split.charge(&cpuCost{TotalUs: 70}) // 10 µs per sample
	got := map[string]float64{}
	for _, p := range split.Places {
		got[p.Place] = p.Share * 7
		if math.Abs(p.Us-10*p.Share*7) > 1e-9 {
			t.Errorf("%s: %.2f us, want %.2f", p.Place, p.Us, 10*p.Share*7)
		}
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("%s: %.2f samples, want %.0f (all: %v)", k, got[k], v, got)
		}
	}
	if math.Abs(split.Kernel-2.0/7) > 1e-9 {
		t.Errorf("kernel share %.3f, want 2/7", split.Kernel)
	}
	// Where perf sampled user space alone, the shares split user time.
	split.UserOnly = true
	split.charge(&cpuCost{TotalUs: 70, UserUs: 35})
	for _, p := range split.Places {
		if math.Abs(p.Us-5*p.Share*7) > 1e-9 {
			t.Errorf("user only: %s: %.2f us, want %.2f", p.Place, p.Us, 5*p.Share*7)
		}
	}
	if _, err := splitPerfScript(strings.NewReader("\n\n")); err == nil {
		t.Error("no samples: no error")
	}
}

// -perf names functions from symbol tables: go build keeps one, go test
// (like go run) strips it, a file that is not a binary has none, and a
// bench or baseline proxy without one is refused, by name, before any
// target starts.
func TestHasSymbols(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := hasSymbols(exe); err == nil {
		t.Error("the test binary (stripped by go test) has symbols")
	}
	dir := t.TempDir()
	notELF := filepath.Join(dir, "proxy")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := hasSymbols(notELF); err == nil {
		t.Error("a shell script has symbols")
	}
	if err := perfReady(exe, ""); err == nil || !strings.Contains(err.Error(), "go build") {
		t.Errorf("perfReady of a stripped bench: %v", err)
	}
	if testing.Short() {
		return
	}
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "built")
	cmd := exec.Command("go", "build", "-o", bin, src)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	if err := hasSymbols(bin); err != nil {
		t.Errorf("a go build binary: %v", err)
	}
	if err := perfReady(bin, notELF); err == nil || !strings.Contains(err.Error(), "-baseline-proxy") {
		t.Errorf("perfReady with a baseline without symbols: %v", err)
	}
	err = perfReady(bin, bin)
	if _, lerr := exec.LookPath("perf"); lerr != nil {
		if err == nil || !strings.Contains(err.Error(), "perf on the PATH") {
			t.Errorf("perfReady without perf: %v", err)
		}
	} else if err != nil {
		t.Errorf("perfReady with symbols and perf: %v", err)
	}
}
