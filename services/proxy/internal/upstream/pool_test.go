package upstream

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/config"
)

// A new routing keeps a provider's pool (and its open connections) while
// the provider's connection settings are the same, and builds a new one
// when they changed; the provider's other timeouts are the new routing's
// either way.
func TestReuseKeepsThePoolWhileConnectionSettingsHold(t *testing.T) {
	base, accepted := serve(t, func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") })
	s := settings()
	p := providerAt(base + "/v1")
	first := newClient(t, s, p)
	do(t, first, base+"/v1/models", false)

	tests := []struct {
		name     string
		settings func(*config.Config)
		provider func(*config.Provider)
		same     bool
	}{
		{"unchanged", nil, nil, true},
		{"attempt, stream idle and request timeouts", nil, func(p *config.Provider) {
			p.Timeouts = config.Timeouts{Attempt: time.Minute, StreamIdle: time.Hour, Request: time.Second}
		}, true},
		{"keys", nil, func(p *config.Provider) { p.Keys = append(p.Keys, config.Key{ID: "k3"}) }, true},
		{"the process's attempt timeout", func(s *config.Config) { s.Timeouts.Attempt = time.Minute }, nil, true},
		{"base URL", nil, func(p *config.Provider) { p.BaseURL = base + "/v2" }, false},
		{"own connect timeout", nil, func(p *config.Provider) { p.Timeouts.Connect = 3 * time.Second }, false},
		{"the process's connect timeout", func(s *config.Config) { s.Timeouts.Connect = 3 * time.Second }, nil, false},
		{"the process's max in flight", func(s *config.Config) { s.Limits.MaxInFlight++ }, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s2, p2 := *s, p
			p2.Keys = append([]config.Key(nil), p.Keys...)
			if tt.settings != nil {
				tt.settings(&s2)
			}
			if tt.provider != nil {
				tt.provider(&p2)
			}
			next := Reuse(first, &s2, p2, Options{})
			t.Cleanup(next.Release)
			if got := next.pool == first.pool; got != tt.same {
				t.Fatalf("same pool: %v, want %v", got, tt.same)
			}
			if want := pickDur(p2.Timeouts.Attempt, s2.Timeouts.Attempt); next.AttemptTimeout() != want {
				t.Errorf("attempt timeout %s, want %s", next.AttemptTimeout(), want)
			}
			if len(next.auth) != len(p2.Keys) {
				t.Errorf("%d credential slots for %d keys", len(next.auth), len(p2.Keys))
			}
			before := accepted.Load()
			do(t, next, base+"/v1/models", false)
			opened := accepted.Load() - before
			if tt.same && opened != 0 {
				t.Errorf("a kept pool opened %d connections: its idle one was not reused", opened)
			}
			if !tt.same && opened != 1 {
				t.Errorf("a new pool opened %d connections, want 1", opened)
			}
		})
	}
	if got := Reuse(nil, s, p, Options{}); got.pool == first.pool {
		t.Error("Reuse of no client shared a pool")
	} else {
		got.Release()
	}
}

// A pool closes when the last Client holding it lets go: its connections
// close then, not before.
func TestReleaseClosesThePoolWithItsLastClient(t *testing.T) {
	base, accepted := serve(t, func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") })
	s, p := settings(), providerAt(base+"/v1")
	old := New(s, p, Options{})
	do(t, old, base+"/v1/models", false)
	next := Reuse(old, s, p, Options{})
	open := func() int {
		n := 0
		next.pool.conns.m.Range(func(any, any) bool { n++; return true })
		return n
	}
	if open() != 1 {
		t.Fatalf("%d open connections after one request", open())
	}
	old.Release() // the retired routing lets go: next still holds the pool
	if open() != 1 {
		t.Fatalf("%d open connections after the first release, want 1", open())
	}
	do(t, next, base+"/v1/models", false)
	if n := accepted.Load(); n != 1 {
		t.Fatalf("%d connections accepted: the pool's connection was not reused", n)
	}
	next.Release()
	if open() != 0 {
		t.Fatalf("%d connections still open after the last release", open())
	}
}

// A Client's timeouts are the provider's own where it has them, else the
// process's; the request deadline is the provider's timeouts.request.
func TestClientTimeouts(t *testing.T) {
	s := settings()
	p := providerAt("http://127.0.0.1:1/v1")
	c := newClient(t, s, p)
	if c.AttemptTimeout() != s.Timeouts.Attempt || c.StreamIdle() != s.Timeouts.StreamIdle {
		t.Errorf("attempt %s, stream idle %s: want the process's %s and %s",
			c.AttemptTimeout(), c.StreamIdle(), s.Timeouts.Attempt, s.Timeouts.StreamIdle)
	}
	start := time.Now()
	if dl := c.RequestDeadline(start); !dl.IsZero() {
		t.Errorf("request deadline %v without a timeouts.request", dl)
	}
	p.Timeouts = config.Timeouts{Attempt: 7 * time.Second, StreamIdle: 3 * time.Second, Request: 20 * time.Second}
	latency, ttft := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "l"}), prometheus.NewHistogram(prometheus.HistogramOpts{Name: "t"})
	c = Reuse(c, s, p, Options{Latency: latency, TTFT: ttft})
	t.Cleanup(c.Release)
	if c.Latency() != latency || c.TTFT() != ttft {
		t.Error("the client's series are not the ones it was given")
	}
	if c.AttemptTimeout() != 7*time.Second || c.StreamIdle() != 3*time.Second {
		t.Errorf("attempt %s, stream idle %s: want the provider's 7s and 3s", c.AttemptTimeout(), c.StreamIdle())
	}
	if dl := c.RequestDeadline(start); !dl.Equal(start.Add(20 * time.Second)) {
		t.Errorf("request deadline %v, want start+20s", dl)
	}
}
