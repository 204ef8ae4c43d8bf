package prober

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"

	"switchyard.dev/shared/health"
	"switchyard.dev/tools/fakeprovider"
)

// knownNames is a passive window's known for the named providers.
func knownNames(names ...string) func(string) bool {
	return func(p string) bool { return slices.Contains(names, p) }
}

func report(provider string, keys map[string]health.PassiveCounts) health.PassiveReport {
	return health.PassiveReport{Version: health.PassiveVersion, Provider: provider, Instance: "proxy-test", IntervalMS: 1000, Keys: keys}
}

// TestPassiveWindow: reports are summed per key and per provider over the
// window, leave it as it slides, and reports about unknown providers are
// ignored.
func TestPassiveWindow(t *testing.T) {
	w := newPassiveWindow(5*time.Minute, knownNames("p1", "p2")) // steps of 10 s
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	w.add(t0, report("p1", map[string]health.PassiveCounts{"k1": {Success: 2, Failure: 3}}))
	w.add(t0.Add(time.Second), report("p1", map[string]health.PassiveCounts{"k1": {Success: 1}, "k2": {Success: 4}}))
	w.add(t0.Add(2*time.Minute), report("p1", map[string]health.PassiveCounts{"k2": {Failure: 5}}))
	if w.add(t0, report("p9", map[string]health.PassiveCounts{"k1": {Success: 1}})) {
		t.Fatal("a report about an unknown provider was counted")
	}

	tests := []struct {
		name  string
		at    time.Time
		prov  string
		total health.PassiveCounts
		byKey map[string]health.PassiveCounts
	}{
		{name: "all in the window", at: t0.Add(3 * time.Minute), prov: "p1", total: health.PassiveCounts{Success: 7, Failure: 8},
			byKey: map[string]health.PassiveCounts{"k1": {Success: 3, Failure: 3}, "k2": {Success: 4, Failure: 5}}},
		{name: "the first reports slid out", at: t0.Add(5*time.Minute + 10*time.Second), prov: "p1", total: health.PassiveCounts{Failure: 5},
			byKey: map[string]health.PassiveCounts{"k2": {Failure: 5}}},
		{name: "everything slid out", at: t0.Add(8 * time.Minute), prov: "p1"},
		{name: "a provider without reports", at: t0, prov: "p2"},
		{name: "an unknown provider", at: t0, prov: "p9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			total, byKey := w.counts(tt.at, tt.prov)
			if total != tt.total || fmt.Sprint(byKey) != fmt.Sprint(tt.byKey) {
				t.Fatalf("counts = %+v %v, want %+v %v", total, byKey, tt.total, tt.byKey)
			}
		})
	}

	// A slot reused after a full turn starts from zero.
	w.add(t0.Add(5*time.Minute), report("p1", map[string]health.PassiveCounts{"k1": {Success: 1}}))
	if total, _ := w.counts(t0.Add(5*time.Minute), "p1"); total != (health.PassiveCounts{Success: 1, Failure: 5}) {
		t.Fatalf("after a turn: %+v", total)
	}
}

func TestPassiveWindowBoundsKeys(t *testing.T) {
	w := newPassiveWindow(time.Minute, knownNames("p1"))
	keys := map[string]health.PassiveCounts{"": {Success: 1}}
	for i := range maxPassiveKeys + 10 {
		keys[fmt.Sprintf("k%d", i)] = health.PassiveCounts{Success: 1}
	}
	now := time.Now()
	w.add(now, report("p1", keys))
	if _, byKey := w.counts(now, "p1"); len(byKey) != maxPassiveKeys {
		t.Fatalf("%d keys kept, want at most %d", len(byKey), maxPassiveKeys)
	}
}

// TestPassiveCountsInHealthRecords: two replicas receive the proxies'
// reports; the record of the provider (written by the replica holding its
// lease) shows each report once, in total and by key, and a per-key
// provider's key records show their own counts.
func TestPassiveCountsInHealthRecords(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, `
prober:
  lease_ttl: 1s
  check_timeout: 900ms
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
`)
	a := f.startProber(t, cfg)
	b := f.startProber(t, cfg)
	// A replica subscribes before it binds the buckets, on the same
	// connection: once both are bound, both receive the reports.
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, r := range []*replica{a, b} {
			if r.svc.member.Resources() == nil {
				return fmt.Errorf("%s has not bound the buckets", r.svc.Instance())
			}
		}
		for _, id := range [][2]string{{"p1", ""}, {"p2", "k1"}, {"p2", "k2"}} {
			if _, err := f.healthRecord(id[0], id[1]); err != nil {
				return err
			}
		}
		return nil
	})
	publish := func(r health.PassiveReport) {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.nc.Publish(health.PassiveSubject(r.Provider), data); err != nil {
			t.Fatal(err)
		}
	}
	publish(report("p1", map[string]health.PassiveCounts{"k1": {Failure: 4}, "k2": {Success: 6}}))
	publish(report("p1", map[string]health.PassiveCounts{"k2": {Success: 1}}))
	publish(report("p2", map[string]health.PassiveCounts{"k1": {Success: 2, Failure: 1}, "k2": {Failure: 3}}))

	want := func(provider, key string, total health.PassiveCounts, byKey string) func() error {
		return func() error {
			rec, err := f.healthRecord(provider, key)
			if err != nil {
				return err
			}
			got := health.PassiveCounts{Success: rec.PassiveSuccess, Failure: rec.PassiveFailure}
			if got != total || fmt.Sprint(rec.PassiveByKey) != byKey {
				return fmt.Errorf("%s: passive %+v %v, want %+v %s", rec.ID, got, rec.PassiveByKey, total, byKey)
			}
			return nil
		}
	}
	for _, c := range []struct {
		provider, key string
		total         health.PassiveCounts
		byKey         string
	}{
		{"p1", "", health.PassiveCounts{Success: 7, Failure: 4}, "map[k1:{0 4 0} k2:{7 0 0}]"},
		{"p2", "", health.PassiveCounts{Success: 2, Failure: 4}, "map[k1:{2 1 0} k2:{0 3 0}]"},
		{"p2", "k1", health.PassiveCounts{Success: 2, Failure: 1}, "map[]"},
		{"p2", "k2", health.PassiveCounts{Failure: 3}, "map[]"},
	} {
		testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, want(c.provider, c.key, c.total, c.byKey))
	}
}

