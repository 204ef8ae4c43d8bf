package natsembed

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// serverModule is the import path prefix of nats-server's packages.
const serverModule = "github.com/nats-io/nats-server/"

// TestServiceBinariesDoNotLinkServer fails when a standalone service
// binary links nats-server again (say, a non-test file of a package it
// imports starts importing natsembed or the server): they connect to an
// external NATS, and only the all-in-one launcher, the bench tool and
// tests run a server in-process. The launcher is listed too, to show
// that the check sees the server where it is linked.
func TestServiceBinariesDoNotLinkServer(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the binaries' dependencies: %v", err)
	}
	root, err := workspaceRoot()
	if err != nil {
		t.Fatal(err)
	}
	services := []string{
		"switchyard.dev/services/proxy/cmd/proxy",
		"switchyard.dev/services/prober/cmd/prober",
		"switchyard.dev/services/admin/cmd/admin",
	}
	const launcher = "switchyard.dev/tools/cmd/switchyard"

	// .Deps is each package's transitive imports: per package, what
	// `go list -deps` lists for it.
	args := append([]string{"list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}"}, services...)
	cmd := exec.Command(goBin, append(args, launcher)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"))
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}

	deps := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			deps[f[0]] = f[1:]
		}
	}
	linksServer := func(pkg string) []string {
		var server []string
		for _, d := range deps[pkg] {
			if strings.HasPrefix(d, serverModule) {
				server = append(server, d)
			}
		}
		return server
	}
	for _, pkg := range services {
		if _, ok := deps[pkg]; !ok {
			t.Errorf("go list printed nothing for %s:\n%s", pkg, out)
			continue
		}
		if s := linksServer(pkg); len(s) > 0 {
			t.Errorf("%s links nats-server (%s); only the launcher, the bench tool and tests may import switchyard.dev/shared/natsembed",
				pkg, strings.Join(s, ", "))
		}
	}
	if len(linksServer(launcher)) == 0 {
		t.Errorf("%s does not link nats-server according to go list: the check above would not notice it either", launcher)
	}
}

// workspaceRoot is the directory of the go.work above the working
// directory (the package's own directory under go test).
func workspaceRoot() (string, error) {
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
			return "", errors.New("no go.work above the test's directory")
		}
		dir = parent
	}
}
