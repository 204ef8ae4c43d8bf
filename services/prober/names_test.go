package prober

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"switchyard.dev/shared/health"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// TestHealthRecordNames: health records, in the bucket and from GET
// /v1/health, carry the field names dashboards are written against
// (passive_success_count, passive_failure_count, average_latency_ms,
// half_open) and, for one release, the earlier ones beside them.
func TestHealthRecordNames(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
`)
	r := f.startProber(t, cfg)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, "p1", "", health.Healthy))
	want := []string{"passive_success_count", "passive_failure_count", "average_latency_ms", "half_open",
		"passive_success", "passive_failure", "avg_latency_ms", "circuit_state"}
	has := func(where string, rec map[string]any) {
		t.Helper()
		for _, k := range want {
			if _, ok := rec[k]; !ok {
				t.Errorf("%s: no %s in %v", where, k, rec)
			}
		}
		if rec["half_open"] != false || rec["average_latency_ms"] != rec["avg_latency_ms"] {
			t.Errorf("%s: half_open %v, average_latency_ms %v (avg_latency_ms %v)", where, rec["half_open"], rec["average_latency_ms"], rec["avg_latency_ms"])
		}
	}

	e, err := f.res.Health.Get(context.Background(), health.ID("p1", ""))
	if err != nil {
		t.Fatal(err)
	}
	var stored map[string]any
	if err := json.Unmarshal(e.Value(), &stored); err != nil {
		t.Fatal(err)
	}
	has("the bucket's record", stored)

	resp, err := http.Get(r.base + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Records []map[string]any `json:"records"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Records) != 1 {
		t.Fatalf("GET /v1/health: %v %v", err, list)
	}
	has("GET /v1/health", list.Records[0])
}
