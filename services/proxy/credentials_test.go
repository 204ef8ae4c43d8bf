package proxy

import (
	"context"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/credentials"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/tools/fakeprovider"
)

func heldKey(svc *Service, prefix string) bool {
	for _, r := range svc.member.Engine.Holds() {
		if r.State != hold.StateReleased && len(r.ID) >= len(prefix) && r.ID[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}

// A secret rotated through the credentials bucket reaches the proxy (a
// correctness deadline of 10 s: how fast is for benchmarks); once the admin releases the key's holds, the key serves with
// the new secret and the old one is never sent again.
func TestRotatedSecretIsUsed(t *testing.T) {
	oa, an := startFakes(t)
	ns := startNATS(t, t.TempDir(), "127.0.0.1:0")
	t.Cleanup(func() { natsembed.Stop(ns) })
	encKey := make([]byte, 32)
	for i := range encKey {
		encKey[i] = byte(i)
	}
	cfg := baseConfig(oa, an)
	cfg.Credentials.Key = encKey
	cfg.Providers[0].Keys[1].Priority = 0 // a1 first
	nc, _ := testkit.ConnectNATS(t, ns.ClientURL())
	svc, url := startService(t, cfg, Deps{Log: testLogger(t), NATS: nc})
	f := &fixture{openai: oa, anthropic: an, cfg: cfg, url: url, svc: svc}
	testkit.WaitFor(t, 10*time.Second, func() bool { return svc.member.Resources() != nil })

	// The old secret is revoked: a1 is held.
	oa.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key"})
	if status, _, _ := f.call(t, "/v1/chat/completions", directBody); status != 200 {
		t.Fatalf("status %d", status)
	}
	if !heldKey(svc, "fake-openai.a1") {
		t.Fatal("a1 not held")
	}

	// The operator rotates a1 (what PUT /admin/providers/fake-openai/keys/a1 does).
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), bus.BucketCredentials)
	if err != nil {
		t.Fatal(err)
	}
	box, err := credentials.NewBox(encKey)
	if err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	if _, _, err := credentials.Put(context.Background(), kv, box, "fake-openai", "a1", config.NewSecret("key-a1-new"), "test"); err != nil {
		t.Fatal(err)
	}
	k := svc.rt.Load().table.Key("fake-openai", "a1")
	testkit.WaitFor(t, 10*time.Second, func() bool { return k.Secret() == "key-a1-new" })
	t.Logf("rotation reached the proxy in %v", time.Since(rotated))
	if _, err := svc.member.Engine.CredentialChanged(context.Background(), "fake-openai", "a1"); err != nil {
		t.Fatal(err)
	}
	oldCalls := callsWith(oa, "key-a1")
	testkit.WaitFor(t, 5*time.Second, func() bool {
		f.call(t, "/v1/chat/completions", directBody)
		return callsWith(oa, "key-a1-new") > 0
	})
	if callsWith(oa, "key-a1") != oldCalls {
		t.Error("the old secret was sent after the rotation")
	}
}

// A secret changed in the file and reloaded (SIGHUP) takes effect and
// releases the key's holds.
func TestReloadSecretsReleasesHolds(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Providers[0].Keys[1].Priority = 0 })
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key"})
	f.call(t, "/v1/chat/completions", directBody)
	if !heldKey(f.svc, "fake-openai.a1") {
		t.Fatal("a1 not held")
	}
	next := baseConfig(f.openai, f.anthropic)
	next.Providers[0].Keys[0].Value = config.NewSecret("key-a1-fixed")
	next.Providers[0].Keys = append(next.Providers[0].Keys, config.Key{ID: "a3", Weight: 1, Value: config.NewSecret("k3")})
	warnings := f.svc.ReloadSecrets(context.Background(), next)
	if len(warnings) != 1 {
		t.Errorf("warnings %q, want one about the new key a3", warnings)
	}
	if heldKey(f.svc, "fake-openai.a1") {
		t.Fatal("a1 still held after its secret changed")
	}
	// a1 comes back through its ramp: within a few requests it serves with
	// the new secret.
	testkit.WaitFor(t, 5*time.Second, func() bool {
		f.call(t, "/v1/chat/completions", directBody)
		return callsWith(f.openai, "key-a1-fixed") > 0
	})
	if n := callsWith(f.openai, "key-a1"); n != 1 {
		t.Errorf("old secret used %d times", n)
	}
}
