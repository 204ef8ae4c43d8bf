package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

func passiveTable(t testing.TB) *route.Table {
	t.Helper()
	oa, an := startFakes(t)
	table, err := route.Build(baseConfig(oa, an), route.Options{})
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
			pc := newPassiveCounters(table)
			pc.count(pi, ki, tt.out, 0)
			k := &pc.providers[pi.Provider.Index].keys[ki]
			if k.id != "a2" || k.success.Load() != tt.success || k.failure.Load() != tt.failure {
				t.Fatalf("key %s: success %d failure %d, want %d %d", k.id, k.success.Load(), k.failure.Load(), tt.success, tt.failure)
			}
		})
	}
	var off *passiveCounters
	off.count(pi, ki, hold.Outcome{OK: true}, 0) // reports off: a no-op
}

// fakePublisher records what flush publishes.
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
	pc := newPassiveCounters(table)
	a1p, a1 := keyIndex(t, table, "fake-openai", "a1")
	_, a2 := keyIndex(t, table, "fake-openai", "a2")
	for range 3 {
		pc.count(a1p, a1, hold.Outcome{Result: failure.Result{Class: failure.Transient}}, 0)
	}
	for range 5 {
		pc.count(a1p, a2, hold.Outcome{OK: true}, 40*time.Millisecond)
	}
	pub := &fakePublisher{connected: true}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if sent, dropped := pc.flush(pub, "proxy-test", now, 10*time.Second); sent != 1 || dropped != 0 {
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
	if sent, dropped := pc.flush(pub, "proxy-test", now, time.Second); sent != 0 || dropped != 0 || len(pub.msgs) != 1 {
		t.Fatalf("empty flush: sent %d dropped %d, %d messages", sent, dropped, len(pub.msgs))
	}

	// NATS down: the report is dropped and its counts are not carried over.
	pc.count(a1p, a2, hold.Outcome{OK: true}, 0)
	down := &fakePublisher{}
	if sent, dropped := pc.flush(down, "proxy-test", now, time.Second); sent != 0 || dropped != 1 {
		t.Fatalf("flush while down: sent %d dropped %d", sent, dropped)
	}
	failing := &fakePublisher{connected: true, err: errors.New("nats: connection closed")}
	pc.count(a1p, a2, hold.Outcome{OK: true}, 0)
	if sent, dropped := pc.flush(failing, "proxy-test", now, time.Second); sent != 0 || dropped != 1 {
		t.Fatalf("flush with a failing publish: sent %d dropped %d", sent, dropped)
	}
	if sent, _ := pc.flush(pub, "proxy-test", now, time.Second); sent != 0 {
		t.Fatal("dropped counts were reported later")
	}
}

// Counting an attempt allocates nothing (the request path).
func TestPassiveCountAllocs(t *testing.T) {
	table := passiveTable(t)
	pc := newPassiveCounters(table)
	pi, ki := keyIndex(t, table, "fake-anthropic", "b2")
	out := hold.Outcome{Result: failure.Result{Class: failure.Transient}, Status: 503}
	if n := testing.AllocsPerRun(1000, func() {
		pc.count(pi, ki, hold.Outcome{OK: true}, 0)
		pc.count(pi, ki, out, 0)
	}); n != 0 {
		t.Fatalf("count allocates %.1f times per call", n)
	}
}

func BenchmarkPassiveCount(b *testing.B) {
	table := passiveTable(b)
	pc := newPassiveCounters(table)
	pi, ki := keyIndex(b, table, "fake-openai", "a1")
	out := hold.Outcome{OK: true}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			pc.count(pi, ki, out, 0)
		}
	})
}

