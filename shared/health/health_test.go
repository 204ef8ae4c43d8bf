package health

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/natsembed"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func setup(t *testing.T) (*nats.Conn, *bus.Resources) {
	t.Helper()
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsembed.Stop(ns) })
	nc, err := bus.Connect(context.Background(), config.NATS{URL: ns.ClientURL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := bus.Setup(context.Background(), js, bus.SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return nc, res
}

func TestIDs(t *testing.T) {
	tests := []struct {
		name, provider, key, id string
	}{
		{name: "provider", provider: "openai-eu", id: "openai-eu._"},
		{name: "key", provider: "openai-eu", key: "k1", id: "openai-eu.k1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ID(tt.provider, tt.key); got != tt.id {
				t.Fatalf("ID = %q, want %q", got, tt.id)
			}
			p, k, err := ParseID(tt.id)
			if err != nil || p != tt.provider || k != tt.key {
				t.Fatalf("ParseID(%q) = %q, %q, %v", tt.id, p, k, err)
			}
		})
	}
	if _, _, err := ParseID("nodot"); err == nil {
		t.Fatal("ParseID accepted an id without a key token")
	}
}

// TestStoreViewAndEvents: a record put in the bucket reaches a view within
// moments, a deletion removes it, and a published event arrives on its
// subject with the secret-looking part of its reason masked.
func TestStoreViewAndEvents(t *testing.T) {
	nc, res := setup(t)
	st := NewStore(res.Health)
	ctx := context.Background()
	changes := make(chan *Snapshot, 16)
	v := NewView(func(s *Snapshot) { changes <- s })
	runView(t, v, res, nc)

	okFalse := false
	rec := Record{Provider: "p1", Status: Unhealthy, Reason: "HTTP 503", ActiveCheckOK: &okFalse, ConsecutiveFailures: 3, CheckedAt: time.Now().UTC()}
	if _, err := st.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if !v.Snapshot().Offline("p1") {
			return fmt.Errorf("p1 not offline in the view: %+v", v.Snapshot().Records())
		}
		return nil
	})
	got, err := st.Get(ctx, "p1._")
	if err != nil || got.Status != Unhealthy || got.Version != SchemaVersion || got.Revision == 0 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if v.Snapshot().KeyUnhealthy("p1", "k1") {
		t.Fatal("a key without a record is unhealthy")
	}
	if err := res.Health.Delete(ctx, "p1._"); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if v.Snapshot().Len() != 0 {
			return fmt.Errorf("records left: %+v", v.Snapshot().Records())
		}
		return nil
	})

	sub, err := nc.SubscribeSync("switchyard.events.health.>")
	if err != nil {
		t.Fatal(err)
	}
	rec.Key = "k1"
	rec.Reason = "invalid key sk-abcdefghijklmnopqrstuvwxyz"
	if err := Publish(nc, EventFor(rec, Healthy, time.Now())); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "switchyard.events.health.p1.k1" {
		t.Fatalf("subject %q", msg.Subject)
	}
	var ev Event
	if err := json.Unmarshal(msg.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Kind != "health" || ev.Status != Unhealthy || ev.Previous != Healthy || ev.Reason != "invalid key [redacted]" {
		t.Fatalf("event %+v", ev)
	}
}

// runView runs v on the health bucket of res until the test ends and
// waits until it has synced.
func runView(t *testing.T, v *View, res *bus.Resources, nc *nats.Conn) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx, res.Health, nc, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-v.Synced():
	case <-time.After(5 * time.Second):
		t.Fatal("view not synced")
	}
}

// TestViewResumesAfterRestart: NATS restarts (same port and store dir)
// and a record written right after reaches the view within a second of
// the write: the watcher is re-created on the reconnect, resuming after
// the last revision it applied.
func TestViewResumesAfterRestart(t *testing.T) {
	addr, dir := testkit.FreeAddr(t), t.TempDir()
	ns, err := natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { natsembed.Stop(ns) }()
	connect := func() (*nats.Conn, *bus.Resources) {
		nc, err := bus.Connect(context.Background(), config.NATS{URL: ns.ClientURL()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		res, err := bus.Setup(context.Background(), js, bus.SetupOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return nc, res
	}
	nc, res := connect()
	_, wres := connect() // the prober: its own connection
	st := NewStore(wres.Health)

	applied := make(chan time.Time, 16)
	v := NewView(func(s *Snapshot) {
		if _, ok := s.Get("after", ""); ok {
			applied <- time.Now()
		}
	})
	runView(t, v, res, nc)
	ctx := context.Background()
	if _, err := st.Put(ctx, Record{Provider: "before", Status: Healthy}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { _, ok := v.Snapshot().Get("before", ""); return ok })

	natsembed.Stop(ns)
	if ns, err = natsembed.Start(natsembed.Options{Listen: addr, StoreDir: dir}); err != nil {
		t.Fatal(err)
	}
	written := testkit.Retry(t, 10*time.Second, 5*time.Millisecond, func() error {
		_, err := st.Put(ctx, Record{Provider: "after", Status: Unhealthy})
		return err
	})
	select {
	case at := <-applied:
		d := at.Sub(written)
		t.Logf("record applied %s after the write that followed a NATS restart", d.Round(time.Millisecond))
		if d > time.Second {
			t.Errorf("record written after a NATS restart applied %s after the write, want within 1s", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("record written after a NATS restart not applied within 10 s")
	}
	if _, ok := v.Snapshot().Get("before", ""); !ok {
		t.Error("the record from before the restart is gone from the view")
	}
}

// TestPutStampsUpdatedAt: every write of a record stamps updated_at (UTC),
// whatever the record carried, and the passive latency fields go through
// the bucket.
func TestPutStampsUpdatedAt(t *testing.T) {
	_, res := setup(t)
	st := NewStore(res.Health)
	ctx := context.Background()
	stale := time.Date(2020, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 3600))
	before := time.Now().UTC()
	rec := Record{Provider: "p1", Status: Degraded, UpdatedAt: stale, PassiveLatencyMS: 120.5,
		PassiveLatencyByModel: map[string]float64{"m1": 100, "m2": 141}, PassiveDegraded: true}
	if _, err := st.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(ctx, "p1._")
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().UTC()
	if got.UpdatedAt.Before(before) || got.UpdatedAt.After(after) || got.UpdatedAt.Location() != time.UTC {
		t.Fatalf("updated_at = %v, want UTC between %v and %v", got.UpdatedAt, before, after)
	}
	if got.PassiveLatencyMS != 120.5 || fmt.Sprint(got.PassiveLatencyByModel) != "map[m1:100 m2:141]" || !got.PassiveDegraded {
		t.Fatalf("passive fields %+v", got)
	}
	first := got.UpdatedAt
	if _, err := st.Put(ctx, got); err != nil {
		t.Fatal(err)
	}
	again, err := st.Get(ctx, "p1._")
	if err != nil {
		t.Fatal(err)
	}
	if again.UpdatedAt.Before(first) || again.Revision <= got.Revision {
		t.Fatalf("second write: updated_at %v (first %v), revision %d (first %d)", again.UpdatedAt, first, again.Revision, got.Revision)
	}
	e, err := res.Health.Get(ctx, "p1._")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(e.Value(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"updated_at", "passive_latency_ms", "passive_latency_by_model", "passive_degraded"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, e.Value())
		}
	}
}
