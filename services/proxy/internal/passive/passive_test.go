package passive

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
)

// passiveTable is a route table of two providers of two keys each (its
// upstreams are never asked).
func passiveTable(t testing.TB) *route.Table {
	t.Helper()
	cfg := config.Defaults()
	cfg.Providers = []config.Provider{
		{
			Name: "fake-openai", Type: "openai", BaseURL: "http://127.0.0.1:1/v1", Selection: "round_robin",
			Keys: []config.Key{
				{ID: "a1", Priority: 1, Weight: 1, Value: config.NewSecret("key-a1")},
				{ID: "a2", Priority: 1, Weight: 1, Value: config.NewSecret("key-a2")},
			},
			Models: []config.Model{{Name: "demo-model", Kind: "chat"}, {Name: "demo-embed-model", Kind: "embedding"}},
		},
		{
			Name: "fake-anthropic", Type: "anthropic", BaseURL: "http://127.0.0.1:1", Selection: "round_robin",
			Keys: []config.Key{
				{ID: "b1", Weight: 1, Value: config.NewSecret("key-b1")},
				{ID: "b2", Weight: 1, Value: config.NewSecret("key-b2")},
			},
			Models: []config.Model{{Name: "demo-claude", Upstream: "claude-upstream", Kind: "chat"}},
		},
	}
	table, err := route.Build(cfg, route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// keyIndex finds a key of a provider in the table, with the step of the
// provider's first model.
func keyIndex(t testing.TB, table *route.Table, provider, keyID string) (*route.Step, int) {
	t.Helper()
	for _, p := range table.Providers {
		if p.Name != provider {
			continue
		}
		for _, n := range table.Names {
			if rt, _ := table.Resolve(n.ID); n.OwnedBy == provider && rt.Kind == "model" {
				for _, k := range p.Keys {
					if k.ID == keyID {
						return &rt.Steps[0], k.Index()
					}
				}
			}
		}
	}
	t.Fatalf("no key %s/%s", provider, keyID)
	return nil, 0
}

func TestPassiveCount(t *testing.T) {
	fail := func(c failure.Class) hold.Outcome {
		return hold.Outcome{Result: failure.Result{Class: c}, Status: 500}
	}
	tests := []struct {
		name             string
		out              hold.Outcome
		success, failure uint64
	}{
		{name: "served", out: hold.Outcome{OK: true}, success: 1},
		{name: "transient", out: fail(failure.Transient), failure: 1},
		{name: "transient retried", out: hold.Outcome{Result: failure.Result{Class: failure.Transient}, Retrying: true}, failure: 1},
		{name: "credential rejected", out: fail(failure.CredentialRejected), failure: 1},
		{name: "rate limit", out: fail(failure.RateLimit), failure: 1},
		{name: "model not accessible", out: fail(failure.ModelNotAccessible), failure: 1},
		{name: "caller cancelled", out: hold.Outcome{Result: failure.Result{Class: failure.Transient}, Cancelled: true}},
		{name: "request rejected", out: fail(failure.RequestRejected)},
		{name: "unrecognised", out: fail(failure.Unrecognised)},
	}
	table := passiveTable(t)
	pi, ki := keyIndex(t, table, "fake-openai", "a2")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := New(table)
			pc.Count(pi, ki, tt.out, 0)
			k := &pc.providers[pi.Provider.Index].keys[ki]
			if k.id != "a2" || k.success.Load() != tt.success || k.failure.Load() != tt.failure {
				t.Fatalf("key %s: success %d failure %d, want %d %d", k.id, k.success.Load(), k.failure.Load(), tt.success, tt.failure)
			}
		})
	}
	var off *Counters
	off.Count(pi, ki, hold.Outcome{OK: true}, 0) // reports off: a no-op
}

// fakePublisher records what Flush publishes.
type fakePublisher struct {
	connected bool
	err       error
	msgs      []*nats.Msg
}

func (p *fakePublisher) IsConnected() bool { return p.connected }

func (p *fakePublisher) Publish(subject string, data []byte) error {
	if p.err != nil {
		return p.err
	}
	p.msgs = append(p.msgs, &nats.Msg{Subject: subject, Data: data})
	return nil
}

