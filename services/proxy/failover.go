package proxy

// The failover loop: one walk over a request's targets, shared by every
// endpoint (the inference routes and the passthrough), applying each failed
// attempt's action (retry the same target, rotate the key, move to the next
// step, or return to the caller).

import (
	"math/rand/v2"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/headroom"
	"switchyard.dev/shared/hold"
)

// exchange is what differs between the endpoints' walks over targets:
// which steps there are, how an attempt is sent, whether it may be sent
// again, and how a failure is answered. A small value made per request; the
// loop (tryTargets) is the same for all.
type exchange struct {
	// cur walks the route's steps in its policy's order; nil for a
	// passthrough (a call to a path under a provider's base URL, sent with
	// the caller's method by forward), whose one step is one.
	cur *route.Cursor
	one *route.Step
	// dynamic: the caller named a model no provider lists (callerScope).
	dynamic bool
	method  string // the passthrough's
	rest    string // the passthrough's path under base_url
	// replaySafe: the request may be sent again (another attempt, another
	// key) after a failure. An inference request is; a passthrough only
	// when its method is (GET, HEAD) or it carries an Idempotency-Key.
	replaySafe bool
	oneDone    bool // the passthrough's step was walked
}

// passthrough reports whether the exchange is a passthrough call (forward)
// rather than an inference request (send).
func (x *exchange) passthrough() bool { return x.cur == nil }

// next is the next step to try (nil: none left).
func (x *exchange) next() *route.Step {
	if x.cur != nil {
		step, _ := x.cur.Next()
		return step
	}
	if x.oneDone {
		return nil
	}
	x.oneDone = true
	return x.one
}

// more reports whether a step is left after the current one.
func (x *exchange) more() bool { return x.cur != nil && x.cur.More() }

// progress notes that the current step yielded a candidate.
func (x *exchange) progress() {
	if x.cur != nil {
		x.cur.Progress()
	}
}

// attempt is what one attempt needs, made per attempt by tryTargets: what
// it is sent to, with what, and what is learnt of it as it goes. The
// request keeps what the whole request needs.
type attempt struct {
	target
	body     []byte
	probe    bool          // the one probe of a due hold
	gen      uint64        // the generation of the key's secret it sends
	probeEnd time.Time     // when a probe must end (probeDeadline); zero: not a probe
	sent     time.Time     // when it went upstream: a failure of one sent before an operator's release does not hold again
	latency  time.Duration // to the upstream's response headers (0: none yet)
	trace    int           // its entry in the debug bundle (beginAttempt; -1: none)
	begun    time.Time     // for its duration (switchyard_upstream_attempt_duration_seconds)
	// tickets are its charges on the key's and the model's headroom,
	// given back when its answer comes (release).
	tickets [2]headroom.Ticket
}

// pass is the state of one walk over the steps.
type pass struct {
	gate        route.Admitter
	soft        bool // the soft-hold pass
	candidates  int  // targets tried
	denied      bool // some target was held
	unsupported error
	// failed: an attempt failed other than by a refusal that says nothing
	// sure of its key (callerScope). Without one, the provider's refusal
	// is the caller's answer.
	failed bool
}

