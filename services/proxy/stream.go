package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/cache"
	"switchyard.dev/services/proxy/internal/translate"
	"switchyard.dev/services/proxy/internal/upstream"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/sse"
	"switchyard.dev/shared/usage"
)

// relay forwards an upstream event stream to the caller as events arrive:
// it writes each event into its buffer and flushes it just before it reads
// from the upstream again (BeforeRead, the upstream connection's read
// hook), so events that arrive spaced out reach the caller one by one
// while a burst goes out in one write. It is prepared by an attempt whose
// first event arrived well (so failover stays possible until then) and
// runs after the handler returns, in the connection's goroutine: fasthttp
// writes the response's body through its WriteTo (relayBody), so a stream
// has no goroutine or pipe of its own.
type relay struct {
	r        *request
	t        target
	sent     time.Time     // when its attempt went upstream (hold.Outcome.Sent)
	latency  time.Duration // its attempt's, to the response headers
	resp     *fasthttp.Response
	idle     idleArm   // the upstream connection: each read gets a deadline
	wr       writeArm  // the caller's connection: each write gets one
	body     relayBody // the response's body stream (here: no allocation of its own)
	rd       *sse.Reader
	upFormat provider.Format
	conv     translate.StreamConverter // nil when formats match
	first    []byte                    // the first events, already converted (in firstBuf when they fit)
	done     bool                      // terminal event seen
	// dropUsage: the proxy asked the upstream for the stream's usage
	// (stream_options.include_usage) and the caller did not: the usage
	// chunk is read, not relayed.
	dropUsage bool
	upErr     bool          // the upstream reported an error in the stream
	passed    int           // upstream events relayed as they came (no converter)
	atEOF     bool          // the upstream body was read to its end
	og        *streamGuard  // the output guardrails (nil: none apply)
	keep      []byte        // what was relayed, for the cache (nil: not kept)
	w         *bufio.Writer // the caller's, while the read hook flushes it (nil: flushed after each event unless another is buffered)
	wFailed   bool          // a flush by the read hook failed: the caller is gone
	flight    *cache.Flight // the flight of identical streams this one leads (nil: none): it keeps what was relayed
	// convErr is why an upstream event could not be translated into the
	// caller's format: the stream is abandoned (an event dropped would
	// leave the caller an answer that looks whole and is not).
	convErr error
	// firstBuf holds the opening events of most streams (a role chunk and
	// the first content), so that a relay is one allocation.
	firstBuf [512]byte
}

// maxPreamble bounds the opening events held back before a stream is
// committed to the caller.
const maxPreamble = 8

