package proxy

// The answer of a request no target served (exhaustion), and the retry
// headers that tell a caller's SDK when, and whether, to come back.

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/internal/route"
)

// exhausted answers a request no target served.
func (r *request) exhausted(c *fiber.Ctx, rte *route.Route, p *pass) outcome {
	switch {
	case r.tally.attempts == 0 && p.unsupported != nil && !p.denied:
		// Only untranslatable targets: the request must change. With a
		// held target beside them, it is served once the hold ends (503).
		return outcome{err: sendError(c, r.ep.format, gwerror.Unsupported, p.unsupported.Error())}
	case r.tally.attempts == 0 && r.expired():
		return outcome{err: sendErrorStatus(c, r.ep.format, fiber.StatusGatewayTimeout, gwerror.ProviderError, "the request's deadline passed before any attempt")}
	case r.tally.attempts == 0 && r.sel.room.Skipped > 0:
		return outcome{err: r.noRoom(c)}
	case r.tally.attempts == 0 && !p.denied && r.rejectedFor(rte, unsupportedReasons):
		return outcome{err: r.refuse(c, gwerror.UnsupportedForKind,
			fmt.Sprintf("no provider of `%s` serves %s (the gateway does not translate it)", r.model, r.ep.path))}
	case r.tally.attempts == 0 && !p.denied && r.rejectedFor(rte, unfitReasons):
		msg := fmt.Sprintf("no target of `%s` can serve this request: %s", r.model, r.rejections(rte))
		r.logger().Warn("no target fits the request", "model", r.model, "rejected", r.rejections(rte))
		return outcome{err: sendError(c, r.ep.format, gwerror.NoMatchingTarget, msg)}
	case r.tally.attempts == 0:
		msg := fmt.Sprintf("no provider target of `%s` is available", r.model)
		if p.denied {
			msg = fmt.Sprintf("every target of `%s` is held out of rotation", r.model)
		}
		if why := r.rejections(rte); why != "" {
			msg += "; rejected: " + why
			r.logger().Warn("no target available", "model", r.model, "rejected", why)
		}
		if p.unsupported != nil {
			msg += "; not translatable for the others: " + p.unsupported.Error()
		}
		retry := r.s.retryAfter(rte.Steps)
		r.s.setRetryAfter(c, retry)
		if open := r.s.openBreakers(rte.Steps); p.denied && open != "" {
			return outcome{err: sendError(c, r.ep.format, gwerror.CircuitOpen, circuitOpenMessage(open, retry))}
		}
		return outcome{err: sendError(c, r.ep.format, gwerror.NoTarget, msg)}
	}
	c.Set(headerAttempts, strconv.Itoa(r.tally.attempts))
	if !p.failed && r.tally.last != nil {
		// Every key refused the caller's unlisted model (a typo, a model
		// the account lacks): the provider's answer says so.
		return outcome{err: r.returnUpstreamError(c, r.tally.last.t, r.tally.last)}
	}
	if r.tally.rateLimited == r.tally.attempts {
		// The providers said slow down: the caller's SDK backs off on a
		// 429 (it raises on a 502), until the soonest key comes back.
		retry := r.s.retryAfter(rte.Steps)
		r.s.setRetryAfter(c, retry)
		msg := fmt.Sprintf("the provider rate limited `%s`; retry after %d s", r.model, retry)
		if r.tally.attempts > 1 {
			msg = fmt.Sprintf("all %d attempts for `%s` were rate limited by their providers; retry after %d s", r.tally.attempts, r.model, retry)
		}
		if r.tally.last != nil {
			msg += "; last: " + r.tally.last.summary()
		}
		return outcome{err: sendError(c, r.ep.format, gwerror.RateLimited, msg)}
	}
	if r.tally.attempts > 1 {
		// The gateway retried already: an SDK retrying on top would
		// multiply the upstream calls.
		c.Set(headerShouldRetry, "false")
	}
	code := gwerror.AllFailed
	msg := fmt.Sprintf("all %d attempts for `%s` failed", r.tally.attempts, r.model)
	if p.candidates == 1 {
		code = gwerror.ProviderError
		msg = fmt.Sprintf("the provider failed for `%s`", r.model)
	}
	if r.tally.last != nil {
		msg += "; last: " + r.tally.last.summary()
	}
	r.logger().Error("request failed", "model", r.model, "attempts", r.tally.attempts, "code", code)
	return outcome{err: sendError(c, r.ep.format, code, msg)}
}

// headerShouldRetry tells the OpenAI and Anthropic SDKs whether to retry
// (they read it before their own rules).
const headerShouldRetry = "X-Should-Retry"

// setRetryAfter sets Retry-After to retry seconds, and X-Should-Retry:
// false when that is longer than proxy.retry_after_bound: an SDK would
// sleep the whole wait before its retry.
func (s *Service) setRetryAfter(c *fiber.Ctx, retry int) {
	c.Set(fiber.HeaderRetryAfter, strconv.Itoa(retry))
	if time.Duration(retry)*time.Second > s.cfg.Proxy.RetryAfterBound {
		c.Set(headerShouldRetry, "false")
	}
}

// retryAfter is the Retry-After (whole seconds, 1 to 3600) of a 503 when
// no target could be tried: the soonest any held target of the steps
// falls due (a probe or the ramp lets requests through from then on).
func (s *Service) retryAfter(steps []route.Step) int {
	const lo, hi = 1, 3600
	var soonest time.Time
	for i := range steps {
		st := &steps[i]
		if !st.Usable() {
			continue
		}
		for _, k := range st.Provider.Keys {
			if u, ok := s.engine.HeldUntil(st.Provider.Name, k.HoldKey(), st.Model); ok && (soonest.IsZero() || u.Before(soonest)) {
				soonest = u
			}
		}
	}
	if soonest.IsZero() {
		return lo
	}
	secs := int(math.Ceil(time.Until(soonest).Seconds()))
	return min(max(secs, lo), hi)
}
