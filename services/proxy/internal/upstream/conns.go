package upstream

// A provider's open connections: the table that tracks them, the dial
// (TLS completed below the tracking), and Conn, which notes the
// request id it carries so that a leaving caller's exchange can be cut.

import (
	"bytes"
	"context"
	"crypto/tls"
	"hash/maphash"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// connTable tracks the provider's open connections, so that a request
// whose caller went away can interrupt its exchange, and shutdown can
// interrupt reads in progress.
type connTable struct {
	m sync.Map // *Conn -> struct{}
}

// dial connects to addr and, for an https provider (tlsConf), completes
// the TLS handshake, so that the tracked connection sits above TLS: it
// sees each request's header block in the clear (the X-Request-Id that
// lets a leaving caller's exchange be found) and deadlines set on it
// reach the TCP connection. fasthttp takes a connection with a Handshake
// method as TLS already.
func (t *connTable) dial(d *net.Dialer, addr string, tlsConf *tls.Config) (net.Conn, error) {
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tlsConf != nil {
		conf := tlsConf.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			conf.ServerName = host
		}
		tc := tls.Client(c, conf)
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c = tc
	}
	tc := &Conn{raw: c, table: t}
	tc.local = connAddr{Addr: c.LocalAddr(), conn: tc}
	t.m.Store(tc, struct{}{})
	return tc, nil
}

// connAddr is a tracked connection's local address, which leads back to
// the connection: the client hands a response the LocalAddr of the
// connection it was read from (through TLS too), so a stream finds its
// connection, to bound each read with a deadline, without a lookup.
type connAddr struct {
	net.Addr
	conn *Conn
}

// ConnOf is the connection a response was read from, given the response's
// LocalAddr (nil: not one of a Client's).
func ConnOf(local net.Addr) *Conn {
	if a, ok := local.(*connAddr); ok {
		return a.conn
	}
	return nil
}

// carrying returns the connections whose last request carried the id
// hashed h (IDHash) and was written at or after since (monotonic,
// SendingNow), appended to dst.
func (t *connTable) carrying(dst []*Conn, h uint64, since time.Duration) []*Conn {
	t.m.Range(func(k, _ any) bool {
		c := k.(*Conn)
		if at := time.Duration(c.writtenAt.Load()); at >= since && c.idHash.Load() == h {
			dst = append(dst, c)
		}
		return true
	})
	return dst
}

// Interrupt ends the exchange in flight that carries the request id
// hashed h, written at or after since (its caller went away): its pending
// read fails at once, and so does any later one, whatever deadline the
// client sets next. The connection is not reused (the pool drops a
// connection whose read failed). It does nothing when another request
// started on the connection since Carrying found it: the check and the
// cut are one step against a request starting (Write).
// A request without an id (h 0) is never cut.
func (c *Conn) Interrupt(h uint64, since time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h == 0 || c.idHash.Load() != h || time.Duration(c.writtenAt.Load()) < since {
		return
	}
	c.cutLocked(h)
}

// Cut ends the exchange in flight on the connection, whatever request it
// carries: for a relay whose caller went away, while the relay still
// holds the connection (so the exchange cannot be another request's).
func (c *Conn) Cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cutLocked(max(c.idHash.Load(), 1)) // 1: a request without an id
}

// cutLocked fails the pending read and every later one of the exchange
// carrying the id hashed h. Under mu.
func (c *Conn) cutLocked(h uint64) {
	c.cutID = h
	_ = c.raw.SetDeadline(time.Unix(1, 0))
}

// cutDeadline keeps an interrupted connection's deadline in the past.
// Under mu.
func (c *Conn) cutDeadline(t time.Time) time.Time {
	if c.cutID != 0 {
		return time.Unix(1, 0)
	}
	return t
}

// SetDeadline sets the connection's deadlines (kept in the past while it
// is cut). The deadline setters take mu, so that an interrupt cannot fall
// between their check of the cut and their setting (a later deadline
// would undo the cut).
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wantWrite = t
	return c.raw.SetDeadline(c.cutDeadline(t))
}

// SetReadDeadline sets the read deadline (kept in the past while the
// connection is cut).
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.raw.SetReadDeadline(c.cutDeadline(t))
}

// SetWriteDeadline sets the write deadline (kept in the past while the
// connection is cut).
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wantWrite = t
	return c.raw.SetWriteDeadline(c.cutDeadline(t))
}

// uncut lifts a cut that reached the connection after its exchange ended
// (the caller left as its answer came in; the idle connection went back
// to the pool): the request now starting on it is another's. An exchange
// cut while in flight fails its read, and the pool never reuses such a
// connection, so a cut still set when a request starts is always stale.
// Under mu.
func (c *Conn) uncut() {
	c.cutID = 0
	_ = c.raw.SetWriteDeadline(c.wantWrite) // the one the client asked for before this write
	_ = c.raw.SetReadDeadline(time.Time{})
}

func (t *connTable) closeAll() {
	t.m.Range(func(k, _ any) bool {
		_ = k.(*Conn).Close()
		return true
	})
}

// Conn is a pooled connection of a Client, which leaves the Client's
// table when it closes. It notes the X-Request-Id of the request last
// written on it (a hash: nothing allocated per request), and when, so that a request
// whose caller went away can find and interrupt it. The two are stored
// apart, the id first and read last: a reader racing a write sees a time
// no later than the id's own write, so a connection another request just
// took is never taken for the leaving one's.
type Conn struct {
	raw    net.Conn // TCP, or TLS above it
	table  *connTable
	local  connAddr
	closed atomic.Bool
	// mu orders a request starting (Write), an interrupt and the deadline
	// setters, so that a cut meant for the exchange before never reaches
	// the next one, and a deadline set never undoes a cut.
	mu        sync.Mutex
	cutID     uint64    // under mu: the id hash an interrupt named; every deadline stays in the past (0: not cut)
	wantWrite time.Time // under mu: the write deadline the client last asked for
	bodyLeft  int64     // body bytes of the request being written still to come (Write only)
	idHash    atomic.Uint64
	writtenAt atomic.Int64 // clockSince
	hook      ReadHook     // told before each read (the reading goroutine's own)
}

