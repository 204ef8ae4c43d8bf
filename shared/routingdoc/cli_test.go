package routingdoc

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/testkit"
)

// TestNatsCLI: the commands the package documentation shows operators
// print what it says against a running Switchyard.
func TestNatsCLI(t *testing.T) {
	bin := testkit.NatsCLI(t)
	s := startServer(t)
	n := join(t, s.ClientURL())
	ctx := ctxFor(t)
	if _, err := n.store.Import(ctx, doc(1), Meta{By: "proxy-a", Comment: "from gateway.yaml"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.store.Activate(ctx, doc(2), Meta{By: "alice"}, 0); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, args ...string) []byte {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		home := t.TempDir()
		cmd := exec.CommandContext(cctx, bin, append([]string{"--server", s.ClientURL()}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("nats %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		t.Logf("nats %s:\n%s", strings.Join(args, " "), out)
		return out
	}

	t.Run("kv ls", func(t *testing.T) {
		if out := run(t, "kv", "ls", "--names"); !strings.Contains(string(out), bus.BucketConfig) {
			t.Fatalf("nats kv ls does not list %s", bus.BucketConfig)
		}
		out := string(run(t, "kv", "ls", bus.BucketConfig))
		for _, key := range []string{KeyActive, "version.1", "version.2"} {
			if !strings.Contains(out, key) {
				t.Errorf("nats kv ls %s does not list %s", bus.BucketConfig, key)
			}
		}
	})

	t.Run("kv get active", func(t *testing.T) {
		var p Pointer
		if err := json.Unmarshal(bytes.TrimSpace(run(t, "kv", "get", bus.BucketConfig, KeyActive, "--raw")), &p); err != nil {
			t.Fatal(err)
		}
		if p.V != SchemaVersion || p.Version != 2 || p.By != "alice" || p.At.IsZero() {
			t.Fatalf("pointer %+v", p)
		}
	})

	t.Run("kv get version", func(t *testing.T) {
		raw := bytes.TrimSpace(run(t, "kv", "get", bus.BucketConfig, "version.1", "--raw"))
		var fields map[string]any
		if err := json.Unmarshal(raw, &fields); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"v", "version", "document", "sha256", "by", "at", "comment", "source"} {
			if _, ok := fields[f]; !ok {
				t.Errorf("version.1 lacks %q: %s", f, raw)
			}
		}
		v, err := decodeVersion("version.1", 1, raw)
		if err != nil || v.Document != string(doc(1)) || v.Source != SourceImport || v.Comment != "from gateway.yaml" {
			t.Fatalf("version.1: %+v %v", v, err)
		}
	})

	t.Run("kv history active", func(t *testing.T) {
		// A table (values cut short) with one PUT row per activation;
		// kv get --revision shows one in full.
		var revs []string
		for line := range strings.SplitSeq(string(run(t, "kv", "history", bus.BucketConfig, KeyActive)), "\n") {
			cols := strings.Split(line, "│")
			if len(cols) > 4 && strings.TrimSpace(cols[1]) == KeyActive && strings.TrimSpace(cols[3]) == "PUT" {
				revs = append(revs, strings.TrimSpace(cols[2]))
			}
		}
		if len(revs) != 2 {
			t.Fatalf("history rows for revisions %v, want the two activations", revs)
		}
		var p Pointer
		raw := run(t, "kv", "get", bus.BucketConfig, KeyActive, "--revision", revs[0], "--raw")
		if err := json.Unmarshal(bytes.TrimSpace(raw), &p); err != nil || p.Version != 1 || p.By != "proxy-a" {
			t.Fatalf("first activation: %+v %v", p, err)
		}
	})

	t.Run("sub", func(t *testing.T) {
		// nats sub subscribes some time after it starts: activate until it
		// has printed one event and exited.
		cmd := exec.CommandContext(ctx, bin, "--server", s.ClientURL(), "sub", EventsFilter, "--count", "1")
		home := t.TempDir()
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for weight := 10; ; weight++ {
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("nats sub: %v\n%s", err, out.String())
				}
				t.Logf("nats sub %s --count 1:\n%s", EventsFilter, out.String())
				for _, want := range []string{"switchyard.events.config.activate", `"kind":"config"`, `"source":"activate"`, `"by":"alice"`} {
					if !strings.Contains(out.String(), want) {
						t.Errorf("nats sub output lacks %s", want)
					}
				}
				return
			case <-tick.C:
				if _, err := n.store.Activate(ctx, doc(weight), Meta{By: "alice"}, 0); err != nil {
					t.Fatal(err)
				}
			case <-ctx.Done():
				t.Fatalf("nats sub saw nothing:\n%s", out.String())
			}
		}
	})
}