// startStream reads the opening events of a 200 stream, up to the first
// content. An error event or an empty stream is a failed attempt (nothing
// reached the caller yet); otherwise the stream is committed to the caller.
// Each read is bounded by the streaming idle timeout and never runs past
// the attempt's deadline (deadline), so a stream that opens and then
// stalls fails the attempt after timeouts.stream_idle.
func (r *request) startStream(at *attempt, resp *fasthttp.Response, deadline time.Time) (res attemptResult) {
	t, sent := at.target, at.sent
	up := r.rt.upstreams[t.step.Provider.Index]
	pf := r.upFormat(t.step.Provider.Adapter)
	// The usage its opening events report is this attempt's: a failed
	// attempt's is not billed to the one that serves.
	defer func() {
		if !res.done {
			r.use.tokens, r.use.tokensOK = usage.Tokens{}, false
		}
	}()
	rd := sse.Get(resp.BodyStream())
	rl := &relay{r: r, t: t, sent: sent, latency: at.latency, resp: resp, rd: rd, upFormat: pf,
		idle: idleArm{conn: upstream.ConnOf(resp.LocalAddr()), idleFor: up.StreamIdle()}}
	rl.dropUsage = pf == provider.FormatOpenAI && pf == r.ep.format && !r.use.callerUsage && t.step.Provider.Adapter.StreamUsageOption()
	abort := func(atEOF bool) {
		sse.Put(rd)
		upstream.CloseBodyStream(resp, atEOF)
		fasthttp.ReleaseResponse(resp)
	}
	if pf != r.ep.format {
		rl.conv = newStreamConverter(r.ep.format, pf, r.model, r.trans.bodies[pf], r.use.callerUsage)
	}
	// Hold back the events that only open the stream: until content
	// arrives, nothing has reached the caller and failover stays possible.
	for held := 0; ; {
		rl.idle.armBefore(time.Now(), deadline)
		ev, err := rd.Next()
		if err != nil {
			abort(errors.Is(err, io.EOF))
			switch {
			case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				err = errors.New("stream ended before its first content event")
			case errors.Is(err, os.ErrDeadlineExceeded) && time.Now().Before(deadline):
				err = fmt.Errorf("stream timed out: no event for %s before its first content (streaming idle timeout): %w", up.StreamIdle(), err)
			case errors.Is(err, os.ErrDeadlineExceeded):
				err = fmt.Errorf("attempt timed out after %s waiting for the stream's first content: %w", up.AttemptTimeout(), err)
			}
			return r.fail(t, &attemptError{err: err})
		}
		if len(ev.Data) == 0 && len(ev.Name) == 0 { // comments, keep-alives
			continue
		}
		kind := provider.InspectEvent(pf, ev.Name, ev.Data)
		if kind == provider.EventError {
			data := append([]byte(nil), ev.Data...)
			header := upstream.HeaderOf(&resp.Header)
			abort(false)
			// Classified from the event's own code and type, like a
			// status error (no transport error: the exchange worked).
			return r.fail(t, &attemptError{stream: true, header: header, body: data})
		}
		if rl.first == nil {
			rl.first = rl.firstBuf[:0]
		}
		rl.first = append(rl.first, rl.convertKind(ev, kind)...)
		if rl.convErr != nil {
			// Committed and ended at once with the error that names what
			// does not translate: failing over would count the target's
			// good answer against it (a retry, the breaker, a hold).
			break
		}
		held++
		if !provider.IsPreamble(pf, ev.Name, ev.Data) || held >= maxPreamble {
			break
		}
	}
	if rl.convErr == nil {
		rl.og = r.outputGuard()
	}
	if n := r.sel.cache; n != nil && n.flight != nil {
		rl.flight = n.flight
		rl.flight.Open(&cache.Entry{Provider: t.step.Provider.Name, ProviderType: t.step.Provider.Adapter.Type(),
			Model: t.step.Upstream, KeyID: t.key.ID})
	} else if n != nil && n.store {
		rl.keep = make([]byte, 0, 4<<10)
	}
	r.boundRelay(up)
	rl.idle.armed = time.Time{}          // the relay's first read is bounded by the relay's deadline, not the attempt's
	r.caller.relayUp.Store(rl.idle.conn) // a caller that leaves from now on cuts the relay's read
	up.TTFT().Observe(time.Since(sent).Seconds())
	r.use.ttft = time.Since(r.started)
	return attemptResult{done: true, outcome: outcome{relay: rl}}
}

// boundRelay lowers the relay's deadline to the provider's
// timeouts.request: it bounds what the provider relays (a stream, speech).
func (r *request) boundRelay(up *upstream.Client) {
	if pd := up.RequestDeadline(r.started); !pd.IsZero() && (r.relayDeadline.IsZero() || pd.Before(r.relayDeadline)) {
		r.relayDeadline = pd
	}
}

// start commits the response headers and hands the body to the relay.
func (rl *relay) start(c *fiber.Ctx) {
	rl.r.setServedBy(c, rl.t)
	c.Status(http.StatusOK)
	h := &c.Response().Header
	h.SetContentTypeBytes(acceptEventStream)
	h.SetCanonical(hdrCacheControl, valNoCache)
	h.SetCanonical(hdrAccelBuffering, valNo)
	rl.wr = writeArm{ctx: c.Context(), idleFor: rl.idle.idleFor}
	rl.body = relayBody{rl: rl}
	c.Context().Response.SetBodyStream(&rl.body, -1)
}

// abandon ends a relay that never ran (its response was never written:
// the caller went away first).
func (rl *relay) abandon() {
	r := rl.r
	r.s.callers.remove(r)
	r.use.cancelled, r.class = true, classCallerGone
	rl.endFlight(true)
	rl.og.release()
	rl.og = nil
	rl.end()
}

// end lets the upstream's answer go (its connection pooled when it was
// read to its end, else closed) and ends the request: its caller got a
// 200 (and the events).
func (rl *relay) end() {
	sse.Put(rl.rd)
	upstream.CloseBodyStream(rl.resp, rl.atEOF)
	fasthttp.ReleaseResponse(rl.resp)
	rl.r.finish(http.StatusOK)
}

