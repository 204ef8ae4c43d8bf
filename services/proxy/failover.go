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
	"switchyard.dev/services/proxy/internal/translate"
	"switchyard.dev/shared/failure"
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
			if translate.WrongType(err) {
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
				at := attempt{target: target{step: step, key: key}, body: body, probe: probe, forward: x.passthrough()}
				res := r.runAttempt(c, x, &at, p.soft, sel)
				if res.done {
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
				taken := act // what the proxy does now: out of same-target retries, it rotates
				if act == failure.RetrySame && !retrying {
					taken = failure.Rotate
				}
				r.attemptFailed(&at, ae, hold.Outcome{
					Result: ae.result, Status: ae.status, Retrying: retrying, Sent: at.sent,
					// Not the target's fault: the caller's deadline or hang-up, a
					// refusal of a secret rotated away since it was sent, or one
					// that says nothing sure of the key.
					Cancelled: r.expired() || key.Generation() != at.gen || unsure,
				}, taken)
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

// unsent gives back the probe lease the pick of key handed this request
// (probe) when the request stops before it sends the probe's attempt:
// kept, it would hold the hold from the whole fleet until it lapsed.
func (r *request) unsent(provider string, key *route.Key, model string, probe bool) {
	if probe {
		r.s.engine.Report(provider, key.HoldKey(), model, true, hold.Outcome{Cancelled: true, Unsent: true, RequestID: r.id})
	}
}

// expired reports whether the request ran out of time: its deadline
// passed, its caller went away or the proxy is shutting down.
func (r *request) expired() bool {
	return r.s.life.closing.Load() || r.caller.gone.Load() || (!r.deadline.IsZero() && !time.Now().Before(r.deadline))
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

// keyHash sets the request's key hash for p's weighted key selection
// (when p hashes its keys).
func (r *request) keyHash(c headers, p *route.Provider) {
	if p.HashOn != "" {
		r.sel.req.KeyHash, r.sel.req.KeyHashed = r.hashOf(c, p.HashOn)
	}
}
