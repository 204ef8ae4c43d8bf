package proxy

import (
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/tools/fakeprovider"
)

// An upstream that never answers is abandoned at the attempt timeout and
// the request fails over to the next key.
func TestAttemptTimeoutAbandonsHungUpstream(t *testing.T) {
	tests := []struct {
		name, body string
	}{
		{"non-stream", directBody},
		{"stream", `{"model":"fake-openai/demo-model","stream":true,"messages":[{"role":"user","content":"x"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, func(c *config.Config) {
				c.Timeouts.Attempt = 200 * time.Millisecond
				c.Providers[0].Keys[1].Priority = 0 // a1 first
				c.Retry.OnTransportErrors = false   // rotate at once
			})
			f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Hang: true})
			start := time.Now()
			status, h, body := f.call(t, "/v1/chat/completions", tt.body)
			if status != 200 || h.Get("X-Switchyard-Key-Id") != "a2" {
				t.Fatalf("status %d key %q: %s", status, h.Get("X-Switchyard-Key-Id"), body)
			}
			// the hung upstream never answers: a correctness deadline
			if el := time.Since(start); el > 10*time.Second {
				t.Errorf("took %v with a 200 ms attempt timeout", el)
			}
		})
	}
}

// A stream whose events stop after the first content is cut at the idle
// timeout: the hung read is interrupted, not left to the upstream.
func TestStreamIdleTimeoutInterruptsRead(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Timeouts.StreamIdle = 150 * time.Millisecond })
	f.openai.AddRule(fakeprovider.Rule{ChunkDelay: time.Hour, Chunks: 3})
	start := time.Now()
	_, events := f.stream(t, "/v1/chat/completions", streamBody)
	// the stalled upstream sends nothing for an hour: a correctness deadline
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("stalled stream took %v to end", el)
	}
	if len(events) == 0 || !strings.Contains(events[len(events)-1].data, "no event for 150ms") {
		t.Errorf("events %+v", events)
	}
}
