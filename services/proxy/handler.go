package proxy

import (
	"fmt"
	"log/slog"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/services/proxy/internal/upstream"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/usage"
)

// Response headers naming what served a request.
const (
	headerRequestID = upstream.RequestIDHeader // the header upstream connections are tracked by
	headerProvider  = "X-Switchyard-Provider"
	headerKeyID     = "X-Switchyard-Key-Id"
	headerModel     = "X-Switchyard-Model"
	headerAttempts  = "X-Switchyard-Attempts"
)

// handle serves one inference request: authenticate, parse, resolve, then
// try targets until one answers.
func (s *Service) handle(ep *endpoint) fiber.Handler {
	return func(c *fiber.Ctx) error {
		r := &request{s: s, ep: ep, started: time.Now()}
		r.id = string(c.Response().Header.Peek(headerRequestID)) // set by the request-id middleware
		r.caller.idChosen = string(c.Request().Header.Peek(headerRequestID)) == r.id

		if n := s.life.inFlight.Add(1); n > int64(s.cfg.Limits.MaxInFlight) {
			s.life.inFlight.Add(-1)
			r.class = classRejected
			c.Set(fiber.HeaderRetryAfter, "1") // a slot frees as soon as a request ends
			err := sendError(c, ep.format, gwerror.Overloaded,
				fmt.Sprintf("the gateway is at its limit of %d requests in flight; retry shortly", s.cfg.Limits.MaxInFlight))
			r.record(c.Response().StatusCode())
			return err
		}
		r.rt = s.useRouting()
		r.startTrace(c, s.bundles.on())
		s.callers.add(r, c.Context().Conn())
		var res outcome
		if ep == epPassthrough {
			res = r.servePassthrough(c)
			if r.ep.format == provider.FormatAnthropic {
				setAnthropicRequestID(c) // the gateway's, not the provider's relayed
			}
		} else {
			res = r.serve(c)
		}
		if res.relay == nil && res.binary == nil && res.follow == nil {
			s.callers.remove(r) // a relay stays watched until it ends
		}
		if r.caller.gone.Load() {
			r.class = classCallerGone
		}
		if res.relay != nil {
			res.relay.start(c) // the relay ends the request when the stream ends
			return nil
		}
		if res.binary != nil {
			res.binary.start(c) // the relay ends the request when the audio ends
			return nil
		}
		if res.follow != nil {
			res.follow.start(c) // the follower ends the request when the stream ends
			return nil
		}
		r.noteResponse(c)
		r.finish(c.Response().StatusCode())
		return res.err
	}
}

// useRouting returns the routing in use, counted as used (active) by one
// more request: a swap between the load and the count would let the old
// routing close its pools under the request, so the count is checked
// against the routing in use after it is made.
func (s *Service) useRouting() *routing {
	for {
		rt := s.rt.Load()
		rt.active.Add(1)
		if s.rt.Load() == rt {
			return rt
		}
		rt.active.Add(-1) // swapped meanwhile: take the new one
	}
}

// serve takes the request through its stages: its arrival (accept: the
// caller, the body, the model), its admission (guardrails, plan limits),
// the cache, then routing and the failover loop (run).
func (r *request) serve(c *fiber.Ctx) outcome {
	rte, internal, ok, err := r.accept(c)
	if !ok {
		return outcome{err: err}
	}
	if !internal {
		// A check the gateway makes is neither checked again nor
		// counted against the plan the request it checks was admitted by.
		if ok, err := r.checkGuardrails(c, rte); !ok {
			return outcome{err: err}
		}
		if ok, err := r.admit(c, rte.Steps); !ok {
			return outcome{err: err}
		}
	}
	if r.cacheFront(c, rte) {
		return outcome{follow: r.sel.cache.follow}
	}
	r.selection(c, rte)
	return r.run(c, rte)
}

// logger returns the request's logger, built on first use.
func (r *request) logger() *slog.Logger {
	if r.log == nil {
		r.log = r.s.log.With("request_id", r.id)
	}
	return r.log
}

// outcome is how a request ended in the handler: a response already
// written (err from writing it), or a stream relay to start.
type outcome struct {
	err    error
	relay  *relay
	binary *binaryRelay // a binary answer (speech) to stream through
	follow *follower    // an identical request's stream to follow
}

// run tries the steps in order until one answers, applying each failure's
// action: retry the same target, rotate the key, or return to the caller.
// When every candidate is held, the all-held policy decides: fail fast
// (503), or try the targets held only by soft holds (a tripped breaker, a
// rate limit) in declared order, so that bookkeeping never makes things
// worse than having no breaker.
func (r *request) run(c *fiber.Ctx, rte *route.Route) outcome {
	r.use.routed = true
	r.use.clientType = usage.ClientType(c.Get(fiber.HeaderUserAgent))
	p := pass{gate: r.s.engine}
	first := time.Now()
	for {
		if out, done := r.tryRoute(c, rte, &p); done {
			return out
		}
		// No key's headroom could fit it: a reset (or a reading) soon
		// brings one back, else the gateway answers 429 itself.
		if r.tally.attempts > 0 || r.sel.room.Skipped == 0 || !r.waitRoom(first) {
			break
		}
		p = pass{gate: r.s.engine}
	}
	if r.tally.attempts == 0 && p.denied && r.sel.room.Skipped == 0 && !r.expired() && r.s.trySoft(rte) {
		p = pass{gate: softGate{engine: r.s.engine, deadline: r.deadline}, soft: true}
		r.logger().Warn("every target is held; trying soft holds in declared order", "model", r.model)
		if out, done := r.tryRoute(c, rte, &p); done {
			return out
		}
	}
	return r.exhausted(c, rte, &p)
}

// trySoft reports whether the all-held policy of some step's provider
// (its providers[].resilience.all_held_policy, else the global one) is
// try_soft: only then does a request every target of which is held make
// the soft pass (AdmitSoft answers for each provider by its own policy).
func (s *Service) trySoft(rte *route.Route) bool {
	pol := s.engine.Policy()
	for i := range rte.Steps {
		if st := &rte.Steps[i]; st.Usable() && pol.For(st.Provider.Name).AllHeld != config.AllHeldFailFast {
			return true
		}
	}
	return false
}

// tryRoute walks the route's candidates once (tryTargets), in its
// policy's order, or in declared order on the soft pass.
func (r *request) tryRoute(c *fiber.Ctx, rte *route.Route, p *pass) (outcome, bool) {
	rte.Start(&r.sel.cur, &r.sel.req)
	if p.soft {
		r.sel.cur.InDeclaredOrder() // every target is held: the declared order, health aside
	}
	x := exchange{cur: &r.sel.cur, dynamic: rte.Dynamic, replaySafe: true}
	return r.tryTargets(c, &x, p)
}
