package admin

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/debug"
)

// Request debug bundles: GET /admin/requests/{id} reads one request's
// bundle from the SWITCHYARD_DEBUG stream (written by the proxy that
// served it), GET /admin/requests lists the newest bundles, filtered by
// outcome and provider on the server. Nothing is kept between requests:
// the stream is the only store.

// requestsTimeout bounds one list (a read of the stream from since).
const requestsTimeout = 15 * time.Second

// defaultRequestsLimit is the bundles a list returns without limit=.
const defaultRequestsLimit = 50

// providerParamRE is a provider name as the bundle subjects carry it; "_"
// (bundles of requests no provider served) is accepted too.
var providerParamRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

var requestsParams = []string{"outcome", "status", "provider", "since", "limit"}

var requestOutcomes = []string{debug.OutcomeFailed, debug.OutcomeRejected, debug.OutcomeOK}

// requestsQuery is a parsed GET /admin/requests.
type requestsQuery struct {
	filter debug.Filter
}

// parseRequestsQuery reads outcome= (or its alias status=), provider=,
// since= (a duration back from now, 15m or -15m, or an RFC 3339 time) and
// limit= (1..debug.MaxList) against now.
func parseRequestsQuery(args map[string]string, now time.Time) (requestsQuery, error) {
	var q requestsQuery
	if err := checkParams(args, requestsParams); err != nil {
		return q, err
	}
	outcome, param := args["outcome"], "outcome"
	if st := args["status"]; st != "" {
		if outcome != "" && outcome != st {
			return q, badParam("status", "is an alias of outcome: %q and %q disagree", st, outcome)
		}
		outcome, param = st, "status"
	}
	if outcome != "" && outcome != "all" && !slices.Contains(requestOutcomes, outcome) {
		return q, badParam(param, "unknown outcome %q (want %s or all)", outcome, strings.Join(requestOutcomes, ", "))
	}
	if outcome != "all" {
		q.filter.Outcome = outcome
	}
	if p := args["provider"]; p != "" {
		if p != "_" && !providerParamRE.MatchString(p) {
			return q, badParam("provider", "bad provider name %q (want a name matching ^[a-z0-9][a-z0-9_-]*$, or _ for requests no provider served)", p)
		}
		q.filter.Provider = p
	}
	q.filter.Since = now.Add(-time.Hour)
	if v := args["since"]; v != "" {
		t, err := parseSince(v, now)
		if err != nil {
			return q, badParam("since", "%v", err)
		}
		q.filter.Since = t
	}
	q.filter.Limit = defaultRequestsLimit
	if v := args["limit"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > debug.MaxList {
			return q, badParam("limit", "want a whole number from 1 to %d, got %q", debug.MaxList, v)
		}
		q.filter.Limit = n
	}
	return q, nil
}

// parseSince reads a duration back from now (15m, -15m, 2h) or an RFC
// 3339 time (not in the future).
func parseSince(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(strings.TrimPrefix(v, "-")); err == nil {
		if d <= 0 {
			return time.Time{}, errors.New("want a duration greater than 0 (15m, 2h) or an RFC 3339 time, got " + strconv.Quote(v))
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, errors.New("want a duration back from now (15m, 2h) or an RFC 3339 time, got " + strconv.Quote(v))
	}
	if t.After(now) {
		return time.Time{}, errors.New(v + " is in the future")
	}
	return t, nil
}

// listRequests: GET /admin/requests?outcome=&provider=&since=&limit=
func (s *Service) listRequests(c *fiber.Ctx) error {
	args := map[string]string{}
	c.Context().QueryArgs().VisitAll(func(k, v []byte) { args[string(k)] = string(v) })
	q, err := parseRequestsQuery(args, time.Now())
	if err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	res := s.member.Resources()
	if !s.natsUp() || res == nil || res.Debug == nil {
		return debugDown(c)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), requestsTimeout)
	defer cancel()
	list, err := debug.List(ctx, res.Debug, q.filter)
	if err != nil {
		return s.jetStreamFailed(c, err, "listing", debugDown)
	}
	return c.JSON(adminapi.RequestList{Requests: list, Since: q.filter.Since.UTC(), Limit: q.filter.Limit})
}

// getRequest: GET /admin/requests/{id}: the request's bundle as the
// proxy stored it. The id is path-escaped; any string is an id.
func (s *Service) getRequest(c *fiber.Ctx) error {
	id := pathParam(c, "id")
	res := s.member.Resources()
	if !s.natsUp() || res == nil || res.Debug == nil {
		return debugDown(c)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), opTimeout)
	defer cancel()
	b, err := debug.Get(ctx, res.Debug, id)
	if errors.Is(err, debug.ErrNotFound) {
		return apiError(c, fiber.StatusNotFound, codeNotFound, "no debug bundle for request "+strconv.Quote(id)+
			": the proxy keeps one for every failure and a sampled share of successes (send X-Switchyard-Debug: true to keep one),"+
			" for debug.retention ("+s.cfg.Debug.Retention.String()+"); this request may have been unsampled, be older than that, or its id may be wrong")
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if errors.As(err, &se) || errors.As(err, &te) {
		s.log.Warn("admin: unreadable debug bundle", "request_id", id, "err", err)
		return apiError(c, fiber.StatusInternalServerError, codeInternal, "the debug bundle of request "+strconv.Quote(id)+" is not readable: "+err.Error())
	}
	if err != nil {
		s.log.Warn("admin: read debug bundle", "request_id", id, "err", err)
		return debugDown(c)
	}
	return c.JSON(b)
}

func debugDown(c *fiber.Ctx) error {
	return apiError(c, fiber.StatusServiceUnavailable, codeNATSUnavailable,
		"NATS or the "+debug.Stream+" stream is unavailable: try again when the admin service is ready (/readyz)")
}
