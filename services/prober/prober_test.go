package prober

import (
	"context"
	"net"
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
		// fasthttp's worker-pool cleaner notices Stop only after its
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
	servicetest.ReadyzWithoutNATS(t, svc.Serve)
}

func TestRun(t *testing.T) {
	servicetest.RunListens(t, func(listen string) (servicetest.Runner, error) {
		return New(&config.Config{Prober: config.Prober{Listen: listen}}, Deps{})
	})
}

func TestListenerLimits(t *testing.T) {
	servicetest.ListenerLimits(t, func(l config.Limits) func(context.Context, net.Listener) error {
		svc, err := New(&config.Config{Limits: l}, Deps{})
		if err != nil {
			t.Fatal(err)
		}
		return svc.Serve
	})
}

func TestNewNilConfig(t *testing.T) {
	if _, err := New(nil, Deps{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}
