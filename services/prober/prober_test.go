package prober

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/servicetest"
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

func TestHealthAndReadiness(t *testing.T) {
	servicetest.HealthAndReadiness(t, func(cfg *config.Config, nc *nats.Conn) servicetest.Subject {
		svc, err := New(cfg, Deps{NATS: nc})
		if err != nil {
			t.Fatal(err)
		}
		return servicetest.Subject{
			Serve:           svc.Serve,
			Bound:           func() bool { return svc.member.Resources() != nil },
			ShutdownTimeout: ShutdownTimeout,
		}
	})
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
	a, err := servicetest.Get("http://" + ln.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Want(http.StatusServiceUnavailable, map[string]string{"nats": "disconnected"}); err != nil {
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