// tryTargets walks the exchange's steps once, and each step's keys, until
// a target answers, the request runs out of attempts or time, or a failure
// is the caller's answer. done reports that a response was produced (or a
// relay prepared).
func (r *request) tryTargets(c *fiber.Ctx, x *exchange, p *pass) (out outcome, done bool) {
	s := r.s
	maxAttempts := s.cfg.Limits.MaxAttempts
steps:
	for {
		step := x.next()
		if step == nil {
			break
		}
		body := r.body
		if !x.passthrough() {
			var err error
			body, err = r.bodyFor(step)
			if wrongType(err) {
				// Not a request of its endpoint's API (a field of the wrong
				// type): the caller's to fix, whatever the other steps' state.
				// Other translation errors (tool arguments that are not JSON,
				// a value the translation does not know) concern this step
				// only: the next may serve the request as it is.
				return outcome{err: r.refuse(c, gwerror.InvalidRequest, malformedRequest(err))}, true
			}
			if err != nil {
				p.unsupported = err
				continue
			}
		}
		var tried uint64
		// transientKeys counts this step's keys that failed with a
		// transient failure (5xx, timeout, transport) once out of
		// retries: two of them mean the provider, not a key, is failing,
		// and the next step gets the attempts left.
		transientKeys := 0
		var sel *route.Request
		if !x.passthrough() {
			sel = &r.sel.req
			r.keyHash(c, step.Provider)
		}
	keys:
		for {
			// Checked before a key is picked: a pick may hand over a
			// hold's only probe, which a request that then stops would
			// keep from everyone until its lease lapsed.
			if r.tally.attempts >= maxAttempts || r.expired() {
				break steps
			}
			if r.providerExpired(step.Provider) {
				continue steps // its timeouts.request passed: the next step's turn
			}
			key, adm := step.Pick(p.gate, tried, sel)
			if key == nil {
				if len(step.Provider.Keys) > bits(tried) {
					p.denied = true
				}
				continue steps
			}
			x.progress()
			p.candidates++
			tried |= 1 << uint(key.Index())
			probe := adm == hold.AdmitProbe
			for same := 1; ; same++ {
				if r.tally.attempts >= maxAttempts || r.expired() {
					if same == 1 {
						r.unsent(step.Provider.Name, key, step.Model, probe)
					}
					break steps
				}
				if same > 1 && r.providerExpired(step.Provider) {
					continue steps // no time left on the provider for a retry
				}
				r.tally.attempts++
				if r.idem.provider == "" {
					r.idem.provider = step.Provider.Name // the Idempotency-Key goes to this provider only
				}
				at := attempt{target: target{step: step, key: key}, body: body, probe: probe, gen: key.Generation(), begun: time.Now()}
				at.trace = r.beginAttempt(step, key, probe, p.soft)
				at.probeEnd = r.probeDeadline(step.Provider.Name, key.HoldKey(), step.Model, probe)
				if sel != nil {
					at.charge(sel.Room)
				}
				res := r.sendTo(c, x, &at)
				r.caller.sending.Store(0) // the exchange is over (a stream's relay is not interrupted by the watch)
				if res.done {
					r.endAttempt(&at, nil, "served")
					r.reportServed(x, &at, res.outcome.relay != nil)
					return res.outcome, true
				}
				ae := res.failure
				r.tally.last = ae
				if ae.result.Class == failure.RateLimit {
					r.tally.rateLimited++
				}
				// A refusal that says nothing sure of the key (of a model
				// the caller made up, of a passthrough path) holds nothing.
				unsure := callerScope(ae, x.dynamic || x.passthrough(), x.passthrough())
				p.failed = p.failed || !unsure
				act := s.decide(ae)
				if !x.replaySafe {
					act = failure.Return // sent once: what it did upstream is not known
				}
				// A probe makes one attempt; so does the soft pass.
				retrying := act == failure.RetrySame && same < s.cfg.Retry.SameTargetAttempts && !probe && !p.soft
				r.reportFailure(x, &at, hold.Outcome{
					Result: ae.result, Status: ae.status, Retrying: retrying, Sent: at.sent,
					// Not the target's fault: the caller's deadline or hang-up, a
					// refusal of a secret rotated away since it was sent, or one
					// that says nothing sure of the key.
					Cancelled: r.expired() || key.Generation() != at.gen || unsure,
				})
				taken := act // what the proxy does now: out of same-target retries, it rotates
				if act == failure.RetrySame && !retrying {
					taken = failure.Rotate
				}
				r.endAttempt(&at, ae, taken.String())
				r.logFailure(x, at.target, ae, taken, probe)
				if taken == failure.Rotate && ae.result.Class == failure.Transient {
					// Only where another step can take over: the last one
					// keeps trying its keys.
					if transientKeys++; transientKeys >= maxTransientKeys && x.more() {
						continue steps
					}
				}
				switch act {
				case failure.RetrySame:
					if !retrying {
						continue keys
					}
					waited := time.Now()
					ok := r.backoff(same, ae)
					r.noteBackoff(at.trace, time.Since(waited))
					if !ok {
						break steps
					}
				case failure.Rotate:
					continue keys
				case failure.Return:
					if x.passthrough() {
						return outcome{err: r.returnPassthrough(c, at.target, ae)}, true
					}
					return outcome{err: r.returnUpstreamError(c, at.target, ae)}, true
				}
			}
		}
	}
	return outcome{}, false
}

// sendTo sends one attempt to t: the inference request (attempt), or the
// passthrough call (forward).
func (r *request) sendTo(c *fiber.Ctx, x *exchange, at *attempt) attemptResult {
	if x.passthrough() {
		if ae := r.forward(c, at, x.method, x.rest); ae != nil {
			return attemptResult{failure: ae}
		}
		return attemptResult{done: true}
	}
	return r.send(c, at, at.step.Provider.Name == r.idem.provider)
}

// reportServed reports a target that answered. A stream's (relay) settles only
// its probe now: the breaker and the passive counts wait for the stream's
// end (relay.settle: a stream the upstream cuts mid-way fails the target).
// A passthrough call names no model of the route table: it feeds the hold
// engine only.
func (r *request) reportServed(x *exchange, at *attempt, relay bool) {
	step, key := at.step, at.key
	if !x.passthrough() && !relay {
		r.report(at, hold.Outcome{OK: true})
		return
	}
	if x.passthrough() || at.probe {
		r.s.engine.Report(step.Provider.Name, key.HoldKey(), step.Model, at.probe, hold.Outcome{OK: true, RequestID: r.id})
	}
	if relay {
		r.observeLatency(step, key, at.latency)
	}
}

