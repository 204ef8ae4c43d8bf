package proxy

// Headroom routing: what the providers' rate-limit headers say is left of
// a key's windows, read on every answer (observeRoom), charged by the
// requests in flight (attempt.charge), shared with the fleet (runHeadroom)
// and asked by Pick (route.Room) so that a key that cannot fit a request
// is skipped before its provider would answer 429.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"
	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/headroom"
)

// headroomReportInterval is how often at most a proxy sends the fleet the
// readings its answers brought (only when there are new ones): short,
// since a reading another proxy has not applied yet is a 429 it may cause.
const headroomReportInterval = 20 * time.Millisecond

// startRoom starts the request's headroom routing (routing.headroom on):
// what it needs of a key's windows, as of now.
func (r *request) startRoom() {
	if !r.rt.cfg.Routing.Headroom.On() {
		return
	}
	sel := &r.sel.req
	r.sel.room = route.Room{Need: headroom.Need{Input: r.use.estIn, Output: sel.MaxOutput}, Now: time.Now().UnixNano()}
	sel.Room = &r.sel.room
}

// charge notes the attempt on its key's and its model's headroom until its
// answer comes (release): between answers, what is in flight is taken from
// what the provider last said was left.
func (at *attempt) charge(rm *route.Room) {
	if rm == nil {
		return
	}
	at.tickets[0] = at.key.Room.Charge(rm.Need)
	if i := at.key.Index(); i < len(at.step.Rooms) {
		at.tickets[1] = at.step.Rooms[i].Charge(rm.Need)
	}
}

// release gives the attempt's charges back (once; later calls do nothing).
func (at *attempt) release() {
	at.tickets[0].Release()
	at.tickets[1].Release()
}

// perModel reports whether a dialect's windows are a model's on the key
// (OpenAI's, Azure's per deployment, Anthropic's per model class) rather
// than the key's over all models (OpenRouter's).
func perModel(d headroom.Dialect) bool {
	return d == headroom.DialectOpenAI || d == headroom.DialectAnthropic
}

// observeRoom reads the rate-limit headers of the attempt's answer (any
// status) into its slot. The attempt's charge goes first: the reading
// counts it.
func (r *request) observeRoom(at *attempt, h *fasthttp.ResponseHeader) {
	at.release()
	p := at.step.Provider
	if p.Dialect == headroom.DialectNone {
		return
	}
	var rd headroom.Reading
	now := time.Now()
	if !parseRoom(p.Dialect, h, now, &rd) {
		return
	}
	slot := at.key.Room
	if perModel(p.Dialect) {
		// the model's windows; a step without them (an unlisted model, a
		// passthrough call) says nothing of the key's other models
		if slot = at.step.ModelRoom(at.key); slot == nil {
			return
		}
	}
	r.s.room.Observe(slot, &rd, now)
}

// parseRoom is headroom.Parse over an answer's headers gathered in one
// pass (fasthttp's Peek would walk them once per name asked).
func parseRoom(d headroom.Dialect, h *fasthttp.ResponseHeader, now time.Time, rd *headroom.Reading) bool {
	hs := collectedPool.Get().(*headroom.Collected)
	for k, v := range h.All() {
		hs.Add(k, v)
	}
	ok := headroom.Parse(d, hs, now, rd)
	hs.Reset()
	collectedPool.Put(hs)
	return ok
}

// collectedPool keeps the header sets parseRoom gathers into (one per
// answer being read: Parse's interface would move a local one to the heap).
var collectedPool = sync.Pool{New: func() any { return new(headroom.Collected) }}

