package proxy

import (
	"context"
	"strings"
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

// TestReloadAfterRotationOutlivesASwap: a SIGHUP reload is newer than an
// earlier rotation through the admin API: the key keeps the reloaded
// secret when the next routing version is applied (the rotation, applied
// again by each new routing, won before).
func TestReloadAfterRotationOutlivesASwap(t *testing.T) {
	f := newFixture(t)
	// what the credentials watcher does for a rotation of a1
	f.svc.secrets.rotated.Store(rotatedKey{"fake-openai", "a1"}, config.NewSecret("key-a1-rotated"))
	f.svc.rt.Load().table.Key("fake-openai", "a1").SetSecret(config.NewSecret("key-a1-rotated"))
	file := baseConfig(f.openai, f.anthropic)
	file.Providers[0].Keys[0].Value = config.NewSecret("key-a1-file") // the file's secret changed, then SIGHUP
	if w := f.svc.ReloadSecrets(context.Background(), file); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	v2 := baseConfig(f.openai, f.anthropic) // a version of the same routing: a1's reference resolves to the new value
	v2.Providers[0].Keys[0].Value = config.NewSecret("key-a1-file")
	if err := f.svc.Apply(v2, 2); err != nil {
		t.Fatal(err)
	}
	if got := f.svc.rt.Load().table.Key("fake-openai", "a1").Secret(); got != "key-a1-file" {
		t.Fatalf("after the swap a1 sends %q, want the reloaded secret", got)
	}
}

// TestReloadUnderAVersion: under a fleet routing version, a SIGHUP gives a
// key the file's secret only where the version refers to the same secret;
// a key the version refers to otherwise keeps the version's, with a
// warning, and keys the file has and the version has not are no warning.
func TestReloadUnderAVersion(t *testing.T) {
	f := newFixture(t)
	v2 := baseConfig(f.openai, f.anthropic)
	v2.Providers[0].Keys[0].Secret, v2.Providers[0].Keys[0].Value = "env:A1_V2", config.NewSecret("key-a1-v2")
	v2.Providers[0].Keys[1].Secret, v2.Providers[0].Keys[1].Value = "env:A2", config.NewSecret("key-a2")
	v2.Providers[0].Keys = v2.Providers[0].Keys[:2]
	if err := f.svc.Apply(v2, 2); err != nil {
		t.Fatal(err)
	}
	file := baseConfig(f.openai, f.anthropic)
	file.Providers[0].Keys[0].Secret, file.Providers[0].Keys[0].Value = "env:A1", config.NewSecret("key-a1-stale")
	file.Providers[0].Keys[1].Secret, file.Providers[0].Keys[1].Value = "env:A2", config.NewSecret("key-a2-new")
	file.Providers[0].Keys = append(file.Providers[0].Keys, config.Key{ID: "a9", Secret: "env:A9", Weight: 1, Value: config.NewSecret("k9")})
	w := f.svc.ReloadSecrets(context.Background(), file)
	table := f.svc.rt.Load().table
	if a1, a2 := table.Key("fake-openai", "a1").Secret(), table.Key("fake-openai", "a2").Secret(); a1 != "key-a1-v2" || a2 != "key-a2-new" {
		t.Fatalf("a1 sends %q (want the version's), a2 %q (want the reloaded one)", a1, a2)
	}
	if len(w) != 1 || !strings.Contains(w[0], "key a1") || !strings.Contains(w[0], "config version 2") || !strings.Contains(w[0], "env:A1_V2") {
		t.Fatalf("warnings %q, want one about a1", w)
	}
}

// TestReloadKeepsRotationOfAnUnchangedKey: a SIGHUP whose file changed
// another key's secret leaves a key rotated through the admin API on its
// rotated secret, now and after the next swap.
func TestReloadKeepsRotationOfAnUnchangedKey(t *testing.T) {
	f := newFixture(t)
	f.svc.secrets.rotated.Store(rotatedKey{"fake-openai", "a1"}, config.NewSecret("key-a1-rotated"))
	f.svc.rt.Load().table.Key("fake-openai", "a1").SetSecret(config.NewSecret("key-a1-rotated"))
	file := baseConfig(f.openai, f.anthropic)
	file.Providers[0].Keys[1].Value = config.NewSecret("key-a2-new") // only a2 changed in the file
	f.svc.ReloadSecrets(context.Background(), file)
	a1 := func() string { return f.svc.rt.Load().table.Key("fake-openai", "a1").Secret() }
	if got := a1(); got != "key-a1-rotated" {
		t.Fatalf("after the reload a1 sends %q, want its rotated secret", got)
	}
	if err := f.svc.Apply(baseConfig(f.openai, f.anthropic), 2); err != nil {
		t.Fatal(err)
	}
	if got := a1(); got != "key-a1-rotated" {
		t.Fatalf("after the next swap a1 sends %q, want its rotated secret", got)
	}
}

// TestReloadWarnsEachTime: a reload of a file with a key the routing does
// not have warns each time, not only the first (the file's secret for it
// is noted, and unchanged the second time).
func TestReloadWarnsEachTime(t *testing.T) {
	f := newFixture(t)
	file := baseConfig(f.openai, f.anthropic)
	file.Providers[0].Keys = append(file.Providers[0].Keys, config.Key{ID: "a9", Weight: 1, Value: config.NewSecret("k9")})
	for i := range 2 {
		if w := f.svc.ReloadSecrets(context.Background(), file); len(w) != 1 || !strings.Contains(w[0], "key a9 is new") {
			t.Fatalf("reload %d: warnings %q", i+1, w)
		}
	}
}

// TestReloadClientKeys: client keys changed in the file apply on reload
// (SIGHUP): a revoked key is refused at once, a new one admitted; a plan
// the running configuration does not have is named in the warnings.
func TestReloadClientKeys(t *testing.T) {
	f := newFixture(t)
	next := baseConfig(f.openai, f.anthropic)
	next.Clients = []config.ClientKey{{ID: "new-team", Models: []string{"*"}, Value: config.NewSecret("sk-new-team-key")}}
	if w := f.svc.ReloadSecrets(context.Background(), next); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	if status, _, body := f.call(t, "/v1/chat/completions", chatBody); status != 401 {
		t.Fatalf("the revoked key: %d %s", status, body)
	}
	if status, _, body := f.call(t, "/v1/chat/completions", chatBody, "Authorization", "Bearer sk-new-team-key"); status != 200 {
		t.Fatalf("the new key: %d %s", status, body)
	}
	next.Clients[0].Plan = "gold"
	if w := f.svc.ReloadSecrets(context.Background(), next); len(w) != 1 || !strings.Contains(w[0], "plan gold") {
		t.Fatalf("warnings %q, want one naming the new plan", w)
	}
	if status, _, body := f.call(t, "/v1/chat/completions", chatBody, "Authorization", "Bearer sk-new-team-key"); status != 401 {
		t.Fatalf("a key naming a plan the proxy does not have: %d %s, want it refused until a restart", status, body)
	}
	// Under a fleet routing version the version's client keys apply: the
	// file's are named as not applied.
	if err := f.svc.Apply(baseConfig(f.openai, f.anthropic), 3); err != nil {
		t.Fatal(err)
	}
	if w := f.svc.ReloadSecrets(context.Background(), next); len(w) != 0 {
		t.Fatalf("warnings %q for a file that did not change", w)
	}
	next.Clients[0].Plan = ""
	if w := f.svc.ReloadSecrets(context.Background(), next); len(w) != 1 || !strings.Contains(w[0], "config version 3") {
		t.Fatalf("warnings %q, want one saying the version decides", w)
	}
	if status, _, body := f.call(t, "/v1/chat/completions", chatBody); status != 200 {
		t.Fatalf("the version's key: %d %s", status, body)
	}
}
