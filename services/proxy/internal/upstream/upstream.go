// Package upstream is the proxy's client of its providers: per provider,
// a pool of HTTP/1.1 connections (fasthttp) that tracks each connection
// so that a leaving caller's exchange can be cut, the provider's
// timeouts, and its credential headers, built once per secret; and the
// helpers that read the answers (a transport error in the failure
// classifier's words, a streamed body read to its end or closed).
//
// A routing holds one Client per provider. The next routing keeps a
// provider's pool while its connection settings stay the same (Reuse);
// the last routing to let go of a pool closes it (Release).
package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/config"
)

// The client speaks HTTP/1.1 (fasthttp): pooled keep-alive connections
// per provider host, TLS for https base URLs. HTTP/2-only upstreams are
// not supported; every LLM API Switchyard targets serves HTTP/1.1.
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

// Options are what a Client takes besides the configuration.
type Options struct {
	// UserAgent names the client to the provider (fasthttp's default
	// User-Agent).
	UserAgent string
	// RootCAs are the CAs provider certificates are verified against
	// (nil: the system's).
	RootCAs *x509.CertPool
	// Latency and TTFT are the provider's series of the upstream latency
	// and time-to-first-token histograms, which the proxy observes
	// (Client.Latency, Client.TTFT).
	Latency, TTFT prometheus.Observer
}

// Client is the connection pool, timeouts and credential headers of one
// provider in one routing. The pool outlives the routing when the next one
// keeps it (Reuse).
type Client struct {
	pool           *pool
	attemptTimeout time.Duration
	streamIdle     time.Duration
	// requestTimeout is the provider's timeouts.request (0: none of its
	// own): no attempt on it, nor a stream it relays, runs past the
	// request's start plus this.
	requestTimeout time.Duration
	auth           []atomic.Pointer[authHeaders] // by key index
	latency, ttft  prometheus.Observer
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

// confOf is what a provider's connection pool is built from: a routing
// keeps the previous routing's pool while it is the same.
func confOf(settings *config.Config, p config.Provider) string {
	return fmt.Sprintf("%s|%s|%d", p.BaseURL, pickDur(p.Timeouts.Connect, settings.Timeouts.Connect), settings.Limits.MaxInFlight)
}

func pickDur(own, global time.Duration) time.Duration {
	if own > 0 {
		return own
	}
	return global
}

// New builds the pool, timeouts and credential headers of provider p (of
// the routing document); settings are the process's, whose timeouts apply
// where p has none of its own and whose limits.max_in_flight sizes the
// pool.
func New(settings *config.Config, p config.Provider, o Options) *Client {
	conns := &connTable{}
	dialer := &net.Dialer{Timeout: pickDur(p.Timeouts.Connect, settings.Timeouts.Connect), KeepAlive: 30 * time.Second}
	pl := &pool{conns: conns, conf: confOf(settings, p)}
	// https: the dial does the handshake, under the tracking (see dial).
	var tlsConf *tls.Config
	if strings.HasPrefix(strings.ToLower(p.BaseURL), "https://") {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(64), RootCAs: o.RootCAs}
	}
	pl.client = &fasthttp.Client{
		Name:                          o.UserAgent,
		Dial:                          func(addr string) (net.Conn, error) { return conns.dial(dialer, addr, tlsConf) },
		MaxConnsPerHost:               max(settings.Limits.MaxInFlight+16, minConnsPerHost),
		MaxIdleConnDuration:           idleConnTimeout,
		WriteTimeout:                  writeTimeout,
		MaxResponseBodySize:           MaxResponseBytes,
		ReadBufferSize:                16 << 10,
		WriteBufferSize:               16 << 10,
		DisableHeaderNamesNormalizing: false,
		DisablePathNormalizing:        true, // send Azure deployment paths as built
		// A POST is retried by fasthttp only when a pooled connection
		// turns out closed before the response (io.EOF); once is enough.
		MaxIdemponentCallAttempts: 2,
	}
	return on(pl, settings, p, o) // refs 1
}

// Reuse returns the Client of provider p for a new routing: on prev's pool
// when p's connection settings (base URL, connect timeout, and the
// process's limits.max_in_flight) are the ones it was built with, else on
// a new pool (New; prev nil: always). Timeouts and credential headers are
// p's own either way. The new Client holds the pool until its Release;
// prev still holds it until its own.
func Reuse(prev *Client, settings *config.Config, p config.Provider, o Options) *Client {
	if prev == nil || prev.pool.conf != confOf(settings, p) {
		return New(settings, p, o)
	}
	return on(prev.pool, settings, p, o)
}

// on returns a Client of provider p on pl, holding it.
func on(pl *pool, settings *config.Config, p config.Provider, o Options) *Client {
	pl.refs.Add(1)
	return &Client{pool: pl,
		attemptTimeout: pickDur(p.Timeouts.Attempt, settings.Timeouts.Attempt),
		streamIdle:     pickDur(p.Timeouts.StreamIdle, settings.Timeouts.StreamIdle),
		requestTimeout: p.Timeouts.Request,
		auth:           make([]atomic.Pointer[authHeaders], len(p.Keys)),
		latency:        o.Latency, ttft: o.TTFT}
}

// Release lets go of the Client's pool: when no other Client holds it,
// idle connections close and reads in progress are interrupted (a hung
// upstream read ends at once). Call it once, when no request uses the
// Client any more.
func (c *Client) Release() { c.pool.release() }

// Do sends req and reads its answer into resp, by deadline (fasthttp's
// DoDeadline). A response with StreamBody set is returned once its
// headers are read: its body is read from resp.BodyStream and ended with
// CloseBodyStream.
func (c *Client) Do(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	return c.pool.client.DoDeadline(req, resp, deadline)
}

// AttemptTimeout bounds one attempt on the provider: the whole exchange
// of a plain answer, the headers and opening events of a stream.
func (c *Client) AttemptTimeout() time.Duration { return c.attemptTimeout }

// StreamIdle bounds each read of a relayed answer.
func (c *Client) StreamIdle() time.Duration { return c.streamIdle }

// RequestDeadline is when a request started at start must be done with
// the provider (its timeouts.request); zero: no limit of its own.
func (c *Client) RequestDeadline(start time.Time) time.Time {
	if c.requestTimeout <= 0 {
		return time.Time{}
	}
	return start.Add(c.requestTimeout)
}

// Latency is the provider's series of the upstream latency histogram
// (Options.Latency).
func (c *Client) Latency() prometheus.Observer { return c.latency }

// TTFT is the provider's series of the time-to-first-token histogram
// (Options.TTFT).
func (c *Client) TTFT() prometheus.Observer { return c.ttft }

// Carrying appends to dst the pool's connections whose last request
// carried the request id hashed h (IDHash) and was written at or after
// since (SendingNow), and returns it: the exchange of a request whose
// caller went away, to Interrupt.
func (c *Client) Carrying(dst []*Conn, h uint64, since time.Duration) []*Conn {
	return c.pool.conns.carrying(dst, h, since)
}
