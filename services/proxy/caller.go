package proxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"switchyard.dev/services/proxy/internal/upstream"
)

// callerWatchEvery is how often the connections of requests waiting on
// upstreams are checked for a caller that went away; a request is checked
// once it has waited that long (quick answers are never checked).
const callerWatchEvery = 100 * time.Millisecond

// callerWatch notices callers that go away while their request waits on an
// upstream or its answer is relayed (a stream, speech). The server does
// not read a caller's connection while the handler runs nor while it
// writes a relayed answer, so a close would go unseen until the next
// write (for a stream that drips, up to timeouts.stream_idle later) and
// the attempt (and its retries) would run to their end. One goroutine
// peeks (MSG_PEEK | MSG_DONTWAIT: nothing is consumed, a pipelined request
// stays for the server) at the connection of every request that waited
// past callerWatchEvery; end-of-file or a reset ends that request
// (hangUp: request.callerGone, which cuts a relay's upstream read, then
// request.cutAttempt). A request, a relayed one too, costs a link into
// and out of a list under a lock: no allocation on its path, no
// goroutine, no timer; the watch costs a peek per watched request each
// tick.
type callerWatch struct {
	mu   sync.Mutex
	head watchLink // sentinel of a circular list of the watched requests
}

// watchLink links a watched request into the watch's list; a request
// holds one (request.watch).
type watchLink struct {
	prev, next *watchLink
	r          *request
	conn       net.Conn // the caller's connection
}

func newCallerWatch() *callerWatch {
	w := &callerWatch{}
	w.head.prev, w.head.next = &w.head, &w.head
	return w
}

// add watches r's caller on conn until remove.
func (w *callerWatch) add(r *request, conn net.Conn) {
	l := &r.caller.watch
	l.r, l.conn = r, conn
	w.mu.Lock()
	l.prev, l.next = w.head.prev, &w.head
	w.head.prev.next = l
	w.head.prev = l
	w.mu.Unlock()
}

// remove ends the watch of r (a no-op when the watch already ended it).
func (w *callerWatch) remove(r *request) {
	w.mu.Lock()
	w.unlink(&r.caller.watch)
	w.mu.Unlock()
}

func (w *callerWatch) unlink(l *watchLink) {
	if l.next == nil {
		return
	}
	l.prev.next, l.next.prev = l.next, l.prev
	l.prev, l.next = nil, nil
}

// run checks the watched connections every callerWatchEvery until ctx
// ends. Requests are linked in about the order they started, so the scan
// stops at the first that has not waited callerWatchEvery yet (one linked
// a moment late is checked a tick later).
func (w *callerWatch) run(ctx context.Context) {
	t := time.NewTicker(callerWatchEvery)
	defer t.Stop()
	var due []*request
	var conns []net.Conn
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due, conns = due[:0], conns[:0]
			w.mu.Lock()
			for l := w.head.next; l != &w.head && now.Sub(l.r.started) >= callerWatchEvery; l = l.next {
				due, conns = append(due, l.r), append(conns, l.conn)
			}
			w.mu.Unlock()
			for i, r := range due {
				if hungUp(conns[i]) && w.hangUp(r) {
					r.cutAttempt()
				}
			}
			clear(due)
			clear(conns)
		}
	}
}

// hangUp ends the watch of r, whose caller went away, when it still
// runs: r is marked gone (request.callerGone, which cuts a relay's
// upstream read at once) and the caller calls r.cutAttempt, outside the
// lock. It reports false when the watch had already ended (the request
// or its relay was done).
func (w *callerWatch) hangUp(r *request) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.caller.watch.next == nil {
		return false
	}
	w.unlink(&r.caller.watch)
	r.callerGone()
	return true
}

// hungUp reports whether the peer closed or reset the connection: a peek
// reads end-of-file or ECONNRESET (nothing pending reads EAGAIN; a
// pipelined request reads data, and leaves it there).
func hungUp(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false // not a socket: not watched
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var buf [1]byte
	gone := false
	err = raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = (n == 0 && err == nil) || errors.Is(err, syscall.ECONNRESET)
	})
	return err == nil && gone
}

// callerGone is called once, under the caller watch's lock, when the
// caller closed its connection: the request makes no further attempt, and
// the upstream read of its relay, if it has one, fails at once (the relay
// still holds the connection: it leaves the watch before it lets it go).
// The watch then calls cutAttempt, outside its lock. gone is set before
// relayUp is read, and a relay sets relayUp before it reads gone: either
// the read is cut here or the relay sees gone before it reads.
func (r *request) callerGone() {
	r.caller.gone.Store(true)
	if r.caller.goneCh != nil {
		close(r.caller.goneCh)
	}
	if c := r.caller.relayUp.Load(); c != nil {
		c.Cut()
	}
}

// cutAttempt interrupts the attempt in flight of a request whose caller
// went away. It is found by its X-Request-Id, written on one upstream
// connection since the attempt was sent. Only an id the gateway made is
// unique: a caller may choose its own, and another request (of the same
// caller, or another) may carry the same one, so a request with a chosen
// id is not interrupted (its attempt runs to its answer or timeout); one
// caller leaving never cuts another's exchange. It walks every upstream's
// connections, so the watch calls it without holding the lock every
// request takes on its way in and out.
func (r *request) cutAttempt() {
	since := time.Duration(r.caller.sending.Load())
	if since == 0 || r.caller.idChosen {
		return // between attempts, or an id that may not be this request's alone
	}
	h := upstream.IDHash(r.id)
	var buf [2]*upstream.Conn
	found := buf[:0]
	for _, u := range r.rt.upstreams {
		found = u.Carrying(found, h, since)
	}
	if len(found) == 1 {
		found[0].Interrupt(h, since)
	}
}

// goneC is a channel closed when the caller goes away, made on first use:
// most requests never wait on it.
func (r *request) goneC() <-chan struct{} {
	w := r.s.callers
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.caller.goneCh == nil {
		r.caller.goneCh = make(chan struct{})
		if r.caller.gone.Load() {
			close(r.caller.goneCh)
		}
	}
	return r.caller.goneCh
}
