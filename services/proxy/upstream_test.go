package proxy

import (
	"errors"
	"hash/maphash"
	"io"
	"net"
	"os"
	"strconv"
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

// A caller's leaving cuts its own exchange in flight, never the next
// request on the same pooled connection: a cut that lands after the
// exchange ended (the connection idle in the pool) is lifted when the next
// request starts, and a cut aimed at an id the connection no longer
// carries does nothing.
func TestTrackedConnCutOnlyItsExchange(t *testing.T) {
	for _, c := range []struct {
		p    string
		want bool
	}{
		{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n{}", true},
		{"GET / HTTP/1.0\r\n", true},
		{"I said\r\n", false},                // a body chunk
		{"POST /half-a-request-line", false}, // no line end yet
		{"post / HTTP/1.1\r\n", false},
		{"", false},
	} {
		if _, ok := requestHead([]byte(c.p)); ok != c.want {
			t.Errorf("requestHead(%q) = %v, want %v", c.p, ok, c.want)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	defer server.Close()
	var table connTable
	c := &trackedConn{Conn: raw, table: &table}
	table.m.Store(c, struct{}{})
	defer c.Close()
	// request is a request's header block; extra headers come before its id.
	request := func(id string, extra ...string) []byte {
		return []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + strings.Join(extra, "") + headerRequestID + ": " + id + "\r\n\r\n")
	}
	// exchange writes a request and reads a one-byte answer, with the
	// deadlines fasthttp sets.
	exchange := func(id string, extra ...string) error {
		if err := c.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
			return err
		}
		if _, err := c.Write(request(id, extra...)); err != nil {
			return err
		}
		if _, err := server.Write([]byte("x")); err != nil {
			return err
		}
		if err := c.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
			return err
		}
		_, err := c.Read(make([]byte, 1))
		return err
	}
	drain := func() { // the server reads what was written
		_ = server.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = server.Read(make([]byte, 4096))
	}

	since := sendingNow()
	if err := exchange("req-a"); err != nil {
		t.Fatal(err)
	}
	drain()
	ha := maphash.String(idSeed, "req-a")
	if found := table.carrying(nil, ha, since); len(found) != 1 {
		t.Fatalf("carrying req-a: %d connections", len(found))
	}
	c.interrupt(ha, since) // req-a's caller left after its answer: the connection is idle
	if err := exchange("req-b"); err != nil {
		t.Fatalf("the next request on the connection failed: %v", err)
	}
	drain()
	c.interrupt(ha, since) // aimed at req-a, which the connection no longer carries
	if err := exchange("req-c"); err != nil {
		t.Fatalf("a stale cut reached another request: %v", err)
	}
	drain()
	// A request whose id comes after 9 KiB of caller headers (passthrough)
	// is found all the same: a cut naming the request before misses it.
	hc := maphash.String(idSeed, "req-c")
	c.interrupt(hc, since)
	if err := exchange("req-big", "Cookie: "+strings.Repeat("c", 9<<10)+"\r\n"); err != nil {
		t.Fatalf("a request with long headers: %v", err)
	}
	drain()
	c.interrupt(hc, since)
	if err := exchange("req-e"); err != nil {
		t.Fatalf("a cut naming req-c reached the request after req-big: %v", err)
	}
	drain()

	// A cut of the exchange in flight fails its read at once.
	sinceD := sendingNow()
	if err := c.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(request("req-d")); err != nil {
		t.Fatal(err)
	}
	c.interrupt(maphash.String(idSeed, "req-d"), sinceD)
	_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // the client's next deadline stays in the past
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after the cut: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the cut read took %s", d)
	}
}

// A cut of the exchange in flight holds whatever the request's own bytes
// look like, and reaches a request whose id follows long headers; a
// request without an id is one no cut names.
func TestTrackedConnCutInFlight(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	newConn := func() (*trackedConn, net.Conn) {
		accepted := make(chan net.Conn, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				accepted <- c
			}
		}()
		raw, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server := <-accepted
		t.Cleanup(func() { server.Close() })
		c := &trackedConn{Conn: raw, table: &connTable{}}
		t.Cleanup(func() { c.Close() })
		go func() { _, _ = io.Copy(io.Discard, server) }() // the upstream reads what is sent
		return c, server
	}
	head := func(id string, body int, extra string) []byte {
		h := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + extra + "Content-Length: " + strconv.Itoa(body) + "\r\n"
		if id != "" {
			h += headerRequestID + ": " + id + "\r\n"
		}
		return []byte(h + "\r\n")
	}
	// send writes a request's header block as the client does: a write
	// deadline, then the bytes.
	send := func(t *testing.T, c *trackedConn, p []byte) {
		t.Helper()
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	// cutRead reads with the answer's first byte already there: a cut read
	// fails (a deadline in the past fails a read before it looks), any
	// other returns the byte.
	cutRead := func(c *trackedConn, server net.Conn) error {
		if _, err := server.Write([]byte("x")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		_, err := c.Read(make([]byte, 1))
		return err
	}

	t.Run("a body that looks like a request", func(t *testing.T) {
		c, server := newConn()
		fake := []byte("POST /x HTTP/1.1\r\nHost: y\r\n" + headerRequestID + ": someone-else\r\n\r\n")
		since := sendingNow()
		send(t, c, head("req-f", len(fake), ""))
		c.interrupt(maphash.String(idSeed, "req-f"), since) // its caller left while the body is being sent
		_, _ = c.Write(fake)                                // the rest of the body: not a request start
		if err := cutRead(c, server); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after the cut: %v, want a deadline error (the body lifted the cut)", err)
		}
	})
	t.Run("an id after long headers", func(t *testing.T) {
		c, server := newConn()
		since := sendingNow()
		send(t, c, head("req-big", 0, "Cookie: "+strings.Repeat("c", 9<<10)+"\r\n"))
		c.interrupt(maphash.String(idSeed, "req-big"), since)
		if err := cutRead(c, server); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after the cut: %v, want a deadline error (the id was not found)", err)
		}
	})
	t.Run("a request without an id", func(t *testing.T) {
		c, server := newConn()
		since := sendingNow()
		send(t, c, head("req-g", 0, ""))
		send(t, c, head("", 0, ""))                         // the next request, no id
		c.interrupt(maphash.String(idSeed, "req-g"), since) // names the request before
		if _, err := server.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatalf("a cut naming the request before reached one without an id: %v", err)
		}
	})
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
