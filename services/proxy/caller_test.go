package proxy

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// A caller that gives up on a non-stream request ends it: the attempt in
// flight is interrupted at once (not left for the attempt timeout), no
// further attempt or retry is made, and nothing counts against the target
// (no hold, no breaker count).
func TestCallerGoneEndsTheRequest(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Timeouts.Attempt = time.Minute
		c.Resilience.Breaker.ConsecutiveFailures = new(1) // one counted failure would trip it
	})
	f.openai.AddRule(fakeprovider.Rule{Hang: true})
	const callers = 4
	for range callers {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+clientSecret)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("a hung upstream answered: %d", resp.StatusCode)
		}
		cancel()
	}
	// Every request ends soon after its caller left (the attempt timeout
	// is a minute).
	testkit.WaitFor(t, 10*time.Second, func() bool { return f.svc.life.inFlight.Load() == 0 })
	if n := f.openai.CountCalls(nil); n != callers {
		t.Errorf("%d upstream calls for %d callers: no attempt after the caller left", n, callers)
	}
	if st := f.svc.engine.BreakerStates(); st["fake-openai"] != "" && st["fake-openai"] != "closed" {
		t.Errorf("breaker %v: a caller leaving counted against the provider", st)
	}
	if h := f.svc.engine.Holds(); len(h) != 0 {
		t.Errorf("holds %v after callers left", h)
	}
}

// A caller's X-Request-Id is its own to choose, so two requests may carry
// the same one: a caller that leaves never cuts the upstream exchange of
// another request with its id, whether that one was sent before or after
// its own (each still gets its answer, from its one upstream call).
func TestCallerGoneSharedRequestID(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Timeouts.Attempt = time.Minute })
	f.openai.AddRule(fakeprovider.Rule{FirstByteLatency: 3 * time.Second}) // longer than the waves take, even under load
	const pairs = 3
	send := func(ctx context.Context, id string, res chan<- int) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+clientSecret)
		req.Header.Set(headerRequestID, id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			res <- 0
			return
		}
		resp.Body.Close()
		res <- resp.StatusCode
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stayed, left := make(chan int, 2*pairs), make(chan int, 2*pairs)
	calls := 0
	wave := func(fn func(i int)) {
		for i := range pairs {
			fn(i)
		}
		calls += pairs
		testkit.WaitFor(t, 10*time.Second, func() bool { return f.openai.CountCalls(nil) == calls })
	}
	// Callers that leave sent first, then the ones that stay...
	wave(func(i int) { go send(ctx, fmt.Sprintf("early-%d", i), left) })
	wave(func(i int) { go send(context.Background(), fmt.Sprintf("early-%d", i), stayed) })
	// ...and the other way round.
	wave(func(i int) { go send(context.Background(), fmt.Sprintf("late-%d", i), stayed) })
	wave(func(i int) { go send(ctx, fmt.Sprintf("late-%d", i), left) })
	cancel()
	for range 2 * pairs {
		if st := <-left; st != 0 {
			t.Fatalf("a cancelled request answered %d", st)
		}
	}
	for range 2 * pairs {
		if st := <-stayed; st != http.StatusOK {
			t.Errorf("a request whose id another caller shared got %d", st)
		}
	}
	if n := f.openai.CountCalls(nil); n != calls {
		t.Errorf("%d upstream calls, want %d: an exchange was cut and tried again", n, calls)
	}
}