// run relays the rest of the stream.
func (rl *relay) run(w *bufio.Writer) {
	r := rl.r
	defer rl.end()
	events := 1
	clientGone := false
	now := time.Now() // read once per event: after each upstream read
	if c := rl.idle.conn; c != nil {
		// What is written is flushed before the next read from the
		// upstream's connection (BeforeRead), not after each event: the
		// events of one upstream burst go out in one write.
		rl.w = w
		c.SetReadHook(rl)
		defer c.SetReadHook(nil) // before the deferred close: the connection may go back to the pool
	}
	write := func(b []byte) bool {
		if len(b) == 0 {
			return true
		}
		r.noteStream(b)
		if rl.flight != nil {
			rl.flight.Write(b)
		} else if rl.keep != nil {
			if len(rl.keep)+len(b) > r.s.cache.MaxEntry() {
				rl.keep = nil
				r.s.metrics.cacheStored("too_large")
			} else {
				rl.keep = append(rl.keep, b...)
			}
		}
		rl.wr.arm(r, now)
		if _, err := w.Write(b); err != nil {
			clientGone = true
			return false
		}
		return true
	}
	// flush sends what was written unless another complete event is
	// already buffered upstream (it goes out in the same write), or the
	// read hook sends it before the next read.
	flush := func(force bool) bool {
		if !force && (rl.w != nil || rl.rd.Ready()) {
			return true
		}
		rl.wr.arm(r, now)
		if err := w.Flush(); err != nil {
			clientGone = true
			return false
		}
		return true
	}
	var readErr error
	if write(rl.guarded(rl.first)) && flush(false) && !rl.og.stopped() {
		// gone is read before each upstream read: a caller that left
		// before relayUp was set is seen here (callerGone).
		for rl.convErr == nil && !r.caller.gone.Load() {
			rl.idle.arm(rl.r, now)
			ev, err := rl.rd.Next()
			now = time.Now()
			if err != nil {
				if errors.Is(err, io.EOF) {
					rl.atEOF = true
				} else {
					readErr = err
				}
				if len(ev.Raw) > 0 && errors.Is(err, io.ErrUnexpectedEOF) {
					readErr = errors.New("stream cut inside an event")
				}
				break
			}
			if len(ev.Data) == 0 && len(ev.Name) == 0 {
				// A comment (a keep-alive): what the events before it
				// left unflushed, counting on it, goes out now.
				if !flush(false) {
					break
				}
				continue
			}
			events++
			kind := provider.InspectEvent(rl.upFormat, ev.Name, ev.Data)
			last := kind == provider.EventTerminal && provider.EndsStream(rl.upFormat, ev.Data)
			if !write(rl.guarded(rl.convertKind(ev, kind))) || !flush(last) || rl.og.stopped() {
				break
			}
			if last {
				rl.drain()
				break
			}
		}
	}
	// Out of the caller watch before the upstream connection is let go
	// (the deferred close): from here gone no longer changes. A caller
	// that went away may have had the read cut: the connection is closed,
	// not pooled.
	r.s.callers.remove(r)
	if r.caller.gone.Load() || rl.wFailed {
		clientGone, rl.atEOF = true, false
	}
	status := http.StatusOK
	r.use.estOut = int64(events) // about a token per content event
	r.use.streamDone = rl.done && !rl.upErr
	if rl.og != nil {
		r.recordGuardrails(rl.og.st.Decisions, true)
	}
	switch {
	case clientGone:
		r.use.cancelled, r.class = true, classCallerGone
		r.logInfo("stream ended by the caller", rl.t, slog.Int("events", events))
	case rl.og.stopped():
		// Not the target's failure: it answered what may not be relayed.
		flush(true)
		r.class = classRejected
		r.guardrailBlocked(rl.og.st.Blocked, r.sel.route.Name, config.StageOutput, "guardrail blocked the stream")
		rl.settle(hold.Outcome{OK: true}, rl.latency)
	case rl.convErr != nil:
		// Not the target's failure: the gateway cannot say what the
		// upstream sent in the caller's format.
		status = http.StatusBadGateway
		msg := "the upstream's stream holds an event this API's format cannot carry: " + rl.convErr.Error()
		r.logger().Warn("stream not translated", "model", r.model, "provider", rl.t.step.Provider.Name,
			"key_id", rl.t.key.ID, "events", events, "err", rl.convErr)
		if write(streamErrorEvent(r.ep.format, http.StatusBadGateway, gwerror.Unsupported, msg, rl.nextSequence())) {
			flush(true)
		}
		rl.settle(hold.Outcome{OK: true}, rl.latency) // the target answered
	case rl.done || rl.upErr:
		flush(true)
		r.logInfo("stream served", rl.t, slog.Int("events", events))
		if rl.done && !rl.upErr {
			rl.store() // whole: kept as the caller got it
		}
		if rl.upErr { // the upstream's own error event ended it ([DONE] after it or not)
			rl.settle(hold.Outcome{Result: failure.Result{Class: failure.Transient, Code: "stream_error"}}, 0)
		} else {
			rl.settle(hold.Outcome{OK: true}, rl.latency)
		}
	default:
		status = http.StatusBadGateway
		// Cut before its terminal event: the target failed this request,
		// unless the gateway cut it (its deadline for the request, its
		// shutdown).
		if !rl.cutByGateway(readErr) {
			rl.settle(hold.Outcome{Result: failure.Result{Class: failure.Transient, Code: "stream_incomplete"}}, 0)
		}
		msg := "the upstream stream ended before its terminal event"
		if readErr != nil {
			msg += ": " + rl.errorText(readErr)
		}
		r.logger().Warn("stream incomplete", "model", r.model, "provider", rl.t.step.Provider.Name,
			"key_id", rl.t.key.ID, "attempts", r.tally.attempts, "events", events,
			"duration", time.Since(r.started), "err", msg)
		if write(streamErrorEvent(r.ep.format, http.StatusBadGateway, gwerror.StreamIncomplete, maskAddrs(msg), rl.nextSequence())) {
			flush(true)
		}
	}
	if status != http.StatusOK {
		r.class = classStreamIncomplete
	}
	rl.endFlight(clientGone)
	rl.og.release()
	rl.og = nil
}

