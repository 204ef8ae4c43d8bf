package config

import (
	"testing"
	"time"
)

func TestHeadroomSettings(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		on   bool
		wait time.Duration
	}{
		{"defaults", "", true, DefaultHeadroomMaxWait},
		{"off", "routing:\n  headroom:\n    enabled: false\n", false, DefaultHeadroomMaxWait},
		{"no wait", "routing:\n  headroom:\n    max_wait: 0s\n", true, 0},
		{"wait", "routing:\n  headroom:\n    max_wait: 500ms\n", true, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(writeConfig(t, minimal+"\n"+tt.yaml), minimalEnv)
			if err != nil {
				t.Fatal(err)
			}
			if h := c.Routing.Headroom; h.On() != tt.on || h.Wait() != tt.wait {
				t.Errorf("on %v wait %s, want %v %s", h.On(), h.Wait(), tt.on, tt.wait)
			}
		})
	}
}
