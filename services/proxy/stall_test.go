package proxy

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// stalledCaller sends a request whose answer it never reads, on a
// connection with a tiny receive buffer: the proxy's writes to it soon
// block.
func stalledCaller(t *testing.T, f *fixture, path, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024) })
	}}
	tr := &http.Transport{DialContext: dialer.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d", path, resp.StatusCode)
	}
}

// A caller that stops reading a relayed answer (an event stream, a speech
// answer) but keeps its connection open is cut after the streaming idle
// timeout, as a silent upstream would be: before, the relay's write
// blocked for good, before any upstream read could time out, and the
// request kept its place among limits.max_in_flight (here 1: every other
// caller got 503) and its upstream connection.
func TestStalledCallerIsCut(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Timeouts.StreamIdle = 300 * time.Millisecond
		c.Limits.MaxInFlight = 1
		c.Providers[0].Models = append(c.Providers[0].Models, config.Model{Name: "voice", Upstream: "tts-1", Kind: config.KindSpeech})
	})
	for _, tc := range []struct{ name, path, body string }{
		{"stream", "/v1/messages", `{"model":"fake-anthropic/demo-claude","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi there"}]}`},
		{"speech", "/v1/audio/speech", `{"model":"voice","input":"hello","voice":"alloy"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.anthropic.AddRule(fakeprovider.Rule{Chunks: 100000, Times: 1})
			f.openai.AddRule(fakeprovider.Rule{Path: "/v1/audio/speech", Chunks: 20000, Times: 1})
			stalledCaller(t, f, tc.path, tc.body)
			testkit.WaitFor(t, 10*time.Second, func() bool { return f.svc.inFlight.Load() == 0 })
			if st, _, body := f.call(t, "/v1/chat/completions", `{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`); st != http.StatusOK {
				t.Fatalf("the next caller: %d %s", st, body)
			}
		})
	}
}

// deadlineConn records the write deadlines set on it.
type deadlineConn struct {
	net.Conn
	mu   sync.Mutex
	sets int
}

func (c *deadlineConn) SetWriteDeadline(time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sets++
	return nil
}

func (c *deadlineConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
func (c *deadlineConn) LocalAddr() net.Addr  { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// Once fasthttp has closed a relay's body stream it may hand the request's
// context to another connection while the relay's writer goroutine still
// runs: the relay then sets no write deadline through it (it would land on
// that other caller's connection and cut its answer).
func TestWriteArmReleasedWithTheBody(t *testing.T) {
	conn := &deadlineConn{}
	var ctx fasthttp.RequestCtx
	ctx.Init2(conn, nil, false)
	r := &request{}
	wr := &writeArm{ctx: &ctx, idleFor: time.Minute}
	wr.arm(r)
	if conn.sets != 1 {
		t.Fatalf("%d deadlines set, want 1", conn.sets)
	}
	body := relayBody{io.NopCloser(strings.NewReader("")), wr}
	if err := body.Close(); err != nil {
		t.Fatal(err)
	}
	wr.armed = time.Time{} // due again
	wr.arm(r)
	if conn.sets != 1 {
		t.Fatalf("a deadline set after the body stream was closed (%d)", conn.sets)
	}
}
