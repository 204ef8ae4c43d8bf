package proxy

// The deadlines of a relayed answer: idleArm on the reads from the upstream,
// writeArm on the writes to the caller (released with the relay's body
// stream, relayBody, which fasthttp writes), and the idle and write
// deadlines they set.

import (
	"bufio"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/upstream"
)

// idleArm bounds the reads of a relayed answer by the streaming idle
// timeout (and the caller's deadline): a stalled upstream read fails with
// a deadline error instead of hanging. Reads that come close together
// share one deadline: it moves only once idleFor/16 has passed since it
// was set, so a stall fails after between 15/16 of idleFor and idleFor,
// and a burst of reads costs one timer update instead of one each.
type idleArm struct {
	conn    *upstream.Conn // nil: not found, reads unbounded by it
	idleFor time.Duration
	armed   time.Time // when the deadline was last set
}

// arm bounds the next upstream read of r's answer, now being the time.
func (a *idleArm) arm(r *request, now time.Time) { a.armBefore(now, r.relayDeadline) }

// armBefore bounds the next upstream read, now being the time, never past
// dl (zero: no bound but the idle timeout).
func (a *idleArm) armBefore(now, dl time.Time) {
	if a.conn == nil {
		return
	}
	if rearm(&a.armed, a.idleFor, now) {
		_ = a.conn.SetReadDeadline(idleDeadline(now, a.idleFor, dl))
	}
}

// writeArm bounds the writes of a relayed answer to the caller as idleArm
// bounds the reads from the upstream: a caller that takes nothing for the
// streaming idle timeout (a suspended client, a consumer stuck behind a
// full queue, a deliberately slow reader) is cut; with no idle timeout, a
// write may not run more than writeGrace past the relay's deadline (the
// grace leaves time for the event that tells the caller why the stream
// ended there). Without it a stalled write would block the relay for
// good, before its next upstream read could time out: the request would
// keep its place among limits.max_in_flight, its plan's concurrency and
// its upstream connection.
type writeArm struct {
	ctx     *fasthttp.RequestCtx // nil: writes unbounded
	idleFor time.Duration
	armed   time.Time
	// released: fasthttp is done with the response (it closed the body
	// stream) and may hand ctx to another connection at once: whatever
	// still holds the arm must not touch it.
	mu       sync.Mutex
	released bool
}

// arm bounds the next writes of r's answer to the caller, now being the
// time.
func (a *writeArm) arm(r *request, now time.Time) {
	if a.ctx == nil {
		return
	}
	if rearm(&a.armed, a.idleFor, now) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if !a.released {
			// fasthttp clears a handler's write deadline once the
			// response is written: the connection's next request is not
			// bounded by it.
			_ = a.ctx.SetWriteDeadline(r.writeDeadline(now, a.idleFor))
		}
	}
}

// release notes that the response is done with: arm does nothing from now.
func (a *writeArm) release() {
	a.mu.Lock()
	a.released = true
	a.mu.Unlock()
}

// relayBody is a relay's body stream as fasthttp writes it: fasthttp's
// server calls its WriteTo (fasthttp.BodyWriterTo) in the connection's
// goroutine, with a writer that frames each Write as one chunk and
// flushes it; the relay writes into a buffer of its own in front of it,
// so one flush of the relay is one chunk and one write to the caller.
// No goroutine and no pipe of its own: a stream costs the connection's
// goroutine alone. fasthttp calls Close once it is done with the body
// (after WriteTo, or without it when the response was never written):
// a relay that never ran ends the request there.
type relayBody struct {
	rl  *relay
	ran bool
}

var relayWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, relayWriteBuffer) }}

// relayWriteBuffer is the size of a relay's write buffer: what it writes
// between two flushes goes out in one chunk up to it.
const relayWriteBuffer = 16 << 10

// errRelayRead: fasthttp reads a relay's body through WriteTo only.
var errRelayRead = errors.New("a relay's body is written with WriteTo")

func (b *relayBody) Read([]byte) (int, error) { return 0, errRelayRead }

// SupportsBodyWriteTo lets fasthttp write the body with WriteTo.
func (b *relayBody) SupportsBodyWriteTo() bool { return true }

// WriteTo relays the stream to w, the caller's chunked body.
func (b *relayBody) WriteTo(w io.Writer) (int64, error) {
	b.ran = true
	bw := relayWriters.Get().(*bufio.Writer)
	bw.Reset(w)
	b.rl.run(bw)
	bw.Reset(nil)
	relayWriters.Put(bw)
	return 0, nil // a failed write is the chunk writer's to report
}

func (b *relayBody) Close() error {
	b.rl.wr.release()
	if !b.ran {
		b.rl.abandon()
	}
	return nil
}

// writeGrace is how long past the relay's deadline a write to the caller
// may still take, when no idle timeout bounds it.
const writeGrace = 5 * time.Second

// writeDeadline is when a write of a relayed answer to the caller gives up:
// idle after it starts, else writeGrace after the relay's deadline (zero:
// never).
func (r *request) writeDeadline(now time.Time, idle time.Duration) time.Time {
	if idle > 0 {
		return now.Add(idle)
	}
	if dl := r.relayDeadline; !dl.IsZero() {
		return dl.Add(writeGrace)
	}
	return time.Time{}
}

// rearm reports whether a deadline armed at *armed should move now (and
// notes now): once idleFor/16 has passed, or the first time (only then
// when there is no idle timeout).
func rearm(armed *time.Time, idleFor time.Duration, now time.Time) bool {
	if !armed.IsZero() && (idleFor == 0 || now.Sub(*armed) < idleFor/16) {
		return false
	}
	*armed = now
	return true
}

// idleDeadline is when a read of a streamed answer gives up: idle after
// the last byte (never, with no idle timeout), never past dl (the relay's
// deadline, or the attempt's while the stream opens; zero: no deadline at
// all).
func idleDeadline(now time.Time, idle time.Duration, dl time.Time) time.Time {
	if idle == 0 {
		return dl
	}
	d := now.Add(idle)
	if !dl.IsZero() && dl.Before(d) {
		d = dl
	}
	return d
}
