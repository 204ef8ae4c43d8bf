package upstream

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
)

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
	c := &Conn{raw: raw, table: &table}
	table.m.Store(c, struct{}{})
	defer c.Close()
	// request is a request's header block; extra headers come before its id.
	request := func(id string, extra ...string) []byte {
		return []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + strings.Join(extra, "") + RequestIDHeader + ": " + id + "\r\n\r\n")
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

	since := SendingNow()
	if err := exchange("req-a"); err != nil {
		t.Fatal(err)
	}
	drain()
	ha := maphash.String(idSeed, "req-a")
	if found := table.carrying(nil, ha, since); len(found) != 1 {
		t.Fatalf("carrying req-a: %d connections", len(found))
	}
	c.Interrupt(ha, since) // req-a's caller left after its answer: the connection is idle
	if err := exchange("req-b"); err != nil {
		t.Fatalf("the next request on the connection failed: %v", err)
	}
	drain()
	c.Interrupt(ha, since) // aimed at req-a, which the connection no longer carries
	if err := exchange("req-c"); err != nil {
		t.Fatalf("a stale cut reached another request: %v", err)
	}
	drain()
	// A request whose id comes after 9 KiB of caller headers (passthrough)
	// is found all the same: a cut naming the request before misses it.
	hc := maphash.String(idSeed, "req-c")
	c.Interrupt(hc, since)
	if err := exchange("req-big", "Cookie: "+strings.Repeat("c", 9<<10)+"\r\n"); err != nil {
		t.Fatalf("a request with long headers: %v", err)
	}
	drain()
	c.Interrupt(hc, since)
	if err := exchange("req-e"); err != nil {
		t.Fatalf("a cut naming req-c reached the request after req-big: %v", err)
	}
	drain()

	// A cut of the exchange in flight fails its read at once.
	sinceD := SendingNow()
	if err := c.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(request("req-d")); err != nil {
		t.Fatal(err)
	}
	c.Interrupt(maphash.String(idSeed, "req-d"), sinceD)
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
	newConn := func() (*Conn, net.Conn) {
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
		c := &Conn{raw: raw, table: &connTable{}}
		t.Cleanup(func() { c.Close() })
		go func() { _, _ = io.Copy(io.Discard, server) }() // the upstream reads what is sent
		return c, server
	}
	head := func(id string, body int, extra string) []byte {
		h := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + extra + "Content-Length: " + strconv.Itoa(body) + "\r\n"
		if id != "" {
			h += RequestIDHeader + ": " + id + "\r\n"
		}
		return []byte(h + "\r\n")
	}
	// send writes a request's header block as the client does: a write
	// deadline, then the bytes.
	send := func(t *testing.T, c *Conn, p []byte) {
		t.Helper()
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	// cutRead reads with the answer's first byte already there: a cut read
	// fails (a deadline in the past fails a read before it looks), any
	// other returns the byte.
	cutRead := func(c *Conn, server net.Conn) error {
		if _, err := server.Write([]byte("x")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		_, err := c.Read(make([]byte, 1))
		return err
	}

	t.Run("a body that looks like a request", func(t *testing.T) {
		c, server := newConn()
		fake := []byte("POST /x HTTP/1.1\r\nHost: y\r\n" + RequestIDHeader + ": someone-else\r\n\r\n")
		since := SendingNow()
		send(t, c, head("req-f", len(fake), ""))
		c.Interrupt(maphash.String(idSeed, "req-f"), since) // its caller left while the body is being sent
		_, _ = c.Write(fake)                                // the rest of the body: not a request start
		if err := cutRead(c, server); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after the cut: %v, want a deadline error (the body lifted the cut)", err)
		}
	})
	t.Run("an id after long headers", func(t *testing.T) {
		c, server := newConn()
		since := SendingNow()
		send(t, c, head("req-big", 0, "Cookie: "+strings.Repeat("c", 9<<10)+"\r\n"))
		c.Interrupt(maphash.String(idSeed, "req-big"), since)
		if err := cutRead(c, server); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after the cut: %v, want a deadline error (the id was not found)", err)
		}
	})
	t.Run("a request without an id", func(t *testing.T) {
		c, server := newConn()
		since := SendingNow()
		send(t, c, head("req-g", 0, ""))
		send(t, c, head("", 0, ""))                         // the next request, no id
		c.Interrupt(maphash.String(idSeed, "req-g"), since) // names the request before
		if _, err := server.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatalf("a cut naming the request before reached one without an id: %v", err)
		}
	})
}
