package health

import (
	"encoding/json"
	"testing"
)

// A record written before the new names (passive_success, ...) reads as
// one written with them; where both are there the new name counts.
func TestRecordReadsEitherName(t *testing.T) {
	for _, tt := range []struct {
		name, in   string
		succ, fail uint64
		latency    float64
	}{
		{"earlier names", `{"provider":"p","passive_success":4,"passive_failure":2,"avg_latency_ms":1.5}`, 4, 2, 1.5},
		{"new names", `{"provider":"p","passive_success_count":4,"passive_failure_count":2,"average_latency_ms":1.5,"half_open":true}`, 4, 2, 1.5},
		{"both: the new one counts", `{"provider":"p","passive_success":1,"passive_success_count":4,"avg_latency_ms":9,"average_latency_ms":1.5}`, 4, 0, 1.5},
	} {
		var r Record
		if err := json.Unmarshal([]byte(tt.in), &r); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if r.PassiveSuccess != tt.succ || r.PassiveFailure != tt.fail || r.AvgLatencyMS != tt.latency || r.Provider != "p" {
			t.Errorf("%s: %+v", tt.name, r)
		}
	}
	b, err := json.Marshal(Record{Provider: "p", CircuitState: CircuitHalfOpen, PassiveSuccess: 3, Revision: 9})
	if err != nil {
		t.Fatal(err)
	}
	var back Record
	if err := json.Unmarshal(b, &back); err != nil || back.PassiveSuccess != 3 || back.CircuitState != CircuitHalfOpen || back.Revision != 0 {
		t.Errorf("round trip of %s: %+v %v", b, back, err)
	}
}
