package proxy

import (
	"net"
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

// TestTransportErrorsHideAddresses: a transport failure's text reaches
// the caller without the network addresses in it (Go's "dial tcp
// 10.0.3.9:443: connection refused"): those are the operator's.
func TestTransportErrorsHideAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	f := oneProviderFixture(t, "openai", "http://"+addr+"/v1", "sk-stub")
	status, _, body := f.call(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if status != 502 || strings.Contains(string(body), "127.0.0.1") || !strings.Contains(string(body), "[address]") {
		t.Fatalf("%d %s", status, body)
	}
	for in, want := range map[string]string{
		"read tcp 10.0.0.7:51234->10.0.3.9:443: read: connection reset by peer": "read tcp [address]->[address]: read: connection reset by peer",
		"dial tcp [fd00::1]:443: connect: connection refused":                   "dial tcp [address]: connect: connection refused",
		"model gpt-4.1 failed": "model gpt-4.1 failed",
		"key [redacted] of oa/claude-sonnet-4[1m] at messages[0]": "key [redacted] of oa/claude-sonnet-4[1m] at messages[0]",
		"p/llama-1.2.3.4 refused":                                 "p/llama-1.2.3.4 refused",
	} {
		if got := maskAddrs(in); got != want {
			t.Errorf("maskAddrs(%q) = %q, want %q", in, got, want)
		}
	}
}
