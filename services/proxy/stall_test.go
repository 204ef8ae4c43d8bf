package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

// stalledCall sends a request whose answer it never reads, on a
// connection with a tiny receive buffer: the proxy's writes to it soon
// block.
func stalledCall(t *testing.T, f *fixture, method, path, body string) {
	t.Helper()
	req, _ := http.NewRequest(method, f.url+path, strings.NewReader(body))
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
			stalledCall(t, f, http.MethodPost, tc.path, tc.body)
			testkit.WaitFor(t, 10*time.Second, func() bool { return f.svc.life.inFlight.Load() == 0 })
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
// context to another connection: whatever still holds the relay's write
// arm then sets no write deadline through it (it would land on that other
// caller's connection and cut its answer).
func TestWriteArmReleasedWithTheBody(t *testing.T) {
	conn := &deadlineConn{}
	var ctx fasthttp.RequestCtx
	ctx.Init2(conn, nil, false)
	r := &request{s: &Service{callers: newCallerWatch()}}
	rl := &relay{r: r, wr: writeArm{ctx: &ctx, idleFor: time.Minute}}
	wr := &rl.wr
	wr.arm(r, time.Now())
	if conn.sets != 1 {
		t.Fatalf("%d deadlines set, want 1", conn.sets)
	}
	body := &relayBody{rl: rl, ran: true}
	if err := body.Close(); err != nil {
		t.Fatal(err)
	}
	wr.armed = time.Time{} // due again
	wr.arm(r, time.Now())
	if conn.sets != 1 {
		t.Fatalf("a deadline set after the body stream was closed (%d)", conn.sets)
	}
}

// A caller that stops reading an answer the proxy does not relay as it
// arrives (a passthrough download, held whole) is cut after
// proxy.write_timeout: before, its connection stayed open for good, one of
// limits.max_connections. A relayed stream longer than the write timeout
// is not cut by it (each write has its own deadline).
func TestWriteTimeout(t *testing.T) {
	big := strings.Repeat("x", 16<<20)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.Contains(r.URL.Path, "chat") { // a stream longer than the write timeout
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 8 {
				_, _ = fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond) // the upstream's pace
			}
			_, _ = io.WriteString(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = io.WriteString(w, big)
	}))
	t.Cleanup(up.Close)
	cfg := config.Defaults()
	cfg.Proxy.WriteTimeout = 300 * time.Millisecond
	cfg.Providers = []config.Provider{{Name: "up", Type: "openai", BaseURL: up.URL, Selection: "round_robin",
		Keys:   []config.Key{{ID: "k1", Weight: 1, Value: config.NewSecret("sk-up")}},
		Models: []config.Model{{Name: "m", Kind: "chat"}}}}
	cfg.Clients = []config.ClientKey{{ID: "team", Models: []string{"*"}, Value: config.NewSecret(clientSecret)}}
	f := &fixture{cfg: cfg}
	f.svc, f.url = startService(t, cfg, Deps{Log: testLogger(t)})

	stalledCall(t, f, http.MethodGet, "/up/files/big", "")
	srv := f.svc.app.Server()
	testkit.WaitFor(t, 10*time.Second, func() bool { return srv.GetOpenConnectionsCount() == 0 })

	status, _, body := f.call(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if status != http.StatusOK || !strings.Contains(string(body), "[DONE]") || !strings.Contains(string(body), "t7") {
		t.Fatalf("a stream longer than the write timeout: %d %s", status, body)
	}
}
