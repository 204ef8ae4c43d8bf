package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/translate"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/sse"
)

// relay forwards an upstream event stream to the caller event by event,
// flushing after each. It is prepared by an attempt whose first event
// arrived well (so failover stays possible until then) and runs after the
// handler returns, in the connection's goroutine.
type relay struct {
	r        *request
	t        target
	resp     *http.Response
	rd       *sse.Reader
	cancel   context.CancelFunc
	idle     *time.Timer
	idleFor  time.Duration
	upFormat provider.Format
	conv     translate.StreamConverter // nil when formats match
	first    []byte                    // the first event, already converted
	done     bool                      // terminal event seen
	upErr    bool                      // the upstream reported an error in the stream
}

// maxPreamble bounds the opening events held back before a stream is
// committed to the caller.
const maxPreamble = 8

// startStream reads the opening events of a 200 stream, up to the first
// content. An error event or an empty stream is a failed attempt (nothing
// reached the caller yet); otherwise the stream is committed to the caller.
func (r *request) startStream(t target, resp *http.Response, cancel context.CancelFunc, attemptTimer *time.Timer) attemptResult {
	up := r.s.upstreams[t.step.Provider.Index]
	pf := t.step.Provider.Adapter.Format()
	rd := sse.NewReader(resp.Body)
	abort := func() {
		attemptTimer.Stop()
		cancel()
		resp.Body.Close()
	}
	rl := &relay{r: r, t: t, resp: resp, rd: rd, cancel: cancel, idleFor: up.streamIdle, upFormat: pf}
	if pf != r.ep.format {
		rl.conv = newStreamConverter(r.ep.format, r.model)
	}
	// Hold back the events that only open the stream: until content
	// arrives, nothing has reached the caller and failover stays possible.
	for held := 0; ; {
		ev, err := rd.Next()
		if err != nil {
			abort()
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = errors.New("stream ended before its first content event")
			}
			return r.fail(t, &attemptError{err: err})
		}
		if len(ev.Data) == 0 && len(ev.Name) == 0 { // comments, keep-alives
			continue
		}
		if provider.InspectEvent(pf, ev.Name, ev.Data) == provider.EventError {
			data := append([]byte(nil), ev.Data...)
			abort()
			return r.fail(t, &attemptError{stream: true, header: resp.Header, body: data,
				err: errors.New("error event before the stream's first content")})
		}
		rl.first = append(rl.first, rl.convert(ev)...)
		held++
		if !provider.IsPreamble(pf, ev.Name, ev.Data) || held >= maxPreamble {
			break
		}
	}
	attemptTimer.Stop()
	rl.idle = time.AfterFunc(rl.idleFor, cancel)
	return attemptResult{done: true, outcome: outcome{relay: rl}}
}

// convert turns one upstream event into the caller's frames and notes
// terminal and error events.
func (rl *relay) convert(ev sse.Event) []byte {
	kind := provider.InspectEvent(rl.upFormat, ev.Name, ev.Data)
	if kind == provider.EventError {
		rl.upErr = true
	}
	if rl.conv == nil {
		if kind == provider.EventTerminal {
			rl.done = true
		}
		return ev.Raw
	}
	frames, done, err := rl.conv.Event(ev.Name, ev.Data)
	if err != nil {
		rl.r.logger().Warn("stream event not translated", "err", err)
		return nil
	}
	if done {
		rl.done = true
	}
	return frames
}

// start commits the response headers and hands the body to the relay.
func (rl *relay) start(c *fiber.Ctx) {
	rl.r.setServedBy(c, rl.t)
	c.Status(http.StatusOK)
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no")
	c.Context().SetBodyStreamWriter(rl.run)
}

// run relays the rest of the stream, flushing after every event.
func (rl *relay) run(w *bufio.Writer) {
	r := rl.r
	defer func() {
		rl.idle.Stop()
		rl.cancel()
		rl.resp.Body.Close()
		r.cancel()
		r.s.inFlight.Add(-1)
	}()
	events := 1
	clientGone := false
	write := func(b []byte) bool {
		if len(b) == 0 {
			return true
		}
		if _, err := w.Write(b); err != nil {
			clientGone = true
			return false
		}
		if err := w.Flush(); err != nil {
			clientGone = true
			return false
		}
		return true
	}
	var readErr error
	if write(rl.first) {
		for {
			ev, err := rl.rd.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					readErr = err
				}
				if len(ev.Raw) > 0 && errors.Is(err, io.ErrUnexpectedEOF) {
					readErr = errors.New("stream cut inside an event")
				}
				break
			}
			if len(ev.Data) == 0 && len(ev.Name) == 0 {
				rl.idle.Reset(rl.idleFor)
				continue
			}
			rl.idle.Reset(rl.idleFor)
			events++
			if !write(rl.convert(ev)) {
				break
			}
		}
	}
	log := r.logger()
	attrs := []any{"model", r.model, "provider", rl.t.step.Provider.Name, "key_id", rl.t.key.ID,
		"attempts", r.attempts, "events", events, "duration", time.Since(r.started)}
	switch {
	case clientGone:
		log.Info("stream ended by the caller", attrs...)
	case rl.done || rl.upErr:
		log.Info("stream served", attrs...)
	default:
		msg := "the upstream stream ended before its terminal event"
		if readErr != nil {
			msg += ": " + errorText(readErr, rl.idleFor)
		}
		log.Warn("stream incomplete", append(attrs, slog.String("err", msg))...)
		write(streamErrorEvent(r.ep.format, http.StatusBadGateway, codeStreamIncomplete, msg))
	}
}

func errorText(err error, idle time.Duration) string {
	if errors.Is(err, context.Canceled) {
		return "no event for " + idle.String() + " (streaming idle timeout) or the request was cancelled"
	}
	return err.Error()
}