// idSeed seeds the request id hashes of Conn.
var idSeed = maphash.MakeSeed()

// clockStart anchors clockSince.
var clockStart = time.Now()

// SendingNow is a request's sending as its attempt is about to be
// written, for Carrying and Interrupt: the monotonic time since the
// process started, never 0 (0: not sending). A write in the same clock
// tick (a coarse clock) still counts as at or after it.
func SendingNow() time.Duration { return max(clockSince(), 1) }

// IDHash is the hash of request id id that Carrying and Interrupt name an
// exchange by.
func IDHash(id string) uint64 { return maphash.String(idSeed, id) }

// clockSince is the monotonic time since the process started, an integer
// a request and a connection compare across goroutines.
func clockSince() time.Duration { return time.Since(clockStart) }

// RequestIDHeader is the request header that names the request a
// connection carries (its value is hashed with IDHash).
const RequestIDHeader = "X-Request-Id"

var requestIDHeader = []byte("\r\n" + RequestIDHeader + ": ")

// Write writes p on the connection. It notes the request id when p starts a request (its header block):
// the connection now carries that request (no id: none that a cut can
// name), and a cut still set is stale (uncut), unless it names this very
// id. The writes after a header block carry its body (Content-Length
// bytes): a body that holds something like a request line is not taken
// for one. The client writes one request at a time, so only Write
// touches bodyLeft.
func (c *Conn) Write(p []byte) (int, error) {
	if c.bodyLeft > 0 {
		c.bodyLeft -= min(int64(len(p)), c.bodyLeft)
	} else if head, ok := requestHead(p); ok {
		var h uint64 // 0: no id
		if i := bytes.Index(head, requestIDHeader); i >= 0 {
			rest := head[i+len(requestIDHeader):]
			if j := bytes.IndexByte(rest, '\r'); j > 0 {
				h = maphash.Bytes(idSeed, rest[:j])
			}
		}
		if len(head) < len(p) { // the whole block: its body follows
			c.bodyLeft = max(contentLength(head)-int64(len(p)-len(head)-2), 0)
		}
		c.mu.Lock()
		if c.cutID != 0 && h != 0 && h != c.cutID {
			c.uncut()
		}
		c.idHash.Store(h)
		c.writtenAt.Store(int64(clockSince()))
		c.mu.Unlock()
	}
	return c.raw.Write(p)
}

var contentLengthHeader = []byte("\r\nContent-Length: ")

// contentLength is the Content-Length of a header block (0 when absent or
// not a number).
func contentLength(head []byte) int64 {
	i := bytes.Index(head, contentLengthHeader)
	if i < 0 {
		return 0
	}
	var n int64
	for _, d := range head[i+len(contentLengthHeader):] {
		if d < '0' || d > '9' || n > 1<<40 {
			break
		}
		n = n*10 + int64(d-'0')
	}
	return n
}

// Handshake is the TLS connection's (done by dial); nil for plain TCP.
func (c *Conn) Handshake() error {
	if tc, ok := c.raw.(*tls.Conn); ok {
		return tc.Handshake()
	}
	return nil
}

// LocalAddr is the connection's local address, leading back to it
// (ConnOf).
func (c *Conn) LocalAddr() net.Addr { return &c.local }

// requestHead is the header block p starts with, up to the first CRLF of
// the blank line that ends it (all of p when it does not end in p), when
// p starts a request: a method of upper-case letters
// (passthrough sends any method), a space, and a first line ending in
// " HTTP/1.x".
func requestHead(p []byte) ([]byte, bool) {
	if !startsMethod(p) {
		return nil, false
	}
	eol := bytes.IndexByte(p, '\n')
	if eol < 10 || p[eol-1] != '\r' || !bytes.HasPrefix(p[eol-10:], []byte(" HTTP/1.")) {
		return nil, false
	}
	if end := bytes.Index(p, []byte("\r\n\r\n")); end >= 0 {
		return p[:end+2], true
	}
	return p, true
}

// startsMethod reports whether p starts with a method (upper-case
// letters) and a space.
func startsMethod(p []byte) bool {
	for i := 0; i < len(p) && i < 8; i++ {
		switch c := p[i]; {
		case c == ' ':
			return i > 0
		case c < 'A' || c > 'Z':
			return false
		}
	}
	return false
}

// Read reads from the connection.
func (c *Conn) Read(p []byte) (int, error) {
	if c.hook != nil {
		if err := c.hook.BeforeRead(); err != nil {
			return 0, err
		}
	}
	return c.raw.Read(p)
}

// ReadHook is told before each read from a connection (one that may
// wait for the provider): a relay flushes to its caller what it wrote
// since, so that what the upstream sent in one burst goes out in one
// write, and nothing waits behind a read. An error fails the read.
type ReadHook interface {
	BeforeRead() error
}

// SetReadHook sets the hook of the connection's reads (nil: none). Only
// the goroutine that reads the connection may set it, and it must unset
// it before the connection goes back to the pool.
func (c *Conn) SetReadHook(h ReadHook) { c.hook = h }

// RemoteAddr is the provider's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raw.RemoteAddr() }

// Close closes the connection and takes it out of its table.
func (c *Conn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.table.m.Delete(c)
	}
	return c.raw.Close()
}

var _ net.Conn = (*Conn)(nil)
