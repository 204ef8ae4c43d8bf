package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/credentials"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/servicetest"
	"switchyard.dev/shared/testkit"
)

// TestWatchersAfterRestart: NATS restarts on the same address and store.
// A rotation written by another admin instance right after, and a health
// record the prober writes right after, reach this admin service's status
// within a second of their writes: its rotation and health watchers are
// re-created on the reconnect and resume where they were.
func TestWatchersAfterRestart(t *testing.T) {
	addr, dir := testkit.FreeAddr(t), t.TempDir()
	ns, err := natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { natsembed.Stop(ns) }()
	cfg := loadConfig(t, ns.ClientURL(), true)

	anc, err := bus.Connect(context.Background(), cfg.NATS, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	svc, err := New(cfg, Deps{NATS: anc})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Serve(t, svc.Serve)
	select {
	case <-svc.member.Bound():
	case <-time.After(testTimeout):
		t.Fatal("buckets not bound")
	}

	// Another admin instance and the prober, on a connection of their own.
	wnc, err := bus.Connect(context.Background(), cfg.NATS, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	js, _ := jetstream.New(wnc)
	ctx := context.Background()
	res, err := bus.Setup(ctx, js, bus.SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	box, err := credentials.NewBox(cfg.Credentials.Key)
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewStore(res.Health)
	rotated := func(secret string) func() error {
		fp := config.NewSecret(secret).Fingerprint()
		return func() error {
			svc.rotMu.Lock()
			defer svc.rotMu.Unlock()
			if got := svc.rotated["openai/primary"].Fingerprint; got != fp {
				return fmt.Errorf("rotation fingerprint %q, want %q", got, fp)
			}
			return nil
		}
	}
	healthIs := func(status health.Status) func() error {
		return func() error {
			if r, ok := svc.health.Snapshot().Get("openai", ""); !ok || r.Status != status {
				return fmt.Errorf("health %+v (present %v), want %s", r, ok, status)
			}
			return nil
		}
	}
	if _, _, err := credentials.Put(ctx, res.Credentials, box, "openai", "primary", config.NewSecret("sk-before"), "other-admin"); err != nil {
		t.Fatal(err)
	}
	if _, err := hs.Put(ctx, health.Record{Provider: "openai", Status: health.Healthy}); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, testTimeout, 2*time.Millisecond, rotated("sk-before"))
	testkit.CheckFor(t, testTimeout, 2*time.Millisecond, healthIs(health.Healthy))

	natsembed.Stop(ns)
	if ns, err = natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		name  string
		write func() error
		check func() error
	}{
		{"rotation", func() error {
			wctx, wcancel := context.WithTimeout(ctx, time.Second)
			defer wcancel()
			_, _, err := credentials.Put(wctx, res.Credentials, box, "openai", "primary", config.NewSecret("sk-after"), "other-admin")
			return err
		}, rotated("sk-after")},
		{"health", func() error {
			_, err := hs.Put(ctx, health.Record{Provider: "openai", Status: health.Unhealthy})
			return err
		}, healthIs(health.Unhealthy)},
	} {
		written := testkit.Retry(t, testTimeout, 5*time.Millisecond, w.write)
		testkit.CheckFor(t, testTimeout, time.Millisecond, w.check)
		d := time.Since(written)
		t.Logf("%s written after a NATS restart shown by the admin service %s after the write", w.name, d.Round(time.Millisecond))
		if d > time.Second {
			t.Errorf("%s written after a NATS restart reached the admin service %s after the write, want within 1s", w.name, d)
		}
	}
}

// TestStatusFollowsTheLastRotation: the status shows the fingerprint of a
// key's last rotation in the bucket (what every proxy uses), even when an
// earlier one says it was made later (another admin instance whose clock
// runs ahead).
func TestStatusFollowsTheLastRotation(t *testing.T) {
	e := startEnv(t, true)
	box, err := credentials.NewBox(e.cfg.Credentials.Key)
	if err != nil {
		t.Fatal(err)
	}
	ahead, err := box.Seal("openai", "primary", config.NewSecret("sk-from-a-clock-ahead"), "other-admin", time.Now().Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(ahead)
	if err != nil {
		t.Fatal(err)
	}
	kv := e.svc.member.Resources().Credentials
	if _, err := kv.Put(context.Background(), credentials.KVKey("openai", "primary"), data); err != nil {
		t.Fatal(err)
	}
	shows := func(fp string) func() error {
		return func() error {
			st := e.do("GET", "/admin/providers/status", readToken, nil)
			for _, p := range list(st.body["providers"]) {
				for _, k := range list(obj(p)["keys"]) {
					if obj(p)["name"] == "openai" && obj(k)["id"] == "primary" && obj(k)["fingerprint"] != fp {
						return fmt.Errorf("status shows %v, want %s", obj(k)["fingerprint"], fp)
					}
				}
			}
			return nil
		}
	}
	testkit.CheckFor(t, testTimeout, 5*time.Millisecond, shows(ahead.Fingerprint))
	e.do("PUT", "/admin/providers/openai/keys/primary", opToken, map[string]any{"secret": "sk-live-latest"}).expect(t, 200, "")
	latest, _, err := credentials.Get(context.Background(), kv, "openai", "primary")
	if err != nil {
		t.Fatal(err)
	}
	if latest.Fingerprint != config.NewSecret("sk-live-latest").Fingerprint() {
		t.Fatalf("the bucket's latest is %s", latest.Fingerprint)
	}
	testkit.CheckFor(t, testTimeout, 5*time.Millisecond, shows(latest.Fingerprint))
	// a pin of the key names the secret in use: the rotated one
	r := e.do("POST", "/admin/holds", opToken, map[string]any{"provider": "openai", "key": "primary", "duration": "10m"})
	r.expect(t, 201, "")
	if r.body["fingerprint"] != latest.Fingerprint {
		t.Fatalf("a pin after the rotation names %v, want the rotated secret's %s", r.body["fingerprint"], latest.Fingerprint)
	}
}
