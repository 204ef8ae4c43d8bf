package health

import (
	"errors"
	"testing"
)

func TestParsePassiveReport(t *testing.T) {
	tests := []struct {
		name, data string
		ok         bool
	}{
		{name: "valid", data: `{"v":1,"provider":"p1","instance":"proxy-a","at":"2026-01-02T03:04:05Z","interval_ms":10000,"keys":{"k1":{"success":3,"failure":1}}}`, ok: true},
		{name: "other version", data: `{"v":2,"provider":"p1","keys":{}}`},
		{name: "no provider", data: `{"v":1,"keys":{}}`},
		{name: "not JSON", data: `{"v":1,`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParsePassiveReport([]byte(tt.data))
			if !tt.ok {
				if !errors.Is(err, ErrPassiveReport) {
					t.Fatalf("err = %v, want ErrPassiveReport", err)
				}
				return
			}
			if err != nil || r.Provider != "p1" || r.Keys["k1"] != (PassiveCounts{Success: 3, Failure: 1}) || r.IntervalMS != 10000 {
				t.Fatalf("ParsePassiveReport = %+v, %v", r, err)
			}
		})
	}
	if PassiveSubject("openai-eu") != "switchyard.passive.openai-eu" {
		t.Fatal(PassiveSubject("openai-eu"))
	}
}
