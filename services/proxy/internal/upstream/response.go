package upstream

// Reading a provider's answer: a transport error in the words the failure
// classifier matches, the headers a failure is classified with, and a
// streamed body read to its end or closed.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
)

// MaxResponseBytes bounds an answer held in memory: a plain body the
// client reads (a larger one fails with fasthttp.ErrBodyTooLarge), or a
// streamed one ReadStreamBody reads.
const MaxResponseBytes = 64 << 20

// TransportError explains an error of Client.Do in the words the failure
// classifier matches (timeout, connection refused/reset, EOF). timeout is
// the attempt's, named when it ran out; callerDeadline says the deadline
// that passed was the request's (the caller's, or the provider's
// timeouts.request), not the attempt's. Other errors are returned as
// they are.
func TransportError(err error, timeout time.Duration, callerDeadline bool) error {
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout):
		if callerDeadline {
			return fmt.Errorf("the request's deadline passed: %w", err)
		}
		return fmt.Errorf("attempt timed out after %s: %w", timeout, err)
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return fmt.Errorf("the upstream closed the connection before answering (EOF): %w", err)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return fmt.Errorf("read response: the answer is larger than the gateway's limit of %d bytes: %w", MaxResponseBytes, err)
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return fmt.Errorf("every pooled connection to the upstream is busy: %w", err)
	}
	return err
}

// HeaderOf copies a response's headers for the failure classifier
// (Retry-After and friends); only failed attempts pay for it.
func HeaderOf(h *fasthttp.ResponseHeader) http.Header {
	out := make(http.Header, h.Len())
	h.VisitAll(func(k, v []byte) { out.Add(string(k), string(v)) })
	return out
}

// IsEventStream reports whether a Content-Type is text/event-stream.
func IsEventStream(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return bytes.EqualFold(bytes.TrimSpace(ct), []byte("text/event-stream"))
}

// ReadStreamBody reads a streamed response body that is not an event
// stream (an error, or a plain body where a stream was asked for), within
// MaxResponseBytes, and ends the body stream (CloseBodyStream). A body
// that was not streamed is copied.
func ReadStreamBody(resp *fasthttp.Response) ([]byte, error) {
	bs := resp.BodyStream()
	if bs == nil {
		return append([]byte(nil), resp.Body()...), nil
	}
	b, err := io.ReadAll(io.LimitReader(bs, MaxResponseBytes+1))
	if err == nil && len(b) > MaxResponseBytes {
		err = fmt.Errorf("response larger than %d bytes", MaxResponseBytes)
	}
	CloseBodyStream(resp, err == nil)
	return b, err
}

// CloseBodyStream ends a streamed response; atEOF says its body was read
// to its end. A body not read to its end leaves the connection
// mid-response: it is closed, never pooled.
func CloseBodyStream(resp *fasthttp.Response, atEOF bool) {
	if !atEOF {
		resp.SetConnectionClose()
	}
	_ = resp.CloseBodyStream()
}
