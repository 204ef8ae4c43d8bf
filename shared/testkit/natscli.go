package testkit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// NatsCLI finds the nats CLI: on PATH, or where go install puts it. When
// it is not there the test is skipped, saying how to install it (failed
// instead with CI=true: see MissingTool).
func NatsCLI(tb testing.TB) string {
	tb.Helper()
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if d := os.Getenv("GOPATH"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "nats")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	MissingTool(tb, "nats CLI not found on PATH or in $GOBIN/$GOPATH/bin; install it with "+
		"`go install github.com/nats-io/natscli/nats@v0.5.0` (.ci/run does) to run this test")
	return ""
}

// NatsCLICommand is the nats CLI at bin against url with args, with a
// private configuration directory (no context of the machine's user).
func NatsCLICommand(ctx context.Context, tb testing.TB, bin, url string, args ...string) *exec.Cmd {
	tb.Helper()
	home := tb.TempDir()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--server", url}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=")
	return cmd
}