// endGrace is how long a relay that has relayed its stream's last event
// waits for the upstream to end its body: the caller's answer ends then
// (the upstream connection goes back to the pool), or when it passes (the
// connection is closed instead), not when the upstream gets round to it.
const endGrace = 100 * time.Millisecond

// drain reads what the upstream sends after its stream's last event
// (nothing, as a rule: the body's end), relaying none of it, for at most
// endGrace.
func (rl *relay) drain() {
	if rl.idle.conn == nil {
		return // unbounded: the connection is closed, not read
	}
	_ = rl.idle.conn.SetReadDeadline(time.Now().Add(endGrace))
	for {
		if _, err := rl.rd.Next(); err != nil {
			rl.atEOF = errors.Is(err, io.EOF)
			return
		}
	}
}

// settle reports how the stream ended, as its attempt's outcome, to the
// hold engine (the breaker: a success resets its count, a stream the
// upstream cut after content counts as a transient failure) and to the
// passive counts; latency is the attempt's, for a success. A caller's
// hang-up and a cut of the gateway's own are not reported.
func (rl *relay) settle(out hold.Outcome, latency time.Duration) {
	r, st := rl.r, rl.t.step
	out.RequestID, out.Sent, out.Operation = r.id, rl.sent, r.ep.op.String()
	r.s.engine.Report(st.Provider.Name, rl.t.key.HoldKey(), st.Model, false, out)
	r.rt.passive.Count(st, rl.t.key.Index(), out, latency)
}

// cutByGateway reports whether a failed read was the gateway's doing:
// the relay's deadline passed, or the gateway is shutting down.
func (rl *relay) cutByGateway(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return true
	}
	dl := rl.r.relayDeadline
	return errors.Is(err, os.ErrDeadlineExceeded) && !dl.IsZero() && !time.Now().Before(dl)
}

// errorText explains why an upstream read failed.
func (rl *relay) errorText(err error) string {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if dl := rl.r.relayDeadline; !dl.IsZero() && !time.Now().Before(dl) {
			return "the request's deadline passed (timeouts.request)"
		}
		return "no event for " + rl.idle.idleFor.String() + " (streaming idle timeout)"
	}
	if errors.Is(err, net.ErrClosed) {
		return "the gateway is shutting down"
	}
	return err.Error()
}

// store keeps the whole stream for the cache (as its caller got it).
func (rl *relay) store() {
	switch {
	case rl.flight != nil:
		if out := rl.flight.Shared(); out != nil {
			rl.r.cacheStore(rl.t, out, "text/event-stream")
		} else {
			rl.r.s.metrics.cacheStored("too_large")
		}
	case rl.keep != nil:
		rl.r.cacheStore(rl.t, rl.keep, "text/event-stream")
	}
}

// endFlight ends the stream the followers of the relay's flight share:
// whole, ended by an error event they got too, or cut (its caller left:
// each follower ends its own stream).
func (rl *relay) endFlight(clientGone bool) {
	if rl.flight == nil {
		return
	}
	how := cache.StreamClosed
	switch {
	case clientGone:
		how = cache.StreamCut
	case rl.done && !rl.upErr && rl.convErr == nil && !rl.og.stopped():
		how = cache.StreamWhole
	}
	var stored *cache.Entry
	if n := rl.r.sel.cache; n != nil && n.result != cacheHit {
		stored = n.entry
	}
	rl.flight.End(how, stored)
}

// BeforeRead flushes what the relay wrote to its caller before it reads
// from the upstream again (upstream.ReadHook): a read may wait.
func (rl *relay) BeforeRead() error {
	if rl.w == nil || rl.w.Buffered() == 0 || rl.wFailed {
		return nil
	}
	rl.wr.arm(rl.r, time.Now())
	if err := rl.w.Flush(); err != nil {
		rl.wFailed = true
		return errCallerGone
	}
	return nil
}