// A proxy on NATS publishes what its attempts did, per key, on
// switchyard.passive.<provider>.
func TestPassiveReportsPublished(t *testing.T) {
	ff := newFleet(t, 1, func(c *config.Config) { c.Proxy.PassiveReportInterval = 20 * time.Millisecond })
	ff.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.server_error"})
	sub := passiveSub(t, ff)
	const n = 6
	for range n {
		if status := ff.call(t, 0, directBody); status != 200 {
			t.Fatalf("status %d", status)
		}
	}
	a1Calls := callsWith(ff.openai, "key-a1")
	got := map[string]health.PassiveCounts{}
	deadline := time.Now().Add(5 * time.Second)
	for got["a2"].Success < n || got["a1"].Failure < uint64(a1Calls) {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("reports so far %+v (a1 called %d times): %v", got, a1Calls, err)
		}
		if msg.Subject != "switchyard.passive.fake-openai" {
			t.Fatalf("subject %s", msg.Subject)
		}
		var rep health.PassiveReport
		if err := json.Unmarshal(msg.Data, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Version != 1 || rep.Instance != ff.proxies[0].member.Instance || rep.IntervalMS <= 0 {
			t.Fatalf("report %s", msg.Data)
		}
		for id, c := range rep.Keys {
			g := got[id]
			g.Success += c.Success
			g.Failure += c.Failure
			got[id] = g
		}
	}
	if a1Calls == 0 || got["a1"].Success != 0 || got["a2"].Failure != 0 || got["a2"].Success != n || got["a1"].Failure != uint64(a1Calls) {
		t.Fatalf("reported %+v; a1 called %d times, %d requests", got, a1Calls, n)
	}
}

// A stream cut before its terminal event, or ended by the upstream's error
// event, counts against its target in passive health; a complete one
// counts once as a success.
func TestPassiveCountsStreamEnds(t *testing.T) {
	tests := []struct {
		name             string
		rule             fakeprovider.Rule
		success, failure uint64
	}{
		{"complete", fakeprovider.Rule{}, 1, 0},
		{"cut mid-way", fakeprovider.Rule{CutAfter: 2}, 0, 1},
		{"error event mid-way", fakeprovider.Rule{ErrorInStream: true, ErrorAfterChunks: 2}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Reports on (they need NATS), flushed only after the test.
			ff := newFleet(t, 1, func(c *config.Config) { c.Proxy.PassiveReportInterval = time.Hour })
			f := &fixture{openai: ff.openai, url: ff.urls[0], svc: ff.proxies[0]}
			if !reflect.DeepEqual(tt.rule, fakeprovider.Rule{}) {
				f.openai.AddRule(tt.rule)
			}
			resp, _ := f.stream(t, "/v1/chat/completions", `{"model":"fake-openai/demo-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			var success, failed uint64
			keys := f.svc.rt.Load().passive.providers[0].keys
			for i := range keys {
				success += keys[i].success.Load()
				failed += keys[i].failure.Load()
			}
			if success != tt.success || failed != tt.failure {
				t.Fatalf("passive success %d failure %d, want %d %d", success, failed, tt.success, tt.failure)
			}
		})
	}
}

// TestPassiveCountsAcrossSwaps: the counts of requests served on routings
// that were replaced (two swaps within one report interval) are all
// published, not only those of the last one replaced.
func TestPassiveCountsAcrossSwaps(t *testing.T) {
	ff := newFleet(t, 1, func(c *config.Config) { c.Proxy.PassiveReportInterval = time.Hour })
	p := ff.proxies[0]
	sub := passiveSub(t, ff)
	for v := range 3 {
		for range 2 {
			if status := ff.call(t, 0, directBody); status != 200 {
				t.Fatalf("status %d", status)
			}
		}
		if v < 2 {
			if err := p.Apply(baseConfig(ff.openai, ff.anthropic), v+2); err != nil {
				t.Fatal(err)
			}
		}
	}
	p.flushPassive(time.Now(), time.Second)
	var served uint64
	deadline := time.Now().Add(5 * time.Second)
	for served < 6 {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("%d of 6 successes reported: %v", served, err)
		}
		var rep health.PassiveReport
		if err := json.Unmarshal(msg.Data, &rep); err != nil {
			t.Fatal(err)
		}
		for _, c := range rep.Keys {
			served += c.Success
		}
	}
	if served != 6 {
		t.Fatalf("%d successes reported, want 6", served)
	}
}

// passiveSub subscribes to the passive reports of the fleet ff, on a
// connection of its own.
func passiveSub(t *testing.T, ff *fleetFixture) *nats.Subscription {
	t.Helper()
	nc, _ := testkit.ConnectNATS(t, ff.ns.ClientURL())
	sub, err := nc.SubscribeSync(health.PassiveSubjects)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}
