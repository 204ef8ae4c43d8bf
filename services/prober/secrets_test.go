package prober

import (
	"context"
	"fmt"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/credentials"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// The prober checks with the secret the proxies use: one rotated through
// the admin API (switchyard_credentials), or re-read from the file on
// SIGHUP, not the one its configuration file had at start.
func TestChecksUseRotatedSecrets(t *testing.T) {
	// The provider accepts only the rotated secret.
	f, cfg := rotatedFixture(t, "rotated-secret-1", "rotated-secret-1")
	r := f.startProber(t, cfg)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, "p1", "", health.Healthy))
	if n := f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Key == "secret-one" }); n != 0 {
		t.Errorf("%d checks sent the file's secret after it was rotated", n)
	}

	// SIGHUP with a new file secret: the next checks send it.
	next := f.config(t, `
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K2}]
    models: [{name: gpt-4o-mini}]
`)
	if w := r.svc.ReloadSecrets(context.Background(), next); len(w) != 0 {
		t.Fatalf("warnings %v", w)
	}
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Key == "secret-two" }) == 0 {
			return fmt.Errorf("no check with the reloaded secret yet")
		}
		return nil
	})
}

// TestHoldNamesTheSecretSent: a hold the prober records for a refused key
// carries the fingerprint of the secret it sent (the rotated one), not of
// the file's.
func TestHoldNamesTheSecretSent(t *testing.T) {
	const rotated = "rotated-secret-1"
	f, cfg := rotatedFixture(t, "nobody-has-this", rotated)
	f.startProber(t, cfg)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		_, err := f.holdRecord("p1.k1")
		return err
	})
	if rec, _ := f.holdRecord("p1.k1"); rec.Fingerprint != config.NewSecret(rotated).Fingerprint() {
		t.Fatalf("the hold names secret %q, want the rotated one sent and refused (%q)", rec.Fingerprint, config.NewSecret(rotated).Fingerprint())
	}
}

// rotatedFixture is a prober fixture whose provider p1 accepts only the
// secret accepted, with credentials rotation on and key k1 of p1 rotated to
// rotated in switchyard_credentials; cfg is the prober's configuration.
func rotatedFixture(t *testing.T, accepted, rotated string) (*fixture, *config.Config) {
	t.Helper()
	f := newFixture(t, fakeprovider.Options{Name: "p1", Keys: []string{accepted}})
	const credKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	cfg := f.config(t, `
credentials:
  encryption_key: env:CRED_KEY
prober:
  check_interval: 100ms
  recheck_interval: 100ms
`+oneProvider, "CRED_KEY="+credKey)
	box, err := credentials.NewBox(cfg.Credentials.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := credentials.Put(context.Background(), f.res.Credentials, box, "p1", "k1", config.NewSecret(rotated), "test"); err != nil {
		t.Fatal(err)
	}
	return f, cfg
}

// TestReloadKeepsRotation: a SIGHUP that re-reads a file whose secret for
// a rotated key did not change leaves the key on its rotated secret.
func TestReloadKeepsRotation(t *testing.T) {
	f, cfg := rotatedFixture(t, "rotated-secret-1", "rotated-secret-1")
	r := f.startProber(t, cfg)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, "p1", "", health.Healthy))
	if w := r.svc.ReloadSecrets(context.Background(), cfg); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	k1, _ := r.svc.routing().targets["p1"].keyByID("k1")
	if got := r.svc.secrets.of("p1", k1).Reveal(); got != "rotated-secret-1" {
		t.Fatalf("after a reload of an unchanged file k1 sends %q, want its rotated secret", got)
	}
}
