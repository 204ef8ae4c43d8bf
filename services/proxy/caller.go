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
// upstream. The server does not read a caller's connection while the
// handler runs, so a close would go unseen until the answer is written and
// the attempt (and its retries) would run to their end. One goroutine
// peeks (MSG_PEEK | MSG_DONTWAIT: nothing is consumed, a pipelined request
// stays for the server) at the connection of every request that waited
// past callerWatchEvery; end-of-file or a reset ends that request
// (request.callerGone). A request costs one map insert and delete: no
// goroutine, no timer.
type callerWatch struct {
	mu sync.Mutex
	m  map[*request]watched
}

type watched struct {
	raw   syscall.RawConn
	since time.Time
}

func newCallerWatch() *callerWatch { return &callerWatch{m: map[*request]watched{}} }

// add watches r's caller on conn until remove; a connection that is not a
// socket is not watched.
func (w *callerWatch) add(r *request, conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	w.mu.Lock()
	w.m[r] = watched{raw: raw, since: r.started}
	w.mu.Unlock()
	return true
}

func (w *callerWatch) remove(r *request) {
	w.mu.Lock()
	delete(w.m, r)
	w.mu.Unlock()
}

// run checks the watched connections every callerWatchEvery until ctx
// ends.
func (w *callerWatch) run(ctx context.Context) {
	t := time.NewTicker(callerWatchEvery)
	defer t.Stop()
	var due []*request
	var raws []syscall.RawConn
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			due, raws = due[:0], raws[:0]
			w.mu.Lock()
			for r, c := range w.m {
				if now.Sub(c.since) >= callerWatchEvery {
					due, raws = append(due, r), append(raws, c.raw)
				}
			}
			w.mu.Unlock()
			for i, r := range due {
				if !hungUp(raws[i]) {
					continue
				}
				w.mu.Lock()
				if _, ok := w.m[r]; ok { // still waiting: end it
					delete(w.m, r)
					r.callerGone()
				}
				w.mu.Unlock()
			}
		}
	}
}

// hungUp reports whether the peer closed or reset the connection: a peek
// reads end-of-file or ECONNRESET (nothing pending reads EAGAIN; a
// pipelined request reads data, and leaves it there).
func hungUp(raw syscall.RawConn) bool {
	var buf [1]byte
	gone := false
	err := raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = (n == 0 && err == nil) || errors.Is(err, syscall.ECONNRESET)
	})
	return err == nil && gone
}
