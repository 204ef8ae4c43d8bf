package upstream

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"switchyard.dev/shared/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The client's pool cleaners (fasthttp) sleep out their idle
		// period after the pools close, then exit.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		// fasthttp's worker pool cleaner sleeps out its idle period after
		// Shutdown before it notices the stop.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		// fasthttp's process-wide Date header clock.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}

// countingListener counts the connections a test server accepted.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// serve runs h on a fasthttp server on 127.0.0.1 (a port of its own) until
// the test ends, and returns its base URL and its count of accepted
// connections.
func serve(t *testing.T, h fasthttp.RequestHandler) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	srv := &fasthttp.Server{Handler: h}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(cl) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		<-done
	})
	return "http://" + ln.Addr().String(), &cl.accepted
}

// settings are the process's settings a Client takes its defaults from.
func settings() *config.Config {
	s := config.Defaults()
	s.Timeouts = config.Timeouts{Attempt: 5 * time.Second, StreamIdle: 2 * time.Second, Connect: time.Second}
	return s
}

// providerAt is an OpenAI provider at base with keys k1 and k2.
func providerAt(base string) config.Provider {
	return config.Provider{Name: "p", Type: "openai", BaseURL: base,
		Keys: []config.Key{{ID: "k1"}, {ID: "k2"}}}
}

// newClient is New, released when the test ends.
func newClient(t *testing.T, s *config.Config, p config.Provider) *Client {
	t.Helper()
	c := New(s, p, Options{UserAgent: "switchyard-test"})
	t.Cleanup(c.Release)
	return c
}

// do sends a GET of url on c, with resp.StreamBody set to stream, and
// returns the response (released when the test ends).
func do(t *testing.T, c *Client, url string, stream bool) *fasthttp.Response {
	t.Helper()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(url)
	resp := fasthttp.AcquireResponse()
	t.Cleanup(func() { fasthttp.ReleaseResponse(resp) })
	resp.StreamBody = stream
	if err := c.Do(req, resp, time.Now().Add(10*time.Second)); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp
}