// A caller that leaves while its request waits to retry (a backoff) ends
// it there: no further attempt.
func TestCallerGoneDuringBackoff(t *testing.T) {
	// Full jitter over 1,000 hours: the wait is under a second once in
	// 3.6 million runs (over an hour, it was once in 3,600). A server error
	// states no wait of its own.
	f := newFixture(t, func(c *config.Config) {
		c.Retry.BackoffBase, c.Retry.BackoffMax, c.Timeouts.Request = 1000*time.Hour, 1000*time.Hour, 2000*time.Hour
	})
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions",
			strings.NewReader(`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+clientSecret)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	testkit.WaitFor(t, 10*time.Second, func() bool { return f.openai.CountCalls(nil) == 1 })
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled request answered")
	}
	// The request ends at the caller watch's next check, not after its
	// backoff.
	testkit.WaitFor(t, 5*time.Second, func() bool { return f.svc.life.inFlight.Load() == 0 })
	if n := f.openai.CountCalls(nil); n != 1 {
		t.Errorf("%d upstream calls, want 1", n)
	}
}

// An https provider's exchange is interrupted too when its caller leaves:
// the gateway tracks the connection above TLS, where the request's header
// block (its X-Request-Id) is in the clear.
func TestCallerGoneTLSUpstream(t *testing.T) {
	fp := fakeprovider.New(fakeprovider.Options{Name: "tls-openai"})
	ts := httptest.NewTLSServer(fp)
	t.Cleanup(ts.Close)
	roots := x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	old := upstreamRootCAs
	upstreamRootCAs = roots
	t.Cleanup(func() { upstreamRootCAs = old })
	f := newFixture(t, func(c *config.Config) {
		c.Timeouts.Attempt = time.Minute
		c.Providers[0].BaseURL = ts.URL + "/v1"
	})
	body := `{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`
	if st, _, b := rawCall(t, f, "/v1/chat/completions", body); st != http.StatusOK {
		t.Fatalf("over TLS: %d %s", st, b)
	}
	fp.AddRule(fakeprovider.Rule{Hang: true})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a hung upstream answered: %d", resp.StatusCode)
	}
	// The attempt timeout is a minute: the request ends soon after its
	// caller left only if its exchange was cut.
	testkit.WaitFor(t, 10*time.Second, func() bool { return f.svc.life.inFlight.Load() == 0 })
	if n := fp.CountCalls(nil); n != 2 {
		t.Errorf("%d upstream calls, want 2 (no attempt after the caller left)", n)
	}
}

// TestOptionalClientKeys: with require_client_key false beside configured
// keys, a caller presenting one is that key's (its plan applies); a caller
// presenting none, or an unknown one, is served anonymously.
func TestOptionalClientKeys(t *testing.T) {
	no := false
	f := newFixture(t, func(c *config.Config) {
		c.Proxy.RequireClientKey = &no
		c.Plans = map[string]config.Plan{"tiny": {RequestsPerMinute: 1}}
		c.Clients[0].Plan = "tiny"
	})
	if status, _, body := f.call(t, "/v1/chat/completions", chatBody); status != 200 {
		t.Fatalf("first with the key: %d %s", status, body)
	}
	if status, _, body := f.call(t, "/v1/chat/completions", chatBody); status != 429 {
		t.Fatalf("second with the key, over its plan: %d %s", status, body)
	}
	for _, auth := range []string{"", "Bearer sk-someone-else"} {
		if status, _, body := f.call(t, "/v1/chat/completions", chatBody, "Authorization", auth); status != 200 {
			t.Fatalf("anonymous (%q): %d %s", auth, status, body)
		}
	}
}

// abandonCall sends a request on a TCP connection of its own, reads the
// answer until started says it has begun (its first content; an empty
// answer for a call that answers nothing before it is whole), and hangs
// up, as a client that gives up on a stream does.
func abandonCall(t *testing.T, base, method, path, body string, started func(got string) bool) {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		method, path, addr, clientSecret, len(body), body); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 4096)
	for !started(string(got)) {
		n, err := conn.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("the answer ended before it began (%v): %q", err, got)
		}
	}
}

// A caller that hangs up while its answer is relayed (a stream, speech)
// from an upstream that sends slowly ends its request at once, not at the
// relay's next write: its in-flight slot and its plan's concurrency are
// back, the upstream call is cut (the fake provider's handler sees its
// request end), the usage record says caller_gone, and nothing counts
// against the target. Before, all of it waited for the upstream's next
// chunk (here 30 s away).
func TestCallerGoneEndsTheRelay(t *testing.T) {
	mf := newMeterFixture(t, func(c *config.Config) {
		c.Plans["pro"] = config.Plan{ConcurrentRequests: 10}
		c.Resilience.Breaker.ConsecutiveFailures = new(1) // one counted failure would trip it
		c.Providers[0].Models = append(c.Providers[0].Models, config.Model{Name: "voice", Upstream: "tts-1", Kind: config.KindSpeech})
	})
	content := func(got string) bool {
		return strings.HasPrefix(got, "HTTP/1.1 200") && strings.Contains(got, "chunk 0")
	}
	audio := func(got string) bool {
		i := strings.Index(got, "\r\n\r\n")
		return strings.HasPrefix(got, "HTTP/1.1 200") && i >= 0 && len(got) > i+4
	}
	// A passthrough download is read whole before it is answered: the
	// caller leaves once the upstream has the call.
	upCalled := func(string) bool {
		testkit.WaitFor(t, 5*time.Second, func() bool { return mf.openai.InFlight() == 1 })
		return true
	}
	const drip = 30 * time.Second
	for i, tc := range []struct {
		name, method, path, body string
		up                       *fakeprovider.Server
		rule                     fakeprovider.Rule
		started                  func(string) bool
	}{
		{"chat stream", http.MethodPost, "/v1/chat/completions", `{"model":"fake-openai/demo-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			mf.openai, fakeprovider.Rule{Chunks: 100, ChunkDelay: drip, Times: 1}, content},
		{"messages stream", http.MethodPost, "/v1/messages", `{"model":"fake-anthropic/demo-claude","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			mf.anthropic, fakeprovider.Rule{Chunks: 100, ChunkDelay: drip, Times: 1}, content},
		{"speech", http.MethodPost, "/v1/audio/speech", `{"model":"voice","input":"hello","voice":"alloy"}`,
			mf.openai, fakeprovider.Rule{Path: "/v1/audio/speech", Chunks: 100, ChunkDelay: drip, Times: 1}, audio},
		{"passthrough download", http.MethodGet, "/fake-openai/models", "",
			mf.openai, fakeprovider.Rule{Path: "/v1/models", FirstByteLatency: drip, Times: 1}, upCalled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.up.AddRule(tc.rule)
			abandonCall(t, mf.url, tc.method, tc.path, tc.body, tc.started)
			testkit.WaitFor(t, 5*time.Second, func() bool {
				return mf.svc.life.inFlight.Load() == 0 && tc.up.InFlight() == 0 && mf.svc.limits.lim.Snapshot("team").InFlight == 0
			})
			rec := mf.records(t, i+1)[i]
			if rec.Class != classCallerGone || !rec.Cancelled || rec.StreamCompleted {
				t.Errorf("usage record: class %q, cancelled %v, completed %v; want caller_gone, cancelled", rec.Class, rec.Cancelled, rec.StreamCompleted)
			}
			if st := mf.svc.engine.BreakerStates(); st["fake-openai"] != "" && st["fake-openai"] != "closed" ||
				st["fake-anthropic"] != "" && st["fake-anthropic"] != "closed" {
				t.Errorf("breakers %v: a caller leaving counted against the provider", st)
			}
			if h := mf.svc.engine.Holds(); len(h) != 0 {
				t.Errorf("holds %v after the caller left", h)
			}
		})
	}
}
