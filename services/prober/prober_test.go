package prober

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp refreshes its cached Date header from a goroutine it
		// starts once per process.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// fasthttp v1.51's worker-pool cleaner notices Stop only after its
		// current sleep (up to 10 s): it ends, but later than the test.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

// checkFor polls f until it returns nil or total has passed.
func checkFor(t *testing.T, total, poll time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(poll)
	}
	t.Fatalf("condition not met after %s: %v", total, err)
}

type answer struct {
	status int
	body   map[string]any
}

func get(url string) (answer, error) {
	resp, err := http.Get(url)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode}
	if err := json.Unmarshal(b, &a.body); err != nil {
		return a, fmt.Errorf("decode %q: %w", b, err)
	}
	return a, nil
}

func want(a answer, status int, body map[string]string) error {
	if a.status != status {
		return fmt.Errorf("status %d, want %d", a.status, status)
	}
	for k, v := range body {
		if got, _ := a.body[k].(string); got != v {
			return fmt.Errorf("%s = %q, want %q (body %v)", k, a.body[k], v, a.body)
		}
	}
	return nil
}

func TestHealthAndReadiness(t *testing.T) {
	ns, err := bus.StartEmbedded(bus.EmbeddedOptions{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.StopEmbedded(ns)
	nc, err := bus.Connect(context.Background(), config.NATS{URL: ns.ClientURL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	svc, err := New(&config.Config{}, Deps{NATS: nc})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, ln) }()

	tests := []struct {
		name   string
		path   string
		status int
		body   map[string]string
	}{
		{name: "healthz", path: "/healthz", status: http.StatusOK, body: map[string]string{"status": "ok"}},
		{name: "readyz with NATS up", path: "/readyz", status: http.StatusOK, body: map[string]string{"status": "ok", "nats": "connected"}},
		{name: "unknown route", path: "/nope", status: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := get(base + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if err := want(a, tt.status, tt.body); err != nil {
				t.Fatal(err)
			}
		})
	}

	// Stop NATS only once the prober has set up its buckets: a server shut
	// down while it creates a file-backed stream leaves that stream's
	// goroutines behind (nats-server 2.15), which goleak would report.
	checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if svc.member.Resources() == nil {
			return fmt.Errorf("buckets not bound yet")
		}
		return nil
	})
	bus.StopEmbedded(ns)
	checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		a, err := get(base + "/readyz")
		if err != nil {
			return err
		}
		return want(a, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "nats": "disconnected"})
	})
	a, err := get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	if err := want(a, http.StatusOK, map[string]string{"status": "ok"}); err != nil {
		t.Fatalf("healthz with NATS down: %v", err)
	}

	http.DefaultClient.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(ShutdownTimeout + 5*time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

func TestReadyzWithoutNATS(t *testing.T) {
	svc, err := New(&config.Config{}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, ln) }()
	defer func() {
		http.DefaultClient.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	a, err := get("http://" + ln.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if err := want(a, http.StatusServiceUnavailable, map[string]string{"nats": "disconnected"}); err != nil {
		t.Fatal(err)
	}
}

func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		listen  string
		wantErr bool
	}{
		{name: "free port", listen: "127.0.0.1:0"},
		{name: "bad address", listen: "127.0.0.1:notaport", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &config.Config{Prober: config.Prober{Listen: tt.listen}}
			svc, err := New(cfg, Deps{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // serve, then stop at once
			if err := svc.Run(ctx); (err != nil) != tt.wantErr {
				t.Fatalf("Run error = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestNewNilConfig(t *testing.T) {
	if _, err := New(nil, Deps{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}
