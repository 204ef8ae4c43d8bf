package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/provider"
)

// The upstream client speaks HTTP/1.1 (fasthttp): pooled keep-alive
// connections per provider host, TLS for https base URLs. HTTP/2-only
// upstreams are not supported; every LLM API Switchyard targets serves
// HTTP/1.1.
const (
	// minConnsPerHost is the least pool size per provider host; the pool
	// is sized from limits.max_in_flight (each request in flight holds at
	// most one upstream connection), so a request never waits for one.
	minConnsPerHost = 64
	// idleConnTimeout closes pooled connections unused for this long,
	// below the idle timeout of common upstream servers and load balancers
	// (60 s and more), so a pooled connection is rarely found closed.
	idleConnTimeout = 30 * time.Second
	// writeTimeout bounds writing one request upstream and the TLS
	// handshake of a new connection.
	writeTimeout = 15 * time.Second
)

// upstream is the connection pool and timeouts of one provider in one
// routing. The pool outlives the routing when the next one keeps it (the
// provider's connection settings did not change).
type upstream struct {
	*pool
	attemptTimeout time.Duration
	streamIdle     time.Duration
	// requestTimeout is the provider's timeouts.request (0: none of its
	// own): no attempt on it, nor a stream it relays, runs past the
	// request's start plus this.
	requestTimeout time.Duration
	auth           []atomic.Pointer[authHeaders] // by key index
	// The provider's series of switchyard_upstream_latency_seconds and
	// switchyard_time_to_first_token_seconds.
	latency, ttft prometheus.Observer
}

// pool is a provider's connections: the client and the table of its open
// connections, and the settings it was built with (conf).
type pool struct {
	client *fasthttp.Client
	conns  *connTable
	conf   string
	// refs counts the routings using the pool (the one in use, and
	// retired ones with requests still running): the last to let go
	// closes it.
	refs atomic.Int64
}

// release drops one routing's hold on the pool and, when it was the last,
// closes it: idle connections close and reads in progress are interrupted
// (a hung upstream read ends at once).
func (p *pool) release() {
	if p.refs.Add(-1) == 0 {
		p.client.CloseIdleConnections()
		p.conns.closeAll()
	}
}

// upstreamConf is what a provider's connection pool is built from: a
// routing keeps the previous routing's pool while it is the same.
func upstreamConf(cfg *config.Config, p config.Provider) string {
	return fmt.Sprintf("%s|%s|%d", p.BaseURL, pickDur(p.Timeouts.Connect, cfg.Timeouts.Connect), cfg.Limits.MaxInFlight)
}

func pickDur(own, global time.Duration) time.Duration {
	if own > 0 {
		return own
	}
	return global
}

// reuse returns an upstream on u's pool for provider p of a new routing.
func (u *upstream) reuse(cfg *config.Config, p config.Provider) *upstream {
	u.pool.refs.Add(1)
	return &upstream{pool: u.pool,
		attemptTimeout: pickDur(p.Timeouts.Attempt, cfg.Timeouts.Attempt),
		streamIdle:     pickDur(p.Timeouts.StreamIdle, cfg.Timeouts.StreamIdle),
		requestTimeout: p.Timeouts.Request,
		auth:           make([]atomic.Pointer[authHeaders], len(p.Keys))}
}

// authHeaders are the headers Adapter.Authorize sets for one secret.
type authHeaders struct {
	secret string
	pairs  [][2]string
}

// newUpstream builds the pool and timeouts of provider p; cfg gives the
// process's timeouts and limits.
func newUpstream(cfg *config.Config, p config.Provider) *upstream {
	conns := &connTable{}
	dialer := &net.Dialer{Timeout: pickDur(p.Timeouts.Connect, cfg.Timeouts.Connect), KeepAlive: 30 * time.Second}
	u := (&upstream{pool: &pool{conns: conns, conf: upstreamConf(cfg, p)}}).reuse(cfg, p) // refs 1
	// https: the dial does the handshake, under the tracking (see dial).
	var tlsConf *tls.Config
	if strings.HasPrefix(strings.ToLower(p.BaseURL), "https://") {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(64), RootCAs: upstreamRootCAs}
	}
	u.client = &fasthttp.Client{
		Name:                          userAgent,
		Dial:                          func(addr string) (net.Conn, error) { return conns.dial(dialer, addr, tlsConf) },
		MaxConnsPerHost:               max(cfg.Limits.MaxInFlight+16, minConnsPerHost),
		MaxIdleConnDuration:           idleConnTimeout,
		WriteTimeout:                  writeTimeout,
		MaxResponseBodySize:           maxResponseBytes,
		ReadBufferSize:                16 << 10,
		WriteBufferSize:               16 << 10,
		DisableHeaderNamesNormalizing: false,
		DisablePathNormalizing:        true, // send Azure deployment paths as built
		// A POST is retried by fasthttp only when a pooled connection
		// turns out closed before the response (io.EOF); once is enough.
		MaxIdemponentCallAttempts: 2,
	}
	return u
}