// TestPassiveWindowLatencyAndModels: the window keeps the latency sums of
// the successful attempts by key and by model as they slide, so the
// averages are those of the window; models without a name are ignored
// and at most maxPassiveModels are kept.
func TestPassiveWindowLatencyAndModels(t *testing.T) {
	w := newPassiveWindow(5*time.Minute, knownNames("p1")) // steps of 10 s
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	r := report("p1", map[string]health.PassiveCounts{"k1": {Success: 2, Failure: 1, LatencyMSSum: 200}})
	r.Models = map[string]health.PassiveCounts{"m1": {Success: 2, LatencyMSSum: 200}, "m2": {Failure: 1}, "": {Success: 9}}
	w.add(t0, r)
	r = report("p1", map[string]health.PassiveCounts{"k1": {Success: 1, LatencyMSSum: 400}, "k2": {Success: 1, LatencyMSSum: 50}})
	r.Models = map[string]health.PassiveCounts{"m1": {Success: 2, LatencyMSSum: 450}}
	w.add(t0.Add(3*time.Minute), r)

	total, byKey := w.counts(t0.Add(4*time.Minute), "p1")
	if total != (health.PassiveCounts{Success: 4, Failure: 1, LatencyMSSum: 650}) || total.AvgLatencyMS() != 162.5 {
		t.Fatalf("total %+v", total)
	}
	if byKey["k1"].AvgLatencyMS() != 200 || byKey["k2"].AvgLatencyMS() != 50 {
		t.Fatalf("by key %+v", byKey)
	}
	if got := fmt.Sprint(w.models(t0.Add(4*time.Minute), "p1")); got != "map[m1:{4 0 650} m2:{0 1 0}]" {
		t.Fatalf("models %s", got)
	}
	// the first report slides out: its latencies go with it
	if got := fmt.Sprint(w.models(t0.Add(5*time.Minute+10*time.Second), "p1")); got != "map[m1:{2 0 450}]" {
		t.Fatalf("models after the slide %s", got)
	}
	if total, _ := w.counts(t0.Add(5*time.Minute+10*time.Second), "p1"); total.AvgLatencyMS() != 225 {
		t.Fatalf("total after the slide %+v", total)
	}
	if w.models(t0, "p9") != nil {
		t.Fatal("models of an unknown provider")
	}

	many := report("p1", nil)
	many.Models = map[string]health.PassiveCounts{}
	for i := range maxPassiveModels + 10 {
		many.Models[fmt.Sprintf("x%d", i)] = health.PassiveCounts{Success: 1}
	}
	w.add(t0, many)
	if n := len(w.models(t0, "p1")); n != maxPassiveModels {
		t.Fatalf("%d models kept, want %d", n, maxPassiveModels)
	}
}

// TestPassiveRuleBounds: the rule needs both the failure count and the
// ratio, applies only over a healthy or unknown active status, and a
// configuration built in code gets the default ratio.
func TestPassiveRuleBounds(t *testing.T) {
	s := &Service{cfg: withDefaults(config.Prober{PassiveDegradedFailures: 3})}
	if s.cfg.PassiveDegradedRatio != 0.5 {
		t.Fatalf("ratio %v, want the default 0.5", s.cfg.PassiveDegradedRatio)
	}
	for _, tt := range []struct {
		status           health.Status
		success, failure uint64
		degraded         bool
	}{
		{health.Healthy, 3, 3, true},   // 3 of 6: both met exactly
		{health.Healthy, 0, 2, false},  // 2 failures: under the count
		{health.Healthy, 4, 3, false},  // 3 of 7: under the ratio
		{health.Unknown, 1, 9, true},   // no check: the rule decides
		{health.Degraded, 0, 9, false}, // a failed (or slow) check decides
		{health.Unhealthy, 0, 9, false},
	} {
		rec := health.Record{Status: tt.status, PassiveSuccess: tt.success, PassiveFailure: tt.failure}
		s.passiveRule(&rec)
		if got := rec.PassiveDegraded && rec.Status == health.Degraded; got != tt.degraded {
			t.Errorf("%s %d/%d: degraded by the rule %v, want %v (%+v)", tt.status, tt.failure, tt.success+tt.failure, got, tt.degraded, rec)
		}
		if tt.degraded && rec.Reason != fmt.Sprintf("passive: %d of %d real requests failed in the last 5m0s", tt.failure, tt.success+tt.failure) {
			t.Errorf("reason %q", rec.Reason)
		}
	}
	s.cfg.PassiveDegradedFailures = 0
	rec := health.Record{Status: health.Healthy, PassiveFailure: 100}
	if s.passiveRule(&rec); rec.Status != health.Healthy {
		t.Fatal("the rule applied while off")
	}
}
