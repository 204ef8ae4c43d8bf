package proxy

import (
	"math"
	"testing"
	"time"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/health"
)

// A fresh proxy starts from the health records' latencies (a later record
// does not overwrite what it has); another proxy's report folds in as its
// samples would; what the proxy does not route to is not kept.
func TestLatencyFromTheFleet(t *testing.T) {
	f := newFixture(t)
	s := f.svc
	rt, _ := s.rt.Load().table.Resolve("fake-openai/demo-model")
	lat := rt.Steps[0].Latency
	if _, ok := lat.MS(); ok {
		t.Fatal("a fresh proxy has a latency before anything measured it")
	}

	view := health.NewView(nil)
	view.Apply(health.Change{ID: "fake-openai._", Record: health.Record{ID: "fake-openai._", Provider: "fake-openai",
		Status: health.Healthy, UpdatedAt: time.Now(), PassiveLatencyByModel: map[string]float64{"demo-model": 120, "unknown-model": 5}}})
	view.Apply(health.Change{ID: "fake-openai.a1", Record: health.Record{ID: "fake-openai.a1", Provider: "fake-openai", Key: "a1",
		Status: health.Healthy, UpdatedAt: time.Now(), PassiveLatencyMS: 80}})
	s.setHealth(view.Snapshot())
	if ms, _ := lat.MS(); ms != 120 {
		t.Fatalf("seeded %g ms, want 120 from the record", ms)
	}
	if s.latency.Lookup("fake-openai", "unknown-model") != nil {
		t.Fatal("a model the proxy does not route to got a latency entry")
	}
	if ms, _ := s.rt.Load().table.Key("fake-openai", "a1").Latency.MS(); ms != 80 {
		t.Fatalf("key a1 seeded %g ms, want 80", ms)
	}
	// A later record does not overwrite what is there.
	view.Apply(health.Change{ID: "fake-openai._", Record: health.Record{ID: "fake-openai._", Provider: "fake-openai",
		Status: health.Healthy, UpdatedAt: time.Now(), PassiveLatencyByModel: map[string]float64{"demo-model": 500}}})
	s.setHealth(view.Snapshot())
	if ms, _ := lat.MS(); ms != 120 {
		t.Fatalf("a later record moved the latency to %g ms", ms)
	}

	alpha := s.rt.Load().latencyAlpha
	rep := health.PassiveReport{Version: health.PassiveVersion, Provider: "fake-openai", Instance: "proxy-other",
		Models: map[string]health.PassiveCounts{"demo-model": {Success: 3, LatencyMSSum: 30}},
		Keys:   map[string]health.PassiveCounts{"a1": {Success: 3, LatencyMSSum: 30}, "ghost": {Success: 1, LatencyMSSum: 1}}}
	s.foldReport(rep, time.Now().UnixNano())
	want := route.Latency{}
	want.Seed(120, 1)
	want.Fold(10, 3, alpha, 2)
	got, _ := lat.MS()
	if w, _ := want.MS(); math.Abs(got-w) > 1e-9 {
		t.Fatalf("after another proxy's report: %g ms, want %g", got, w)
	}
	if s.latency.LookupKey("fake-openai", "ghost") != nil {
		t.Fatal("an unknown key got a latency entry")
	}
}
