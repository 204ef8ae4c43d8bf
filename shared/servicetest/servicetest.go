// Package servicetest holds what the tests of Switchyard's HTTP services
// share: serving on a loopback listener, JSON answers, scraping /metrics,
// the health/readiness contract every service with NATS keeps (GET
// /healthz while the process runs, GET /readyz 200 while NATS is connected
// and JetStream answers for switchyard_holds, 503 with a reason otherwise)
// and the hold metrics every service exports.
package servicetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
)

// Answer is an HTTP status and its JSON object body.
type Answer struct {
	Status int
	Body   map[string]any
}

// Get fetches url and decodes its JSON object body.
func Get(url string) (Answer, error) {
	resp, err := http.Get(url)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Answer{}, err
	}
	a := Answer{Status: resp.StatusCode}
	if err := json.Unmarshal(b, &a.Body); err != nil {
		return a, fmt.Errorf("decode %q: %w", b, err)
	}
	return a, nil
}

// Want checks the status and the string fields of the body.
func (a Answer) Want(status int, body map[string]string) error {
	if a.Status != status {
		return fmt.Errorf("status %d, want %d (body %v)", a.Status, status, a.Body)
	}
	for k, v := range body {
		if got, _ := a.Body[k].(string); got != v {
			return fmt.Errorf("%s = %q, want %q (body %v)", k, a.Body[k], v, a.Body)
		}
	}
	return nil
}

// Serve runs serve on a new loopback listener until the test ends, then
// closes the idle connections of http.DefaultClient, cancels serve's
// context, waits for it to return and reports an error it returns. It
// returns the listener's address, host:port.
func Serve(tb testing.TB, serve func(ctx context.Context, ln net.Listener) error) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln) }()
	tb.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// Subject is a service under test.
type Subject struct {
	Serve func(ctx context.Context, ln net.Listener) error
	// Bound reports that the service has set up its NATS buckets. The test
	// stops NATS only after that: a server shut down while a file-backed
	// stream is being created leaves that stream's goroutines behind
	// (nats-server 2.15), which goleak would report.
	Bound func() bool
	// ShutdownTimeout bounds the service's graceful stop.
	ShutdownTimeout time.Duration
}

// readyzWithin bounds one /readyz answer: the handler reads a cached probe
// and never waits on NATS (a probe that waited would take its 2 s
// timeout).
const readyzWithin = time.Second

// readyz polls GET /readyz until it answers status with body, each answer
// within readyzWithin.
func readyz(t *testing.T, base string, status int, body map[string]string) {
	t.Helper()
	// 30 s: JetStream's first answers on a fresh server can take long on
	// a loaded machine (a .ci/run saw 10 s pass); a passing run polls once
	testkit.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		start := time.Now()
		a, err := Get(base + "/readyz")
		if took := time.Since(start); took > readyzWithin {
			t.Fatalf("GET /readyz took %s (want at most %s): it must not wait on NATS", took, readyzWithin)
		}
		if err != nil {
			return err
		}
		if err := a.Want(status, body); err != nil {
			return err
		}
		if status != http.StatusOK {
			if r, _ := a.Body["reason"].(string); r == "" {
				return fmt.Errorf("503 without a reason: %v", a.Body)
			}
		}
		return nil
	})
}

// HealthAndReadiness runs a service built by build against an embedded
// NATS server and checks /healthz and /readyz: not ready until the buckets
// are bound and JetStream answers, then ready; not ready while the hold
// bucket is gone (JetStream does not answer for it) and ready once it is
// back; not ready while NATS is down and ready after it restarts; then
// that Serve returns after its context ends.
func HealthAndReadiness(t *testing.T, build func(cfg *config.Config, nc *nats.Conn) Subject) {
	t.Helper()
	dir, addr := t.TempDir(), testkit.FreeAddr(t)
	ns, err := natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { natsembed.Stop(ns) }()
	nc, err := bus.Connect(context.Background(), config.NATS{URL: ns.ClientURL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	svc := build(&config.Config{}, nc)
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
		{name: "unknown route", path: "/nope", status: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := Get(base + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Want(tt.status, tt.body); err != nil {
				t.Fatal(err)
			}
		})
	}

	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !svc.Bound() {
			return fmt.Errorf("buckets not bound yet")
		}
		return nil
	})
	ready := map[string]string{"status": "ok", "nats": "connected", "jetstream": "ok"}
	readyz(t, base, http.StatusOK, ready)

	// The hold bucket goes away (JetStream has nothing to answer for it,
	// as during a leader election): not ready while NATS stays connected.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(context.Background(), bus.BucketHolds); err != nil {
		t.Fatal(err)
	}
	readyz(t, base, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "nats": "connected", "jetstream": "unavailable"})
	if _, err := bus.Setup(context.Background(), js, bus.SetupOptions{}); err != nil {
		t.Fatal(err)
	}
	readyz(t, base, http.StatusOK, ready)

	// NATS goes down, then comes back on the same address and store.
	natsembed.Stop(ns)
	readyz(t, base, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "nats": "disconnected"})
	a, err := Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Want(http.StatusOK, map[string]string{"status": "ok"}); err != nil {
		t.Fatalf("healthz with NATS down: %v", err)
	}
	if ns, err = natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir}); err != nil {
		t.Fatal(err)
	}
	readyz(t, base, http.StatusOK, ready)

	http.DefaultClient.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(svc.ShutdownTimeout + 5*time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

// ReadyzWithoutNATS checks that a service built without a NATS connection
// serves and answers /readyz with 503 "nats": "disconnected".
func ReadyzWithoutNATS(t *testing.T, serve func(ctx context.Context, ln net.Listener) error) {
	t.Helper()
	a, err := Get("http://" + Serve(t, serve) + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Want(http.StatusServiceUnavailable, map[string]string{"nats": "disconnected"}); err != nil {
		t.Fatal(err)
	}
}

// Runner is a service's Run.
type Runner interface {
	Run(ctx context.Context) error
}

// RunListens checks Run against its listen address: on a free port it
// serves until its context ends and returns nil; on a bad address it fails.
func RunListens(t *testing.T, build func(listen string) (Runner, error)) {
	t.Helper()
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
			svc, err := build(tt.listen)
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
