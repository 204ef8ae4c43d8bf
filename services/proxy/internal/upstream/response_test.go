package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
)

// A transport error is worded for the failure classifier: a timeout names
// the attempt timeout that ran out, or says the request's own deadline
// passed; either is classified a timeout, and the client's error is kept
// for errors.Is.
func TestTransportErrorWording(t *testing.T) {
	other := errors.New("dial tcp [address]: connect: connection refused")
	tests := []struct {
		name           string
		err            error
		callerDeadline bool
		text, code     string
	}{
		{"attempt timeout", fasthttp.ErrTimeout, false, "attempt timed out after 1.5s: ", "timeout"},
		{"dial timeout", fasthttp.ErrDialTimeout, false, "attempt timed out after 1.5s: ", "timeout"},
		{"caller deadline", fasthttp.ErrTimeout, true, "the request's deadline passed: ", "timeout"},
		{"caller deadline while dialing", fasthttp.ErrDialTimeout, true, "the request's deadline passed: ", "timeout"},
		{"closed before answering", fasthttp.ErrConnectionClosed, false, "the upstream closed the connection before answering (EOF): ", "connection_closed"},
		{"too large", fasthttp.ErrBodyTooLarge, false, "read response: the answer is larger than the gateway's limit of 67108864 bytes: ", ""},
		{"no free connections", fasthttp.ErrNoFreeConns, false, "every pooled connection to the upstream is busy: ", ""},
		{"other", other, false, other.Error(), "connection_refused"},
	}
	classifier := config.Defaults().Classifier()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TransportError(tt.err, 1500*time.Millisecond, tt.callerDeadline)
			if !errors.Is(got, tt.err) {
				t.Errorf("%v does not wrap %v", got, tt.err)
			}
			if !strings.HasPrefix(got.Error(), tt.text) {
				t.Errorf("%q, want it to start %q", got, tt.text)
			}
			if tt.code == "" {
				return
			}
			if r := classifier.Classify(failure.Input{Provider: "openai", Err: got}, "p"); r.Code != tt.code || r.Class != failure.Transient {
				t.Errorf("classified %s/%s, want transient/%s", r.Class, r.Code, tt.code)
			}
		})
	}
	if got := TransportError(other, time.Second, false); got != other {
		t.Errorf("an error it does not explain came back as %v", got)
	}
}

// A hung upstream fails Do at its deadline with the client's timeout, which
// TransportError words as the attempt's.
func TestDoTimesOutAtTheDeadline(t *testing.T) {
	release := make(chan struct{})
	base, _ := serve(t, func(ctx *fasthttp.RequestCtx) { <-release })
	t.Cleanup(func() { close(release) }) // before the server's shutdown
	c := newClient(t, settings(), providerAt(base))
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(base + "/hang")
	start := time.Now()
	err := c.Do(req, resp, start.Add(100*time.Millisecond))
	if !errors.Is(err, fasthttp.ErrTimeout) {
		t.Fatalf("Do: %v, want a timeout", err)
	}
	if el := time.Since(start); el > 10*time.Second { // a hung upstream: a correctness bound
		t.Fatalf("Do returned after %s", el)
	}
	if got := TransportError(err, 100*time.Millisecond, false).Error(); !strings.HasPrefix(got, "attempt timed out after 100ms") {
		t.Errorf("%q", got)
	}
}

func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream":                 true,
		"text/event-stream; charset=utf-8":  true,
		"Text/Event-Stream":                 true,
		" text/event-stream ;charset=utf-8": true,
		"text/event-stream-x":               false,
		"application/json":                  false,
		"text/plain; text/event-stream":     false,
		"":                                  false,
	} {
		if got := IsEventStream([]byte(ct)); got != want {
			t.Errorf("IsEventStream(%q) = %v, want %v", ct, got, want)
		}
	}
}

// HeaderOf copies every header of a response, repeated ones too.
func TestHeaderOf(t *testing.T) {
	var h fasthttp.ResponseHeader
	h.Set("Retry-After", "7")
	h.Add("X-Ratelimit-Reset", "a")
	h.Add("X-Ratelimit-Reset", "b")
	got := HeaderOf(&h)
	if got.Get("Retry-After") != "7" || strings.Join(got.Values("X-Ratelimit-Reset"), ",") != "a,b" {
		t.Errorf("%v", got)
	}
	h.Set("Retry-After", "9")
	if got.Get("Retry-After") != "7" {
		t.Error("the copy follows the response's header")
	}
}

