package proxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
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
