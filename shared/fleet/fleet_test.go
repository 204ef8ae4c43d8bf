package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testConfig() *config.Config {
	cfg := config.Defaults()
	cfg.Providers = []config.Provider{{Name: "p", Type: "openai",
		Keys: []config.Key{{ID: "k1", Weight: 1, Value: config.NewSecret("sk-secret-1")}}}}
	return cfg
}

// A member started while NATS is down keeps holds locally, binds the
// buckets when NATS comes up, and writes what it recorded meanwhile.
func TestMemberBindsLateAndReconciles(t *testing.T) {
	dir := t.TempDir()
	// Learn a free port, then stop the server: NATS is down at start.
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	addr := ns.Addr().String()
	natsembed.Stop(ns)

	m := runMember(t, addr, testConfig())
	if !strings.HasPrefix(m.Instance, "test-") {
		t.Errorf("instance id %q", m.Instance)
	}

	m.Engine.Report("p", "k1", "gpt", false, hold.Outcome{Result: failure.Result{
		Class: failure.CredentialRejected, Scope: failure.ScopeKey, Code: "invalid_api_key"}})
	if m.Engine.Admit("p", "k1", "gpt") != hold.Deny {
		t.Fatal("the local hold does not apply while NATS is down")
	}
	select {
	case <-m.Bound():
		t.Fatal("bound while NATS is down")
	default:
	}
	if m.Resources() != nil {
		t.Fatal("resources while NATS is down")
	}

	ns, err = natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer natsembed.Stop(ns)
	select {
	case <-m.Bound():
	case <-time.After(15 * time.Second):
		t.Fatal("buckets not bound after NATS came up")
	}
	kv := m.Resources().Holds
	testkit.WaitFor(t, 15*time.Second, func() bool {
		e, err := kv.Get(context.Background(), "p.k1")
		return err == nil && strings.Contains(string(e.Value()), `"credential_rejected"`)
	})
	e, _ := kv.Get(context.Background(), "p.k1")
	if strings.Contains(string(e.Value()), "sk-secret-1") {
		t.Errorf("secret in the KV value: %s", e.Value())
	}
	if !strings.Contains(string(e.Value()), config.NewSecret("sk-secret-1").Fingerprint()) {
		t.Errorf("no fingerprint in the KV value: %s", e.Value())
	}
}

func TestMemberWithoutNATSKeepsHoldsInMemory(t *testing.T) {
	m, err := New(testConfig(), Options{Service: "solo"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	m.Engine.Report("p", "k1", "", false, hold.Outcome{Result: failure.Result{Class: failure.QuotaExhausted, Scope: failure.ScopeKey}})
	if m.Engine.Admit("p", "k1", "m") != hold.Deny {
		t.Error("hold not applied")
	}
	if m.Resources() != nil {
		t.Error("resources without NATS")
	}
	select {
	case <-m.Bound():
		t.Error("bound without NATS")
	case <-m.Synced():
	default:
		t.Error("the in-memory table is not synced")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A running member publishes the events of its holds on NATS (the
// emitter starts with Run) and follows the holds other members write.
func TestMemberEventsAndPeers(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer natsembed.Stop(ns)
	var members []*Member
	for i := range 2 {
		nc, _ := testkit.ConnectNATS(t, ns.ClientURL())
		m, err := New(testConfig(), Options{Service: fmt.Sprintf("m%d", i), NATS: nc})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		for _, c := range []<-chan struct{}{m.Bound(), m.Synced()} {
			select {
			case <-c:
			case <-time.After(15 * time.Second):
				t.Fatal("not bound and synced")
			}
		}
		members = append(members, m)
	}
	sub, err := members[1].Conn().SubscribeSync("switchyard.events.hold.p.k1")
	if err != nil {
		t.Fatal(err)
	}
	if err := members[1].Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	members[0].Engine.Report("p", "k1", "", false, hold.Outcome{Result: failure.Result{
		Class: failure.CredentialRejected, Scope: failure.ScopeKey, Code: "invalid_api_key"}})
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("no hold event: %v", err)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { return members[1].Engine.Admit("p", "k1", "m") == hold.Deny })
}

// TestBucketsSetUpAgainAfterARestart: NATS restarted whole without its
// buckets (memory storage) gets them back from the running members, with
// no service restarted.
func TestBucketsSetUpAgainAfterARestart(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	addr := ns.Addr().String()
	cfg := testConfig()
	cfg.NATS.Storage = "memory"
	m := runMember(t, addr, cfg)
	select {
	case <-m.Bound():
	case <-time.After(15 * time.Second):
		t.Fatal("not bound")
	}
	natsembed.Stop(ns)
	ns, err = natsembed.Start(natsembed.Options{Listen: addr, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer natsembed.Stop(ns)
	_, js := testkit.ConnectNATS(t, ns.ClientURL())
	testkit.CheckFor(t, 15*time.Second, 10*time.Millisecond, func() error {
		for _, b := range []string{bus.BucketHolds, bus.BucketConfig} {
			if _, err := js.KeyValue(context.Background(), b); err != nil {
				return fmt.Errorf("bucket %s: %w", b, err)
			}
		}
		_, err := js.Stream(context.Background(), bus.StreamUsage)
		return err
	})
	// The member's own bucket handle works against the new bucket.
	if _, err := m.Resources().Holds.Put(context.Background(), "p.k9", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
}

// runMember runs a member of cfg on a connection to addr that reconnects
// for ever, until the test ends.
func runMember(t *testing.T, addr string, cfg *config.Config) *Member {
	t.Helper()
	nc, err := nats.Connect("nats://"+addr, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(cfg, Options{Service: "test", NATS: nc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		nc.Close()
	})
	return m
}