// authFor returns the credential headers for key, built by the provider's
// adapter once per secret (a rotated secret rebuilds them).
func (u *upstream) authFor(a *provider.Adapter, key *route.Key) [][2]string {
	secret := key.Secret()
	i := key.Index()
	if i < 0 || i >= len(u.auth) {
		return buildAuth(a, secret).pairs
	}
	if h := u.auth[i].Load(); h != nil && h.secret == secret {
		return h.pairs
	}
	h := buildAuth(a, secret)
	u.auth[i].Store(h)
	return h.pairs
}

// buildAuth builds the credential headers for a secret once, ready to set
// with SetCanonical: names in canonical form (the setter copies the value
// with its line breaks replaced).
func buildAuth(a *provider.Adapter, secret string) *authHeaders {
	h := http.Header{}
	a.Authorize(h, secret)
	out := &authHeaders{secret: secret}
	for k, vs := range h {
		for _, v := range vs {
			out.pairs = append(out.pairs, [2]string{http.CanonicalHeaderKey(k), v})
		}
	}
	return out
}

// setAuth puts the credential headers on req. Authorize sets
// Anthropic-Version only when the request has none (a caller's own version
// is forwarded), so that one is kept when present.
func setAuth(req *fasthttp.Request, pairs [][2]string) {
	for _, kv := range pairs {
		if kv[0] == "Anthropic-Version" && len(req.Header.Peek(kv[0])) > 0 {
			continue
		}
		req.Header.SetCanonical(bytesOf(kv[0]), bytesOf(kv[1]))
	}
}

// transportError explains an error of the upstream client in the words the
// failure classifier matches (timeout, connection refused/reset, EOF).
func transportError(err error, timeout time.Duration, callerDeadline bool) error {
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout):
		if callerDeadline {
			return fmt.Errorf("the request's deadline passed: %w", err)
		}
		return fmt.Errorf("attempt timed out after %s: %w", timeout, err)
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return fmt.Errorf("the upstream closed the connection before answering (EOF): %w", err)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return fmt.Errorf("read response: the answer is larger than the gateway's limit of %d bytes: %w", maxResponseBytes, err)
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return fmt.Errorf("every pooled connection to the upstream is busy: %w", err)
	}
	return err
}

// headerOf copies a response's headers for the failure classifier
// (Retry-After and friends); only failed attempts pay for it.
func headerOf(h *fasthttp.ResponseHeader) http.Header {
	out := make(http.Header, h.Len())
	h.VisitAll(func(k, v []byte) { out.Add(string(k), string(v)) })
	return out
}

// isEventStream reports whether a Content-Type is text/event-stream.
func isEventStream(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return bytes.EqualFold(bytes.TrimSpace(ct), []byte("text/event-stream"))
}

// readStreamBody reads a streamed response body that is not an event
// stream (an error, or a plain body where a stream was asked for), within
// the response size limit.
func readStreamBody(resp *fasthttp.Response) ([]byte, error) {
	bs := resp.BodyStream()
	if bs == nil {
		return append([]byte(nil), resp.Body()...), nil
	}
	b, err := io.ReadAll(io.LimitReader(bs, maxResponseBytes+1))
	if err == nil && len(b) > maxResponseBytes {
		err = fmt.Errorf("response larger than %d bytes", maxResponseBytes)
	}
	closeBodyStream(resp, err == nil)
	return b, err
}

// closeBodyStream ends a streamed response. A body not read to its end
// leaves the connection mid-response: it is closed, never pooled.
func closeBodyStream(resp *fasthttp.Response, atEOF bool) {
	if !atEOF {
		resp.SetConnectionClose()
	}
	_ = resp.CloseBodyStream()
}
