package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

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

	nc, err := nats.Connect("nats://"+addr, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m, err := New(testConfig(), Options{Service: "test", NATS: nc})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(m.Instance, "test-") {
		t.Errorf("instance id %q", m.Instance)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	m.Engine.Report("p", "k1", "gpt", false, hold.Outcome{Result: failure.Result{
		Class: failure.CredentialRejected, Scope: failure.ScopeKey, Code: "invalid_api_key"}})
	if m.Engine.Admit("p", "k1", "gpt") != hold.Deny {
		t.Fatal("the local hold does not apply while NATS is down")
	}

	ns, err = natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer natsembed.Stop(ns)
	testkit.WaitFor(t, 15*time.Second, func() bool { return m.Resources() != nil })
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
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
