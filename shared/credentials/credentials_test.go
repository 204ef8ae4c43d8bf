package credentials

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestSealOpen(t *testing.T) {
	box, err := NewBox(testKey(1))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := box.Seal("openai", "primary", config.NewSecret("sk-new-secret"), "ops", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(rec)
	if bytes.Contains(data, []byte("sk-new-secret")) {
		t.Fatalf("record holds the secret in clear: %s", data)
	}
	if rec.Fingerprint != config.NewSecret("sk-new-secret").Fingerprint() {
		t.Errorf("fingerprint %q", rec.Fingerprint)
	}
	got, err := box.Open(rec)
	if err != nil || got.Reveal() != "sk-new-secret" {
		t.Fatalf("Open = %v, %v", got, err)
	}
	other, _ := NewBox(testKey(2))
	if _, err := other.Open(rec); err == nil {
		t.Error("opened with another key")
	}
	moved := rec
	moved.Key = "secondary"
	if _, err := box.Open(moved); err == nil {
		t.Error("a record moved to another key decrypted")
	}
	if _, err := NewBox([]byte("short")); err == nil {
		t.Error("short key accepted")
	}
	if _, err := box.Seal("p", "k", config.Secret{}, "", time.Now()); err == nil {
		t.Error("empty secret sealed")
	}
	for _, bad := range []string{"sk-abc\x00def", " sk-abc\t", "sk\x7f"} {
		if _, err := box.Seal("p", "k", config.NewSecret(bad), "", time.Now()); !errors.Is(err, config.ErrSecretBytes) {
			t.Errorf("Seal(%q) = %v, want ErrSecretBytes", bad, err)
		}
	}
	if _, err := Decode("openai.secondary", data); err == nil {
		t.Error("value under the wrong key decoded")
	}
}

type seen struct {
	mu  sync.Mutex
	got map[string]string
}

func (s *seen) set(p, k string, v config.Secret) {
	s.mu.Lock()
	s.got[p+"/"+k] = v.Reveal()
	s.mu.Unlock()
}

func (s *seen) get(k string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[k]
}

func TestWatch(t *testing.T) {
	srv, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer natsembed.Stop(srv)
	_, js := testkit.ConnectNATS(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := bus.Setup(ctx, js, bus.SetupOptions{Storage: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	box, _ := NewBox(testKey(7))
	if _, _, err := Put(ctx, res.Credentials, box, "openai", "primary", config.NewSecret("before-start"), "ops"); err != nil {
		t.Fatal(err)
	}
	// A record sealed with another key is skipped, not fatal.
	wrong, _ := NewBox(testKey(9))
	if _, _, err := Put(ctx, res.Credentials, wrong, "openai", "other", config.NewSecret("unreadable"), "ops"); err != nil {
		t.Fatal(err)
	}

	// A record whose secret CheckSecret refuses (Seal does not write one:
	// sealed here by hand) is skipped, before the start and as a rotation.
	putUnchecked := func(keyID, secret string) {
		t.Helper()
		rec, err := box.Seal("openai", keyID, config.NewSecret("placeholder"), "ops", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		rec.Ciphertext = box.aead.Seal(nil, rec.Nonce, []byte(secret), aad("openai", keyID))
		data, _ := json.Marshal(rec)
		if _, err := res.Credentials.Put(ctx, KVKey("openai", keyID), data); err != nil {
			t.Fatal(err)
		}
	}
	putUnchecked("ctl", "sk-abc\x00def")

	s := &seen{got: map[string]string{}}
	var refused atomic.Int32
	set := func(p, k string, v config.Secret) {
		if v.Check() != nil {
			refused.Add(1)
		}
		s.set(p, k, v)
	}
	ready := make(chan struct{})
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Watch(wctx, res.Credentials, testKey(7), set, WithReady(func() { close(ready) }))
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("not ready")
	}
	if got := s.get("openai/primary"); got != "before-start" {
		t.Fatalf("initial value %q", got)
	}
	start := time.Now()
	putUnchecked("primary", " sk-abc\t")
	if _, _, err := Put(ctx, res.Credentials, box, "openai", "primary", config.NewSecret("rotated"), "ops"); err != nil {
		t.Fatal(err)
	}
	for s.get("openai/primary") != "rotated" {
		if time.Since(start) > 10*time.Second {
			t.Fatal("rotation not seen within 10 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if s.get("openai/other") != "" {
		t.Error("undecryptable record delivered")
	}
	if n := refused.Load(); n != 0 || s.get("openai/ctl") != "" {
		t.Errorf("%d secret(s) with control characters delivered", n)
	}
	rec, _, err := Get(ctx, res.Credentials, "openai", "primary")
	if err != nil || rec.Fingerprint != config.NewSecret("rotated").Fingerprint() || rec.RotatedBy != "ops" {
		t.Errorf("Get = %+v, %v", rec, err)
	}
	wcancel()
	if err := <-done; err != nil {
		t.Errorf("Watch: %v", err)
	}
	if err := Watch(ctx, res.Credentials, []byte("x"), s.set); err == nil {
		t.Error("bad key accepted")
	}
}

// TestWatchResumesAfterRestart: NATS restarts (same port and store dir)
// and a rotation written right after reaches the watcher within a second
// of the write (a watcher left to notice on its own took ~20 s): WithConn
// re-creates it on the reconnect, resuming after the last revision.
func TestWatchResumesAfterRestart(t *testing.T) {
	addr, dir := testkit.FreeAddr(t), t.TempDir()
	srv, err := natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { natsembed.Stop(srv) }()
	connect := func() (*nats.Conn, jetstream.JetStream) {
		nc, err := bus.Connect(context.Background(), config.NATS{URL: srv.ClientURL()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		return nc, js
	}
	nc, js := connect()
	defer nc.Close()
	wnc, wjs := connect() // the admin service: its own connection
	defer wnc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := bus.Setup(ctx, js, bus.SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wkv, err := wjs.KeyValue(ctx, bus.BucketCredentials)
	if err != nil {
		t.Fatal(err)
	}
	box, _ := NewBox(testKey(7))
	s := &seen{got: map[string]string{}}
	applied := make(chan time.Time, 16)
	ready := make(chan struct{})
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Watch(wctx, res.Credentials, testKey(7), func(p, k string, v config.Secret) {
			s.set(p, k, v)
			applied <- time.Now()
		}, WithConn(nc), WithReady(func() { close(ready) }))
	}()
	defer func() {
		wcancel()
		<-done
	}()
	<-ready

	natsembed.Stop(srv)
	srv, err = natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	written := testkit.Retry(t, 10*time.Second, 5*time.Millisecond, func() error {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		_, _, err := Put(pctx, wkv, box, "openai", "primary", config.NewSecret("after-restart"), "ops")
		return err
	})
	select {
	case at := <-applied:
		d := at.Sub(written)
		t.Logf("rotation applied %s after the write that followed a NATS restart", d.Round(time.Millisecond))
		if d > time.Second {
			t.Errorf("rotation after a NATS restart applied %s after the write, want within 1s", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("rotation after a NATS restart not applied within 10 s")
	}
	if got := s.get("openai/primary"); got != "after-restart" {
		t.Fatalf("secret %q", got)
	}
}
