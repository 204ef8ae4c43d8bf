package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
)

// binaries are the commands buildBinary built, kept for the life of the
// test binary (TestMain removes the directory): each package is built once,
// however many tests run it.
var binaries struct {
	mu    sync.Mutex
	dir   string
	built map[string]builtBinary
}

type builtBinary struct {
	path string
	err  error
}

// buildBinary builds the command pkg (an import path this module can
// resolve: a dependency such as github.com/nats-io/nats-server/v2, or a
// workspace command such as switchyard.dev/services/proxy/cmd/proxy) once
// per test binary and returns the path of the executable. It builds with
// the race detector and build tags of this test binary: the packages the
// test binary links (the services, the embedded nats-server) are then in
// the build cache already, and only what the command adds is compiled
// before it is linked (a few seconds, where a build with other settings
// would compile everything again, a minute on a 2-core machine). A failed
// build fails every test that asks for it.
func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	b, ok := binaries.built[pkg]
	if !ok {
		b = goBuild(pkg)
		if binaries.built == nil {
			binaries.built = map[string]builtBinary{}
		}
		binaries.built[pkg] = b
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// goBuild builds pkg into binaries.dir (created on first use), under
// binaries.mu.
func goBuild(pkg string) builtBinary {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			return builtBinary{err: fmt.Errorf("no go command to build %s with: %w", pkg, err)}
		}
	}
	if binaries.dir == "" {
		dir, err := os.MkdirTemp("", "switchyard-e2e-bin-")
		if err != nil {
			return builtBinary{err: fmt.Errorf("build %s: %w", pkg, err)}
		}
		binaries.dir = dir
	}
	// Each build has a directory of its own, and go build names the
	// executable (nats-server for github.com/nats-io/nats-server/v2).
	dir := filepath.Join(binaries.dir, fmt.Sprint(len(binaries.built)))
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "-race" && s.Value == "true":
				args = append(args, "-race")
			case s.Key == "-tags" && s.Value != "":
				args = append(args, "-tags", s.Value)
			}
		}
	}
	cmd := exec.Command(goBin, append(args, pkg)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return builtBinary{err: fmt.Errorf("go build %s: %v\n%s", pkg, err, out)}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		return builtBinary{err: fmt.Errorf("go build %s: want one executable in %s, got %d (%v)", pkg, dir, len(entries), err)}
	}
	return builtBinary{path: filepath.Join(dir, entries[0].Name())}
}

// removeBinaries deletes what buildBinary built (TestMain, at the end).
func removeBinaries() {
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	if binaries.dir != "" {
		_ = os.RemoveAll(binaries.dir)
		binaries.dir = ""
	}
}