// A streamed body read to its end (ReadStreamBody, or CloseBodyStream at
// its end) gives the connection back to the pool; one closed before its
// end closes the connection, which the next request does not get.
func TestStreamBodies(t *testing.T) {
	const chunk = "data: x\n\n"
	base, accepted := serve(t, func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/error":
			ctx.SetStatusCode(http.StatusTooManyRequests)
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) { _, _ = w.WriteString(`{"error":"slow down"}`) })
		case "/endless": // until the client goes away
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				for {
					if _, err := w.WriteString(chunk); err != nil {
						return
					}
					if err := w.Flush(); err != nil {
						return
					}
				}
			})
		case "/big":
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				block := bytes.Repeat([]byte("x"), 1<<20)
				for range MaxResponseBytes>>20 + 1 {
					if _, err := w.Write(block); err != nil {
						return
					}
				}
			})
		default:
			ctx.SetBodyString("plain")
		}
	})
	c := newClient(t, settings(), providerAt(base))
	opened := func(t *testing.T, before int64, want int64) {
		t.Helper()
		if n := accepted.Load() - before; n != want {
			t.Errorf("%d connections opened, want %d", n, want)
		}
	}

	t.Run("read to its end", func(t *testing.T) {
		resp := do(t, c, base+"/error", true)
		b, err := ReadStreamBody(resp)
		if err != nil || string(b) != `{"error":"slow down"}` || resp.StatusCode() != http.StatusTooManyRequests {
			t.Fatalf("%d %q %v", resp.StatusCode(), b, err)
		}
		before := accepted.Load()
		do(t, c, base+"/", false)
		opened(t, before, 0)
	})
	t.Run("not streamed", func(t *testing.T) {
		resp := do(t, c, base+"/", false)
		b, err := ReadStreamBody(resp)
		if err != nil || string(b) != "plain" {
			t.Fatalf("%q %v", b, err)
		}
		resp.Body()[0] = 'P'
		if string(b) != "plain" {
			t.Error("the body read is the response's own, not a copy")
		}
	})
	t.Run("closed mid-body", func(t *testing.T) {
		resp := do(t, c, base+"/endless", true)
		if _, err := io.ReadFull(resp.BodyStream(), make([]byte, len(chunk))); err != nil {
			t.Fatal(err)
		}
		CloseBodyStream(resp, false)
		before := accepted.Load()
		do(t, c, base+"/", false)
		opened(t, before, 1)
	})
	t.Run("closed at its end", func(t *testing.T) {
		resp := do(t, c, base+"/error", true)
		if _, err := io.Copy(io.Discard, resp.BodyStream()); err != nil {
			t.Fatal(err)
		}
		CloseBodyStream(resp, true)
		before := accepted.Load()
		do(t, c, base+"/", false)
		opened(t, before, 0)
	})
	t.Run("larger than the limit", func(t *testing.T) {
		resp := do(t, c, base+"/big", true)
		b, err := ReadStreamBody(resp)
		if err == nil || !strings.Contains(err.Error(), "response larger than 67108864 bytes") {
			t.Fatalf("%d bytes, %v", len(b), err)
		}
		before := accepted.Load()
		do(t, c, base+"/", false)
		opened(t, before, 1)
	})
	t.Run("the connection of a response", func(t *testing.T) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(base + "/")
		req.Header.Set(RequestIDHeader, "req-1")
		since := SendingNow()
		if err := c.Do(req, resp, time.Now().Add(10*time.Second)); err != nil {
			t.Fatal(err)
		}
		conn := ConnOf(resp.LocalAddr())
		if conn == nil {
			t.Fatal("a response of the client has no tracked connection")
		}
		if found := c.Carrying(nil, IDHash("req-1"), since); len(found) != 1 || found[0] != conn {
			t.Errorf("carrying req-1: %v, want the response's connection %p", found, conn)
		}
		if found := c.Carrying(nil, IDHash("req-2"), since); len(found) != 0 {
			t.Errorf("carrying req-2: %v", found)
		}
		if ConnOf(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}) != nil {
			t.Error("an address of no tracked connection led to one")
		}
	})
}