// reportFailure reports a failed attempt: to the hold engine and the
// passive counts (report), a passthrough call's to the hold engine only.
func (r *request) reportFailure(x *exchange, at *attempt, out hold.Outcome) {
	if x.passthrough() {
		out.RequestID = r.id
		r.s.engine.Report(at.step.Provider.Name, at.key.HoldKey(), at.step.Model, at.probe, out)
		return
	}
	r.report(at, out)
}

// logFailure logs a failed attempt and what the proxy does next.
func (r *request) logFailure(x *exchange, t target, ae *attemptError, taken failure.Action, probe bool) {
	if x.passthrough() {
		r.logger().Warn("passthrough attempt failed", "provider", t.step.Provider.Name, "key_id", t.key.ID, "path", t.step.Upstream,
			"status", ae.status, "class", ae.result.Class.String(), "action", taken.String())
		return
	}
	r.logger().Warn("attempt failed",
		"provider", t.step.Provider.Name, "key_id", t.key.ID, "model", t.step.Model,
		"attempt", r.tally.attempts, "status", ae.status, "class", ae.result.Class.String(),
		"code", ae.result.Code, "reason", ae.reason(), "action", taken.String(), "probe", probe)
}

// unsent gives back the probe lease the pick of key handed this request
// (probe) when the request stops before it sends the probe's attempt:
// kept, it would hold the hold from the whole fleet until it lapsed.
func (r *request) unsent(provider string, key *route.Key, model string, probe bool) {
	if probe {
		r.s.engine.Report(provider, key.HoldKey(), model, true, hold.Outcome{Cancelled: true, Unsent: true, RequestID: r.id})
	}
}

// providerExpired reports whether the provider's own timeouts.request
// has passed for the request: an attempt on it would have no time at all.
func (r *request) providerExpired(p *route.Provider) bool {
	pd := r.rt.upstreams[p.Index].RequestDeadline(r.started)
	return !pd.IsZero() && !time.Now().Before(pd)
}

// maxTransientKeys is how many keys of a step a request tries after
// transient failures before it moves to the next step: a provider failing
// with 5xx or timeouts fails on every key, and trying each would spend
// every attempt of the request on it.
const maxTransientKeys = 2

// report gives one attempt's outcome to the hold engine and to the
// passive counters (one call per attempt); a success's latency also feeds
// the target's and the key's averages.
func (r *request) report(at *attempt, out hold.Outcome) {
	step, key := at.step, at.key
	out.RequestID = r.id
	out.Operation = r.ep.op.String()
	r.s.engine.Report(step.Provider.Name, key.HoldKey(), step.Model, at.probe, out)
	if out.OK {
		r.observeLatency(step, key, at.latency)
	}
	r.rt.passive.count(step, key.Index(), out, at.latency)
}

// softLeaseWait bounds how long a request of the try_soft pass waits for
// the engine to lease a soft hold (a compare-and-set in the store, about a
// millisecond on a healthy NATS) before it is answered 503.
const softLeaseWait = 250 * time.Millisecond

// softGate admits what the engine admits, and a target held only by soft
// holds (a tripped breaker, a rate limit) as an early probe: one request
// at a time per hold, fleet-wide (Engine.AdmitSoft). Only requests every
// target of which is held get here; they wait (bounded) for the lease.
type softGate struct {
	engine   *hold.Engine
	deadline time.Time // the request's; zero: none
}

func (g softGate) Admit(provider, keyID, model string) hold.Admission {
	if a := g.engine.Admit(provider, keyID, model); a != hold.Deny {
		return a
	}
	wait := softLeaseWait
	if !g.deadline.IsZero() {
		wait = min(wait, time.Until(g.deadline))
	}
	var timer *time.Timer
	for {
		a, leasing := g.engine.AdmitSoft(provider, keyID, model)
		if leasing == nil || wait <= 0 {
			return a
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-leasing:
		case <-timer.C:
			return hold.Deny
		}
	}
}

func bits(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// backoff waits before retrying the same target: exponential with full
// jitter, at least any wait the provider stated (when it is within
// retry.backoff_max), never past the deadline. It reports false when the
// request ran out of time.
func (r *request) backoff(n int, ae *attemptError) bool {
	rc := r.s.cfg.Retry
	d := rc.BackoffBase << (n - 1)
	if d > rc.BackoffMax || d <= 0 {
		d = rc.BackoffMax
	}
	d = time.Duration(rand.Int64N(int64(d) + 1))
	if ae.result.HasWait && ae.result.RetryAfter > d && ae.result.RetryAfter <= rc.BackoffMax {
		d = ae.result.RetryAfter
	}
	if !r.deadline.IsZero() && time.Until(r.deadline) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return !r.expired()
	case <-r.s.baseCtx.Done():
		return false
	case <-r.goneC():
		return false
	}
}