func TestPassiveFlush(t *testing.T) {
	table := passiveTable(t)
	pc := New(table)
	a1p, a1 := keyIndex(t, table, "fake-openai", "a1")
	_, a2 := keyIndex(t, table, "fake-openai", "a2")
	for range 3 {
		pc.Count(a1p, a1, hold.Outcome{Result: failure.Result{Class: failure.Transient}}, 0)
	}
	for range 5 {
		pc.Count(a1p, a2, hold.Outcome{OK: true}, 40*time.Millisecond)
	}
	pub := &fakePublisher{connected: true}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if sent, dropped := pc.Flush(pub, "proxy-test", now, 10*time.Second); sent != 1 || dropped != 0 {
		t.Fatalf("flush: sent %d dropped %d, want 1 0", sent, dropped)
	}
	if len(pub.msgs) != 1 || pub.msgs[0].Subject != "switchyard.passive.fake-openai" {
		t.Fatalf("published %+v", pub.msgs)
	}
	rep, err := health.ParsePassiveReport(pub.msgs[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]health.PassiveCounts{"a1": {Failure: 3}, "a2": {Success: 5, LatencyMSSum: 200}}
	if rep.Provider != "fake-openai" || rep.Instance != "proxy-test" || rep.IntervalMS != 10000 || !rep.At.Equal(now) ||
		len(rep.Keys) != 2 || rep.Keys["a1"] != want["a1"] || rep.Keys["a2"] != want["a2"] {
		t.Fatalf("report %s", pub.msgs[0].Data)
	}
	// The same attempts by model, with the average latency of the successes.
	if m := rep.Models[a1p.Model]; len(rep.Models) != 1 || m.Success != 5 || m.Failure != 3 || m.AvgLatencyMS() != 40 {
		t.Fatalf("models of the report %s", pub.msgs[0].Data)
	}

	// Nothing new: nothing published.
	if sent, dropped := pc.Flush(pub, "proxy-test", now, time.Second); sent != 0 || dropped != 0 || len(pub.msgs) != 1 {
		t.Fatalf("empty flush: sent %d dropped %d, %d messages", sent, dropped, len(pub.msgs))
	}

	// NATS down: the report is dropped and its counts are not carried over.
	pc.Count(a1p, a2, hold.Outcome{OK: true}, 0)
	down := &fakePublisher{}
	if sent, dropped := pc.Flush(down, "proxy-test", now, time.Second); sent != 0 || dropped != 1 {
		t.Fatalf("flush while down: sent %d dropped %d", sent, dropped)
	}
	failing := &fakePublisher{connected: true, err: errors.New("nats: connection closed")}
	pc.Count(a1p, a2, hold.Outcome{OK: true}, 0)
	if sent, dropped := pc.Flush(failing, "proxy-test", now, time.Second); sent != 0 || dropped != 1 {
		t.Fatalf("flush with a failing publish: sent %d dropped %d", sent, dropped)
	}
	if sent, _ := pc.Flush(pub, "proxy-test", now, time.Second); sent != 0 {
		t.Fatal("dropped counts were reported later")
	}
}

// Counting an attempt allocates nothing (the request path).
func TestPassiveCountAllocs(t *testing.T) {
	table := passiveTable(t)
	pc := New(table)
	pi, ki := keyIndex(t, table, "fake-anthropic", "b2")
	out := hold.Outcome{Result: failure.Result{Class: failure.Transient}, Status: 503}
	if n := testing.AllocsPerRun(1000, func() {
		pc.Count(pi, ki, hold.Outcome{OK: true}, 0)
		pc.Count(pi, ki, out, 0)
	}); n != 0 {
		t.Fatalf("count allocates %.1f times per call", n)
	}
}

func BenchmarkPassiveCount(b *testing.B) {
	table := passiveTable(b)
	pc := New(table)
	pi, ki := keyIndex(b, table, "fake-openai", "a1")
	out := hold.Outcome{OK: true}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			pc.Count(pi, ki, out, 0)
		}
	})
}
