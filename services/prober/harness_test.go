package prober

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// env are the secrets of the test configurations.
var env = []string{"K1=secret-one", "K2=secret-two"}

// fixture is an embedded NATS server with the Switchyard buckets and one
// fake provider.
type fixture struct {
	ns   *server.Server
	fake *fakeprovider.Server
	nc   *nats.Conn // the test's own connection
	res  *bus.Resources
}

func newFixture(t *testing.T, opts fakeprovider.Options) *fixture {
	t.Helper()
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsembed.Stop(ns) })
	fake, err := fakeprovider.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	nc, js := testkit.ConnectNATS(t, ns.ClientURL())
	res, err := bus.Setup(context.Background(), js, bus.SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ns: ns, fake: fake, nc: nc, res: res}
}

// config loads yaml (with {{URL}} replaced by the fake provider's URL)
// through the real loader, with env and moreEnv as the environment.
func (f *fixture) config(t *testing.T, yaml string, moreEnv ...string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(yaml, "{{URL}}", f.fake.URL())), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, append(append([]string(nil), env...), moreEnv...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// replica is one running prober.
type replica struct {
	svc    *Service
	base   string // http://host:port of its listener
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

func (f *fixture) startProber(t *testing.T, cfg *config.Config) *replica {
	t.Helper()
	nc, _ := testkit.ConnectNATS(t, f.ns.ClientURL())
	svc, err := New(cfg, Deps{NATS: nc, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{svc: svc, base: "http://" + ln.Addr().String(), nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- svc.Serve(ctx, ln) }()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	<-r.done
}

// holdRecord reads a hold record from switchyard_holds.
func (f *fixture) holdRecord(id string) (hold.Record, error) {
	e, err := f.res.Holds.Get(context.Background(), id)
	if err != nil {
		return hold.Record{}, err
	}
	var rec hold.Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return hold.Record{}, err
	}
	return rec, nil
}

// healthRecord reads a health record from switchyard_health.
func (f *fixture) healthRecord(provider, key string) (health.Record, error) {
	return health.NewStore(f.res.Health).Get(context.Background(), health.ID(provider, key))
}

func wantHealth(f *fixture, provider, key string, status health.Status) func() error {
	return func() error {
		rec, err := f.healthRecord(provider, key)
		if err != nil {
			return err
		}
		if rec.Status != status {
			return fmt.Errorf("health %s = %s (%s), want %s", health.ID(provider, key), rec.Status, rec.Reason, status)
		}
		return nil
	}
}

func wantHold(f *fixture, id string, state hold.State) func() error {
	return func() error {
		rec, err := f.holdRecord(id)
		if err != nil {
			if state == "" && errors.Is(err, jetstream.ErrKeyNotFound) {
				return nil
			}
			return err
		}
		if rec.State != state {
			return fmt.Errorf("hold %s is %s, want %s", id, rec.State, state)
		}
		return nil
	}
}

// testLog logs to stderr with PROBER_TEST_LOG set (debugging a test), nowhere otherwise.
func testLog() *slog.Logger {
	if os.Getenv("PROBER_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
