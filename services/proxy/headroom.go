package proxy

// Headroom routing: what the providers' rate-limit headers say is left of
// a key's windows, read on every answer (upstream.ReadRoom, route's
// Step.Observe: the attempt's send), charged by the requests in flight
// (Step.Charge), shared with the fleet (runHeadroom) and asked by Pick
// (route.Room) so that a key that cannot fit a request is skipped before
// its provider would answer 429. Here: the fleet's reports, and waiting
// for a window's reset when no key has room.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/headroom"
)

// headroomReportInterval is how often at most a proxy sends the fleet the
// readings its answers brought (only when there are new ones): short,
// since a reading another proxy has not applied yet is a 429 it may cause.
const headroomReportInterval = 20 * time.Millisecond

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
