package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/provider"
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

// The credential headers are built once per secret and set as they are:
// names canonical, and a line break in a secret or a configured header
// value cannot add a header to the upstream request.
func TestAuthHeadersCannotSplit(t *testing.T) {
	a := provider.New("openai", "http://127.0.0.1:1/v1", "", map[string]string{"x-org-tag": "team\r\nX-Injected: 1"})
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("http://127.0.0.1:1/v1/chat/completions")
	setAuth(req, buildAuth(a, "sk-one\nX-Smuggled: 2").pairs)
	head := string(req.Header.Header())
	for _, bad := range []string{"\r\nX-Injected:", "\r\nX-Smuggled:", "\nX-Injected", "\nX-Smuggled"} {
		if strings.Contains(head, bad) {
			t.Fatalf("a header was split (%q):\n%s", bad, head)
		}
	}
	if got := string(req.Header.Peek("X-Org-Tag")); got != "team  X-Injected: 1" {
		t.Errorf("X-Org-Tag %q", got)
	}
	if got := string(req.Header.Peek("Authorization")); got != "Bearer sk-one X-Smuggled: 2" {
		t.Errorf("Authorization %q", got)
	}
}
