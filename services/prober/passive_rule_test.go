package prober

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// publishReport sends a passive report as a proxy would.
func (f *fixture) publishReport(t *testing.T, r health.PassiveReport) {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.nc.Publish(health.PassiveSubject(r.Provider), data); err != nil {
		t.Fatal(err)
	}
}

// waitBound waits until the replica has bound the buckets (its passive
// subscription is then in place) and the given records exist.
func (f *fixture) waitBound(t *testing.T, r *replica, ids ...[2]string) {
	t.Helper()
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if r.svc.member.Resources() == nil {
			return fmt.Errorf("%s has not bound the buckets", r.svc.Instance())
		}
		for _, id := range ids {
			if _, err := f.healthRecord(id[0], id[1]); err != nil {
				return err
			}
		}
		return nil
	})
}

// wantRecord polls a health record until check accepts it.
func wantRecord(f *fixture, provider, key string, check func(health.Record) error) func() error {
	return func() error {
		rec, err := f.healthRecord(provider, key)
		if err != nil {
			return err
		}
		if err := check(rec); err != nil {
			return fmt.Errorf("%s: %w (record: status %s, reason %q, passive %d/%d)", rec.ID, err, rec.Status, rec.Reason, rec.PassiveSuccess, rec.PassiveFailure)
		}
		return nil
	}
}

func statusIs(st health.Status, reason string) func(health.Record) error {
	return func(rec health.Record) error {
		if rec.Status != st || rec.Reason != reason {
			return fmt.Errorf("want %s (%q)", st, reason)
		}
		if rec.PassiveDegraded != strings.HasPrefix(reason, "passive:") {
			return fmt.Errorf("passive_degraded %v", rec.PassiveDegraded)
		}
		return nil
	}
}

// nextHealthEvent returns the next health event on sub whose status is st.
func nextHealthEvent(t *testing.T, sub *nats.Subscription, st health.Status) health.Event {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("no health event with status %s on %s: %v", st, sub.Subject, err)
		}
		var ev health.Event
		if err := json.Unmarshal(msg.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Status == st {
			return ev
		}
	}
}

