package launch

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"switchyard.dev/shared/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeService struct {
	ran     chan struct{}
	environ []string // what Build was given
}

func (f *fakeService) Run(ctx context.Context) error {
	close(f.ran)
	<-ctx.Done()
	return nil
}

func spec(svc *fakeService) Spec {
	return Spec{
		Name:   "test",
		Listen: func(c *config.Config) string { return c.Proxy.Listen },
		Build: func(_ *config.Config, _ *slog.Logger, _ *nats.Conn, environ []string) (Service, error) {
			svc.environ = environ
			return svc, nil
		},
	}
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
		{name: "stray argument", args: []string{"-config", "x.yaml", "extra"}, wantErr: "unexpected arguments"},
		{name: "missing file", args: []string{"-config", "/nonexistent/gw.yaml"}, wantErr: "/nonexistent/gw.yaml"},
		{name: "file from env", environ: []string{"SWITCHYARD_CONFIG=/nonexistent/env.yaml"}, wantErr: "/nonexistent/env.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Run(context.Background(), spec(&fakeService{ran: make(chan struct{})}), tt.args, tt.environ, &out)
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

// The service runs (and stops with its context) even while NATS is down.
func TestRunWithoutNATS(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gw.yaml")
	yaml := "log:\n  format: json\nnats:\n  url: nats://127.0.0.1:1\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	svc := &fakeService{ran: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out bytes.Buffer
	environ := []string{"OTEL_TRACES_EXPORTER=otlp"}
	go func() { done <- Run(ctx, spec(svc), []string{"-config", path}, environ, &out) }()
	select {
	case <-svc.ran:
	case <-time.After(10 * time.Second):
		t.Fatal("service did not start while NATS is down")
	}
	if len(svc.environ) != 1 || svc.environ[0] != environ[0] {
		t.Errorf("the service was built with environment %q, want the process's", svc.environ)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type reloadService struct {
	fakeService
	reloaded chan *config.Config
}

// SIGHUP re-reads the file and hands the new configuration to Reload; a
// file that no longer loads changes nothing.
func TestReloadOnHangup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gw.yaml")
	write := func(level string) {
		if err := os.WriteFile(path, []byte("log:\n  format: json\n  level: "+level+"\nnats:\n  url: nats://127.0.0.1:1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("info")
	svc := &reloadService{fakeService: fakeService{ran: make(chan struct{})}, reloaded: make(chan *config.Config, 2)}
	hup := make(chan os.Signal, 1)
	sp := spec(&svc.fakeService)
	sp.Build = func(*config.Config, *slog.Logger, *nats.Conn, []string) (Service, error) { return svc, nil }
	sp.Hangup = hup
	sp.Reload = func(_ context.Context, got Service, cfg *config.Config) []string {
		if got != Service(svc) {
			t.Error("reload got another service")
		}
		svc.reloaded <- cfg
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() { done <- Run(ctx, sp, []string{"-config", path}, nil, &out) }()
	<-svc.ran
	write("debug")
	hup <- os.Interrupt
	select {
	case cfg := <-svc.reloaded:
		if cfg.Log.Level != "debug" {
			t.Errorf("reloaded level %q", cfg.Log.Level)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reload")
	}
	write("loud") // invalid: not applied
	hup <- os.Interrupt
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case <-svc.reloaded:
		t.Error("an invalid configuration was applied")
	default:
	}
}

func TestHealthCheckFlag(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(status.Load())) }))
	defer srv.Close()
	var out bytes.Buffer
	s := spec(&fakeService{ran: make(chan struct{})})
	if err := Run(context.Background(), s, []string{"-healthcheck", srv.URL + "/healthz"}, nil, &out); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	status.Store(503)
	if err := Run(context.Background(), s, []string{"-healthcheck", srv.URL + "/healthz"}, nil, &out); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("unhealthy: %v", err)
	}
	status.Store(200)
	if err := Run(context.Background(), s, []string{"-healthcheck", "-"}, []string{"HEALTHCHECK_URL=" + srv.URL + "/healthz"}, &out); err != nil {
		t.Fatalf("from HEALTHCHECK_URL: %v", err)
	}
	srv.Close()
	if err := Run(context.Background(), s, []string{"-healthcheck", srv.URL + "/healthz"}, nil, &out); err == nil {
		t.Fatal("down: no error")
	}
}

// -check loads and checks the configuration as a start would and exits,
// starting nothing: "FILE: valid" and nil, or the error start returns
// (naming the file and the key).
func TestCheckFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("log:\n  format: json\nnats:\n  url: nats://127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("log:\n  levle: info\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("the service's own check")
	tests := []struct {
		name    string
		path    string
		check   func(*config.Config) error
		wantOut string
		wantErr string
	}{
		{name: "valid", path: good, wantOut: good + ": valid\n"},
		{name: "unknown key", path: bad, wantErr: bad + ": log.levle"},
		{name: "the service's check", path: good, check: func(*config.Config) error { return refused }, wantErr: refused.Error()},
		{name: "missing file", path: filepath.Join(dir, "none.yaml"), wantErr: "none.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &fakeService{ran: make(chan struct{})}
			sp := spec(svc)
			sp.Check = tt.check
			var out bytes.Buffer
			err := Run(context.Background(), sp, []string{"-check", "-config", tt.path}, nil, &out)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
			if tt.wantOut != "" && out.String() != tt.wantOut {
				t.Errorf("output %q, want %q", out.String(), tt.wantOut)
			}
			select {
			case <-svc.ran:
				t.Error("-check started the service")
			default:
			}
		})
	}
}

// -version prints the build's version and commit, and starts nothing.
func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	if err := Run(context.Background(), spec(&fakeService{ran: make(chan struct{})}), []string{"-version"}, nil, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "test ") || !strings.Contains(out.String(), "(commit ") {
		t.Errorf("-version printed %q", out.String())
	}
}
