package proxy

// A stream request that finds an identical stream in flight on this proxy
// (the same stream key) follows it: it is answered with the bytes the
// leader's caller gets, as they come, instead of going upstream itself.

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/internal/cache"
	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/shared/usage"
)

// follower relays the stream of the flight a request joined. It is the
// response's body stream, read by the server in the connection's goroutine
// (each read one chunk, flushed); Close ends the request.
type follower struct {
	r      *request
	n      *cacheNote
	f      *cache.Flight
	wr     writeArm
	off    int         // the bytes of the shared stream relayed so far
	tail   []byte      // the error event that ends a stream the leader stopped
	cut    bool        // the tail was made
	timer  *time.Timer // the request's relay deadline (nil: none, or not yet waited)
	closed bool
}

// errFollowLate ends a followed stream when the request's time is up.
var errFollowLate = errors.New("the request's time ran out while it followed an identical stream")

// follow answers a stream request from the stream of f, led by an
// identical request, once it is committed: it reports false when the
// leader had none to share (then this request goes upstream itself).
func (r *request) follow(c *fiber.Ctx, n *cacheNote, f *cache.Flight) bool {
	ctx, cancel := r.waitContext()
	defer cancel()
	served := f.Opened(ctx, r.goneC())
	if served == nil {
		return false
	}
	n.result, n.entry = cacheHit, served
	r.use.routed = true
	r.use.clientType = usage.ClientType(c.Get(fiber.HeaderUserAgent))
	r.use.tokensOK = true // a hit used no tokens (ChargeHits: the leader's, when it ends)
	r.by.provider, r.by.provType, r.by.upModel, r.by.keyID = served.Provider, served.ProviderType, served.Model, served.KeyID
	c.Status(http.StatusOK)
	h := &c.Response().Header
	h.SetContentTypeBytes(acceptEventStream)
	h.SetCanonical(hdrCacheControl, valNoCache)
	h.SetCanonical(hdrAccelBuffering, valNo)
	c.Set(headerProvider, served.Provider)
	c.Set(headerCacheAge, "0")
	fw := &follower{r: r, n: n, f: f, wr: writeArm{ctx: c.Context(), idleFor: r.s.cfg.Timeouts.StreamIdle}}
	n.follow = fw
	r.logger().Info("stream follows an identical stream in flight", "model", r.model)
	return r.cacheSay(c, n, true)
}

func (fw *follower) start(c *fiber.Ctx) {
	c.Context().Response.SetBodyStream(fw, -1)
}

func (fw *follower) Read(p []byte) (int, error) {
	r := fw.r
	for {
		if len(fw.tail) > 0 {
			n := copy(p, fw.tail)
			fw.tail = fw.tail[n:]
			fw.wr.arm(r, time.Now())
			r.noteStream(p[:n])
			return n, nil
		}
		b, end, more := fw.f.Next(fw.off)
		if len(b) > 0 {
			n := copy(p, b)
			fw.off += n
			fw.wr.arm(r, time.Now())
			r.noteStream(p[:n])
			return n, nil
		}
		switch end {
		case cache.StreamWhole:
			r.use.streamDone = true
			return 0, io.EOF
		case cache.StreamClosed: // the stream carries the error event that ended it
			r.class = classStreamIncomplete
			return 0, io.EOF
		case cache.StreamCut:
			if !fw.cut {
				fw.cut, r.class = true, classStreamIncomplete
				fw.tail = streamErrorEvent(r.ep.format, http.StatusBadGateway, gwerror.StreamIncomplete,
					"the identical stream this request followed ended before its terminal event", fw.events())
				continue
			}
			return 0, io.EOF
		}
		if r.caller.gone.Load() {
			return 0, errCallerGone
		}
		var late <-chan time.Time
		if !r.relayDeadline.IsZero() {
			if fw.timer == nil {
				fw.timer = time.NewTimer(time.Until(r.relayDeadline))
			}
			late = fw.timer.C
		}
		select {
		case <-more:
		case <-r.goneC():
			return 0, errCallerGone
		case <-late:
			r.class = classStreamIncomplete
			return 0, errFollowLate
		}
	}
}

// events counts the events relayed so far (a Responses stream numbers its
// error event after them).
func (fw *follower) events() int {
	return bytes.Count(fw.f.Shared()[:fw.off], []byte("\n\n"))
}

// Close ends the request once the stream is written, or the caller is
// gone.
func (fw *follower) Close() error {
	if fw.closed {
		return nil
	}
	fw.closed = true
	r := fw.r
	if fw.timer != nil {
		fw.timer.Stop()
	}
	r.s.callers.remove(r)
	if !r.use.streamDone && r.class != classStreamIncomplete {
		r.use.cancelled, r.class = true, classCallerGone
	}
	if e := fw.f.Stored(); e != nil { // what the leader stored: the cost saved, its tokens
		fw.n.entry = e
		if r.s.cfg.Cache.ChargeHits {
			r.use.tokens = e.Tokens
		}
	}
	r.finish(http.StatusOK)
	return nil
}