// TestPassiveRuleDegradesAndRecovers: a target whose active check passes
// (or that has none) is recorded degraded while its real requests fail
// too often in the passive window (at least passive_degraded_failures and
// passive_degraded_ratio of them), with a health event, and comes back by
// itself when the failures slide out of the window. Per-key records follow
// their own key's requests; a target under the ratio stays healthy.
func TestPassiveRuleDegradesAndRecovers(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
  passive_window: 3s
  passive_degraded_failures: 3
  passive_degraded_ratio: 0.5
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}, {id: k2, secret: env:K2}]
    models: [{name: gpt-4o-mini}]
  - name: p2
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}, {id: k2, secret: env:K2}]
    models: [{name: gpt-4o-mini}]
    health_check: {per_key: true}
  - name: p3
    type: openai-compatible
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: m1}]
`)
	sub1, err := f.nc.SubscribeSync("switchyard.events.health.p1")
	if err != nil {
		t.Fatal(err)
	}
	sub2, err := f.nc.SubscribeSync("switchyard.events.health.p2.k2")
	if err != nil {
		t.Fatal(err)
	}
	r := f.startProber(t, cfg)
	f.waitBound(t, r, [2]string{"p1", ""}, [2]string{"p2", "k1"}, [2]string{"p2", "k2"}, [2]string{"p3", ""})
	for _, id := range [][2]string{{"p1", ""}, {"p2", "k1"}, {"p2", "k2"}, {"p2", ""}} {
		testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, id[0], id[1], health.Healthy))
	}
	const noPath = "no health_check.path configured"
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantRecord(f, "p3", "", statusIs(health.Unknown, noPath)))

	// p1: 4 of 6 failed (over both keys); p2: k2 3 of 3 failed, k1 1 of 5,
	// the provider 4 of 8; p3 (no check) 3 of 3; p4 is not configured.
	f.publishReport(t, report("p1", map[string]health.PassiveCounts{"k1": {Success: 1, Failure: 3}, "k2": {Success: 1, Failure: 1}}))
	f.publishReport(t, report("p2", map[string]health.PassiveCounts{"k1": {Success: 4, Failure: 1}, "k2": {Failure: 3}}))
	f.publishReport(t, report("p3", map[string]health.PassiveCounts{"none": {Failure: 3}}))

	passive := func(failed, all int) string {
		return fmt.Sprintf("passive: %d of %d real requests failed in the last 3s", failed, all)
	}
	for _, c := range []struct {
		provider, key string
		status        health.Status
		reason        string
	}{
		{"p1", "", health.Degraded, passive(4, 6)},
		{"p2", "k2", health.Degraded, passive(3, 3)},
		{"p2", "", health.Degraded, passive(4, 8)},
		{"p3", "", health.Degraded, passive(3, 3)},
	} {
		testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantRecord(f, c.provider, c.key, statusIs(c.status, c.reason)))
	}
	// under the count (1 failure) and under the ratio: still healthy
	if err := wantRecord(f, "p2", "k1", statusIs(health.Healthy, ""))(); err != nil {
		t.Fatal(err)
	}
	// degraded is advice: nobody is offline
	for _, id := range [][2]string{{"p1", ""}, {"p2", "k2"}, {"p2", ""}, {"p3", ""}} {
		if rec, _ := f.healthRecord(id[0], id[1]); rec.Offline() || (rec.ActiveCheckOK != nil) != (id[0] != "p3") {
			t.Fatalf("%s: offline %v, active_check_ok %v", rec.ID, rec.Offline(), rec.ActiveCheckOK)
		}
	}
	ev := nextHealthEvent(t, sub1, health.Degraded)
	if ev.Previous != health.Healthy || ev.Reason != passive(4, 6) {
		t.Fatalf("p1 event %+v", ev)
	}
	if ev := nextHealthEvent(t, sub2, health.Degraded); ev.Key != "k2" || ev.Previous != health.Healthy {
		t.Fatalf("p2.k2 event %+v", ev)
	}

	// The failures leave the window: every target recovers by itself.
	for _, c := range []struct {
		provider, key string
		status        health.Status
		reason        string
	}{
		{"p1", "", health.Healthy, ""},
		{"p2", "k2", health.Healthy, ""},
		{"p2", "", health.Healthy, "2 of 2 checked keys healthy"},
		{"p3", "", health.Unknown, noPath},
	} {
		testkit.CheckFor(t, 15*time.Second, 20*time.Millisecond, wantRecord(f, c.provider, c.key, func(rec health.Record) error {
			if rec.PassiveFailure != 0 {
				return fmt.Errorf("failures still in the window")
			}
			return statusIs(c.status, c.reason)(rec)
		}))
	}
	if ev := nextHealthEvent(t, sub1, health.Healthy); ev.Previous != health.Degraded {
		t.Fatalf("p1 recovery event %+v", ev)
	}
}

// TestPassiveRuleOff: passive_degraded_failures 0 leaves the status to the
// active check however the real requests fail.
func TestPassiveRuleOff(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
  passive_degraded_failures: 0
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
`)
	r := f.startProber(t, cfg)
	f.waitBound(t, r, [2]string{"p1", ""})
	f.publishReport(t, report("p1", map[string]health.PassiveCounts{"k1": {Failure: 50}}))
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantRecord(f, "p1", "", func(rec health.Record) error {
		if rec.PassiveFailure != 50 {
			return fmt.Errorf("report not counted yet")
		}
		return statusIs(health.Healthy, "")(rec)
	}))
}

// TestPassiveLatencyInRecords: the records carry the average latency of
// the successful real requests in the window (a provider's over its keys,
// a key's its own) and, on provider records, by model (models with
// successes only); every record has updated_at, moving with each write.
func TestPassiveLatencyInRecords(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}, {id: k2, secret: env:K2}]
    models: [{name: gpt-4o-mini}, {name: gpt-4o}]
    health_check: {per_key: true}
