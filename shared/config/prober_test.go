package config

import (
	"strings"
	"testing"
)

// TestProberPassiveRule: the passive rule's keys default to 3 failures at
// a ratio of 0.5, 0 failures turns the rule off, and bad values are
// refused with errors naming the key.
func TestProberPassiveRule(t *testing.T) {
	path := writeConfig(t, minimal)
	cfg, err := Load(path, minimalEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Prober.PassiveDegradedFailures != 3 || cfg.Prober.PassiveDegradedRatio != 0.5 {
		t.Fatalf("defaults %d %v, want 3 0.5", cfg.Prober.PassiveDegradedFailures, cfg.Prober.PassiveDegradedRatio)
	}
	cfg, err = Load(writeConfig(t, minimal+"\nprober:\n  passive_degraded_failures: 0\n  passive_degraded_ratio: 1\n"), minimalEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Prober.PassiveDegradedFailures != 0 || cfg.Prober.PassiveDegradedRatio != 1 {
		t.Fatalf("set %d %v, want 0 1", cfg.Prober.PassiveDegradedFailures, cfg.Prober.PassiveDegradedRatio)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"passive_degraded_failures: -1", "prober.passive_degraded_failures: must be >= 0 (0 turns the passive rule off), got -1"},
		{"passive_degraded_ratio: 0", "prober.passive_degraded_ratio: must be above 0 and at most 1, got 0"},
		{"passive_degraded_ratio: 1.5", "prober.passive_degraded_ratio: must be above 0 and at most 1, got 1.5"},
		{"passive_degraded_ratio: -0.2", "prober.passive_degraded_ratio: must be above 0 and at most 1, got -0.2"},
	} {
		path := writeConfig(t, minimal+"\nprober:\n  "+tt.yaml+"\n")
		_, err := Load(path, minimalEnv)
		if err == nil || !strings.Contains(err.Error(), path+": "+tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.yaml, err, tt.want)
		}
	}
}
