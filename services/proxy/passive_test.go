package proxy

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

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
			success, failed := f.svc.rt.Load().passive.Pending(0)
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