`)
	r := f.startProber(t, cfg)
	f.waitBound(t, r, [2]string{"p1", "k1"}, [2]string{"p1", "k2"})
	started := time.Now().UTC()
	rep := report("p1", map[string]health.PassiveCounts{
		"k1": {Success: 2, LatencyMSSum: 300},             // 150 ms
		"k2": {Success: 2, Failure: 1, LatencyMSSum: 500}, // 250 ms
	})
	rep.Models = map[string]health.PassiveCounts{
		"gpt-4o-mini": {Success: 3, LatencyMSSum: 450}, // 150 ms
		"gpt-4o":      {Success: 1, Failure: 1, LatencyMSSum: 350},
		"o1":          {Failure: 2}, // no success: left out
	}
	f.publishReport(t, rep)
	for _, c := range []struct {
		key     string
		latency float64
		byModel string
	}{
		{"", 200, "map[gpt-4o:350 gpt-4o-mini:150]"},
		{"k1", 150, "map[]"},
		{"k2", 250, "map[]"},
	} {
		testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantRecord(f, "p1", c.key, func(rec health.Record) error {
			if rec.PassiveLatencyMS != c.latency || fmt.Sprint(rec.PassiveLatencyByModel) != c.byModel {
				return fmt.Errorf("passive latency %v %v, want %v %s", rec.PassiveLatencyMS, rec.PassiveLatencyByModel, c.latency, c.byModel)
			}
			if rec.UpdatedAt.Before(started) || rec.UpdatedAt.Location() != time.UTC {
				return fmt.Errorf("updated_at %v, want UTC after %v", rec.UpdatedAt, started)
			}
			return nil
		}))
	}
	// the checks' own average is kept apart
	rec, _ := f.healthRecord("p1", "")
	if rec.AvgLatencyMS == rec.PassiveLatencyMS || rec.AvgLatencyMS <= 0 {
		t.Fatalf("avg_latency_ms %v (the checks' average) vs passive %v", rec.AvgLatencyMS, rec.PassiveLatencyMS)
	}
	// each check rewrites the record: updated_at moves
	first := rec.UpdatedAt
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantRecord(f, "p1", "k1", func(rec health.Record) error {
		if !rec.UpdatedAt.After(first) {
			return fmt.Errorf("updated_at %v not after %v", rec.UpdatedAt, first)
		}
		return nil
	}))
}

// TestBreakerSuccessThresholdThroughProber: a proxy's breaker tripped on
// p1; with resilience.breaker.success_threshold 3 the prober's probes
// (its cheap checks of the due hold) release it only at the third success:
// the first two leave it held with probe_successes 1 and 2, each followed
// at once by the next probe.
func TestBreakerSuccessThresholdThroughProber(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
resilience:
  breaker: {cooldown: 1s, max_cooldown: 1m, success_threshold: 3}
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
    health_check: {interval: 1h}
`)
	probes, err := f.nc.SubscribeSync("switchyard.events.probe.p1")
	if err != nil {
		t.Fatal(err)
	}
	other := f.otherInstance(t, cfg)
	for range 5 {
		other.Engine.Report("p1", "k1", "gpt-4o-mini", false, hold.Outcome{Status: 503, Result: failure.Result{Class: failure.Transient, Code: "server_error"}, Operation: "chat"})
	}
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, wantHold(f, "p1._", hold.StateHeld))
	f.startProber(t, cfg)

	var outcomes []string
	var counts []int
	for len(outcomes) == 0 || outcomes[len(outcomes)-1] != hold.ProbeReleased {
		msg, err := probes.NextMsg(15 * time.Second)
		if err != nil {
			t.Fatalf("probe events so far %v: %v", outcomes, err)
		}
		var ev hold.Event
		if err := json.Unmarshal(msg.Data, &ev); err != nil {
			t.Fatal(err)
		}
		outcomes = append(outcomes, ev.Outcome)
		counts = append(counts, ev.ProbeSuccesses)
		if len(outcomes) > 3 {
			break
		}
	}
	if fmt.Sprint(outcomes) != "[counted counted released]" || fmt.Sprint(counts) != "[1 2 0]" {
		t.Fatalf("probe events %v with probe_successes %v, want [counted counted released] [1 2 0]", outcomes, counts)
	}
	testkit.CheckFor(t, 5*time.Second, 20*time.Millisecond, wantHold(f, "p1._", hold.StateReleased))
	rec, _ := f.holdRecord("p1._")
	if !strings.HasPrefix(rec.RecordedBy, "prober-") || rec.ReleaseSource != "probe" {
		t.Fatalf("released %+v", rec)
	}
}
