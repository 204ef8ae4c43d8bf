package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/routingdoc"
	"switchyard.dev/shared/testkit"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp (under fiber) refreshes its Date header from a
		// goroutine it starts once per process, and its worker-pool
		// cleaner notices Stop only after its current sleep.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

type addrs struct{ proxy, prober, admin string }

// writeConfig writes a config with one provider (optional when asked) whose
// key comes from TEST_PROVIDER_KEY, an embedded NATS on a random port and
// the services on addrs.
func writeConfig(t *testing.T, optional bool, a addrs) string {
	t.Helper()
	dir := t.TempDir()
	y := `log:
  format: json
  level: debug
nats:
  embedded:
    listen: 127.0.0.1:0
    store_dir: ` + filepath.Join(dir, "nats") + `
proxy:
  listen: ` + a.proxy + `
prober:
  listen: ` + a.prober + `
admin:
  listen: ` + a.admin + `
providers:
  - name: fake-openai
    type: openai
    base_url: http://127.0.0.1:9/v1
    optional: ` + map[bool]string{true: "true", false: "false"}[optional] + `
    keys:
      - id: k1
        secret: env:TEST_PROVIDER_KEY
    models:
      - name: demo-model
`
	path := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		environ []string
		wantErr string
	}{
		{name: "help", args: []string{"-h"}},
		{name: "unknown flag", args: []string{"-nope"}, wantErr: "flag provided but not defined"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "missing file", args: []string{"-config", "/nonexistent/gw.yaml"}, wantErr: "/nonexistent/gw.yaml"},
		{name: "file from env", environ: []string{"SWITCHYARD_CONFIG=/nonexistent/env.yaml"}, wantErr: "/nonexistent/env.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), tt.args, tt.environ, &out, nil)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("run: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("run error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestEveryProviderSkipped(t *testing.T) {
	path := writeConfig(t, true, addrs{testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t)})
	var out testkit.SyncBuffer
	err := run(context.Background(), []string{"-config", path}, nil, &out, nil)
	if !errors.Is(err, errNoProvider) {
		t.Fatalf("run error = %v, want errNoProvider", err)
	}
	for _, want := range []string{"no provider is enabled", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY", "make demo"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if !strings.Contains(out.String(), "provider fake-openai skipped") {
		t.Errorf("output does not name the skipped provider:\n%s", out.String())
	}
}

func TestLaunchRunsEverythingAndStops(t *testing.T) {
	a := addrs{proxy: testkit.FreeAddr(t), prober: testkit.FreeAddr(t), admin: testkit.FreeAddr(t)}
	path := writeConfig(t, false, a)
	environ := []string{"TEST_PROVIDER_KEY=sk-test-secret-value"}

	ctx, cancel := context.WithCancel(context.Background())
	var logs testkit.SyncBuffer
	done := make(chan error, 1)
	opts := options{configPath: path, fakes: []fakeSpec{{name: "fake-openai", addr: "127.0.0.1:0"}}}
	go func() { done <- launch(ctx, opts, environ, &logs) }()

	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	for _, url := range []string{"http://" + a.prober + "/readyz", "http://" + a.admin + "/readyz"} {
		testkit.CheckFor(t, 15*time.Second, 10*time.Millisecond, func() error {
			resp, err := http.Get(url)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return errors.New(resp.Status)
			}
			return nil
		})
	}
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		c, err := net.Dial("tcp", a.proxy)
		if err == nil {
			c.Close()
		}
		return err
	})
	http.DefaultClient.CloseIdleConnections()

	out := logs.String()
	for _, want := range []string{
		"switchyard is running", "http://" + a.proxy, "http://" + a.prober, "http://" + a.admin,
		"kv ls", "embedded NATS server running", "fake provider listening",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q", want)
		}
	}

	cancel()
	stopped = true
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("launch: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("launch did not return after cancel")
	}
	out = logs.String()
	if strings.Contains(out, "sk-test-secret-value") {
		t.Error("a provider secret was logged")
	}
	if !strings.Contains(out, "embedded NATS server stopped") {
		t.Error("embedded NATS server not stopped")
	}
	// Every port is free again.
	for _, addr := range []string{a.proxy, a.prober, a.admin} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still in use after shutdown: %v", addr, err)
			continue
		}
		ln.Close()
	}
}

func TestLaunchFailsOnBusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	path := writeConfig(t, false, addrs{proxy: testkit.FreeAddr(t), prober: busy.Addr().String(), admin: testkit.FreeAddr(t)})
	var logs testkit.SyncBuffer
	err = launch(context.Background(), options{configPath: path}, []string{"TEST_PROVIDER_KEY=x"}, &logs)
	if err == nil || !strings.Contains(err.Error(), "prober.listen") {
		t.Fatalf("launch error = %v, want one naming prober.listen", err)
	}
}