// waitRoom waits, after a walk that sent nothing because no key's
// headroom could fit the request, for the earliest reset among the
// windows that refused it, when that is within routing.headroom.max_wait
// of the first walk and before the request's deadline. It wakes early
// when a reading changes a slot (a proxy's answer said more is left). It
// reports whether to walk again.
func (r *request) waitRoom(first time.Time) bool {
	rm := &r.sel.room
	if rm.Reset == 0 {
		return false
	}
	reset := time.Unix(0, rm.Reset)
	limit := first.Add(r.rt.cfg.Routing.Headroom.Wait())
	if reset.After(limit) || (!r.deadline.IsZero() && reset.After(r.deadline)) {
		return false
	}
	changed := r.s.room.Changed()
	t := time.NewTimer(time.Until(reset) + time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-changed:
	case <-r.s.baseCtx.Done():
		return false
	case <-r.goneC():
		return false
	}
	if r.expired() {
		return false
	}
	*rm = route.Room{Need: rm.Need, Now: time.Now().UnixNano(), Refusals: rm.Refusals}
	return true
}

// roomRetryAfter is the Retry-After (whole seconds, at least 1) of a
// request no key's headroom could fit: until the earliest reset.
func (r *request) roomRetryAfter() int {
	d := time.Until(time.Unix(0, r.sel.room.Reset))
	return max(int((d+time.Second-1)/time.Second), 1)
}

// runHeadroom shares this proxy's readings with the fleet: at most every
// headroomReportInterval while its answers bring new ones (Book.Fresh: a
// burst's readings go in one report), at once when one leaves a window
// nearly spent (Book.Low), and never while there is nothing new (an idle
// proxy is not woken); and it applies the other proxies' as they come,
// until ctx ends. Serve runs it beside the fleet member when the proxy has
// a NATS connection.
func (s *Service) runHeadroom(ctx context.Context) {
	nc := s.member.Conn()
	sub, err := nc.Subscribe(headroom.Prefix+".>", func(m *nats.Msg) {
		var rep headroom.Report
		if json.Unmarshal(m.Data, &rep) == nil {
			s.room.Apply(&rep, s.member.Instance)
		}
	})
	if err != nil {
		s.log.Warn("headroom reports not received: this proxy routes by its own answers only", "err", err)
	} else {
		defer func() { _ = sub.Unsubscribe() }()
	}
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	defer wait.Stop()
	var due <-chan time.Time // wait's channel while a burst waits out the interval; nil otherwise
	var last time.Time       // the last report sent
	for {
		fresh := s.room.Fresh()
		if due != nil {
			fresh = nil // a report is due: the readings until then go in it, waking no one
		}
		select {
		case <-ctx.Done():
			s.publishRoom(nc)
			return
		case <-fresh: // the first reading of a burst waits out the interval since the last report
			if d := headroomReportInterval - time.Since(last); d > 0 {
				wait.Reset(d)
				due = wait.C
				continue
			}
		case <-due:
		case <-s.room.Low(): // a window nearly spent goes at once: the fleet must know before it spends it twice
		}
		wait.Stop()
		due = nil
		s.publishRoom(nc)
		last = time.Now()
	}
}

// publishRoom sends one report per provider of the readings since the
// last; one that cannot be sent (NATS down) is dropped: the next answers
// bring newer ones.
func (s *Service) publishRoom(nc *nats.Conn) {
	for _, rep := range s.room.TakeReports(s.member.Instance, time.Now()) {
		data, err := json.Marshal(rep)
		if err != nil || !nc.IsConnected() {
			continue
		}
		_ = nc.Publish(headroom.Subject(rep.Provider), data)
	}
}

// noRoom answers a request no key's headroom could fit within
// routing.headroom.max_wait: 429 rate_limited, with Retry-After of the
// earliest reset. Nothing went upstream.
func (r *request) noRoom(c *fiber.Ctx) error {
	r.class = classLimited
	retry := r.roomRetryAfter()
	c.Set(fiber.HeaderRetryAfter, strconv.Itoa(retry))
	c.Set(headerAttempts, "0") // the gateway's own answer: the providers were not asked
	r.logger().Info("no key has headroom", "model", r.model, "skipped", r.sel.room.Skipped, "retry_after", retry)
	return sendError(c, r.ep.format, gwerror.RateLimited, fmt.Sprintf(
		"the rate limits of every key of `%s` are spent until their windows reset (as their providers state); retry after %d s", r.model, retry))
}