// TestLaunchSyncsTheFile: the all-in-one launcher's embedded server keeps
// the routing configuration between starts; the file's routing is
// imported on the first start, an operator's edit of the active version
// survives a restart with the file unchanged, and an edit of the file is
// activated as a new version on the next.
func TestLaunchSyncsTheFile(t *testing.T) {
	a := addrs{proxy: testkit.FreeAddr(t), prober: testkit.FreeAddr(t), admin: testkit.FreeAddr(t)}
	path := writeConfig(t, false, a)
	environ := []string{"TEST_PROVIDER_KEY=sk-test-secret-value"}
	start := func(during ...func(natsURL string)) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		var logs testkit.SyncBuffer
		done := make(chan error, 1)
		go func() { done <- launch(ctx, options{configPath: path}, environ, &logs) }()
		testkit.CheckFor(t, 15*time.Second, 10*time.Millisecond, func() error {
			resp, err := http.Get("http://" + a.admin + "/readyz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if !strings.Contains(logs.String(), "routing configuration applied") {
				return errors.New("no routing version applied yet")
			}
			return nil
		})
		http.DefaultClient.CloseIdleConnections()
		for _, f := range during {
			m := regexp.MustCompile(`"embedded NATS server running","url":"([^"]+)"`).FindStringSubmatch(logs.String())
			if m == nil {
				t.Fatalf("no embedded NATS URL in the log:\n%s", logs.String())
			}
			f(m[1])
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("launch: %v", err)
		}
		return logs.String()
	}
	// The fleet's routing store on the running launcher's NATS server.
	withStore := func(natsURL string, f func(context.Context, *routingdoc.Store)) {
		t.Helper()
		nc, js := testkit.ConnectNATS(t, natsURL)
		defer nc.Close()
		cfg, err := config.Load(path, environ)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		res, err := bus.Setup(ctx, js, bus.SetupOptionsFrom(cfg))
		if err != nil {
			t.Fatal(err)
		}
		f(ctx, routingdoc.New(nc, res.Config, slog.New(slog.DiscardHandler)))
	}
	// An operator's edit of the active version (as swctl and the
	// dashboard make them, through routingdoc.Edit), while it runs.
	operatorEdit := func(natsURL string) {
		withStore(natsURL, func(ctx context.Context, store *routingdoc.Store) {
			if _, err := store.Edit(ctx, 0, routingdoc.Meta{By: "operator"}, func(doc []byte) ([]byte, error) {
				return append(doc, "aliases:\n  by-operator: fake-openai/demo-model\n"...), nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
	operatorEditActive := func(natsURL string) {
		withStore(natsURL, func(ctx context.Context, store *routingdoc.Store) {
			v, err := store.Active(ctx)
			if err != nil || !strings.Contains(v.Document, "by-operator") {
				t.Errorf("after a restart the active version %d lost the operator's edit (%v):\n%s", v.Version, err, v.Document)
			}
		})
	}
	kept := func(out string) bool {
		return strings.Contains(out, "routing configuration kept")
	}
	if out := start(operatorEdit); !strings.Contains(out, "routing configuration imported from the file") {
		t.Errorf("first start: the file's routing was not imported:\n%s", out)
	}
	// The operator's edit survives a restart with the file unchanged.
	if out := start(operatorEditActive); strings.Contains(out, "routing configuration of the file activated") || !kept(out) {
		t.Errorf("an unchanged file was activated again over the operator's edit:\n%s", out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, "aliases:\n  quick: fake-openai/demo-model\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := start(); !strings.Contains(out, "routing configuration of the file activated") {
		t.Errorf("an edited file was not activated:\n%s", out)
	}
}

// TestCheck: -check validates the file as a start would (a provider to
// serve included) and starts nothing: no listener, no embedded NATS.
func TestCheck(t *testing.T) {
	a := addrs{proxy: testkit.FreeAddr(t), prober: testkit.FreeAddr(t), admin: testkit.FreeAddr(t)}
	path := writeConfig(t, true, a)
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-check", "-config", path}, []string{"TEST_PROVIDER_KEY=x"}, &out, nil); err != nil {
		t.Fatalf("a valid file: %v\n%s", err, out.String())
	}
	if out.String() != path+": valid\n" {
		t.Errorf("output %q", out.String())
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(path), "nats")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("-check started the embedded NATS server (its store exists: %v)", err)
	}
	out.Reset()
	err := run(context.Background(), []string{"-check", "-config", path}, nil, &out, nil)
	if !errors.Is(err, errNoProvider) || !strings.Contains(out.String(), "warning: provider fake-openai skipped: TEST_PROVIDER_KEY is not set") {
		t.Errorf("no provider enabled: err %v, output %q", err, out.String())
	}
}
