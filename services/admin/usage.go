package admin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/usage"
	"switchyard.dev/shared/usage/rollup"
)

// GET /admin/usage sums the usage records (one per request, published by
// the proxies on SWITCHYARD_USAGE) over a time range by the dimensions
// asked for. It answers from the rollups the recorder keeps
// (recorder.go, switchyard_usage_rollups): the coarsest buckets that tile
// the range (days in the middle, hours and minutes at the edges, finer
// than the interval never), and reads the raw stream only after the
// recorder's checkpoint, for the records not folded yet.

// Bounds of one usage report.
const (
	// DefaultUsageMaxScan is how many records one report reads at most
	// (Deps.UsageMaxScan overrides it); beyond it the answer says
	// "truncated": true.
	DefaultUsageMaxScan = 2_000_000
	// usageTimeout bounds one report; when it passes the answer is what
	// was read so far, "truncated": true.
	usageTimeout = 30 * time.Second
	// usageConcurrent reports run at once; others wait (within
	// usageTimeout) for one to end.
	usageConcurrent = 4
	// A record counts by its own time (at, when its request ended, on its
	// proxy's clock), while the consumer starts and stops by the time the
	// stream stored it, normally a moment later. usageStartSlack starts the
	// read earlier, for proxy clocks ahead of the server's;
	// usageStopSlack ends it later, for records a proxy kept in its queue
	// while NATS was away (metering.buffer) and published late.
	usageStartSlack = time.Minute
	usageStopSlack  = 10 * time.Minute
	// usageMaxBuckets caps the time buckets a range may span.
	usageMaxBuckets = 10_000
	// usageMaxSubjects caps the filter subjects of one consumer; larger
	// client x provider filters are applied to the records read instead.
	usageMaxSubjects = 64
	// usageDefaultRange is the range when from is not given.
	usageDefaultRange = 24 * time.Hour
)

// usageDim is one dimension records can be grouped by (rollup.Dims.Dim
// reads it).
type usageDim struct{ name string }

// usageDims are the group_by dimensions, in the order the API lists them.
// Key ids are unique within a provider only: the key dimension is
// <provider>/<key id>, the provider alone when it has no keys, "" when no
// attempt was made.
var usageDims = []usageDim{
	{"client"}, {"plan"}, {"client_type"}, {"provider"}, {"model"}, {"key"}, {"endpoint"}, {"status"}, {"class"},
}

func usageDimNames() string {
	names := make([]string, len(usageDims))
	for i, d := range usageDims {
		names[i] = d.name
	}
	return strings.Join(names, ", ")
}

var usageIntervals = map[string]time.Duration{"minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}

// usageQuery is a parsed GET /admin/usage.
type usageQuery struct {
	from, to     time.Time
	groupBy      []int // indexes into usageDims
	interval     time.Duration
	intervalName string // "none" when interval is 0
	clients      []string
	providers    []string
	models       []string
	limit        int      // groups per time bucket; 0: all
	subjects     []string // the consumer's filter subjects
}

// paramError is a bad query parameter; its message starts with the
// parameter's name.
type paramError struct{ param, msg string }

func (e *paramError) Error() string { return e.param + ": " + e.msg }

func badParam(param, format string, args ...any) error {
	return &paramError{param: param, msg: fmt.Sprintf(format, args...)}
}

// checkParams is a paramError for a parameter of args not in known.
func checkParams(args map[string]string, known []string) error {
	for k := range args {
		if !slices.Contains(known, k) {
			return badParam(k, "unknown parameter (want %s)", strings.Join(known, ", "))
		}
	}
	return nil
}

var usageParams = []string{"from", "to", "group_by", "interval", "client", "provider", "model", "limit"}

// parseUsageQuery reads the query parameters (repeated ones joined by
// commas) against now.
func parseUsageQuery(args map[string]string, now time.Time) (usageQuery, error) {
	var q usageQuery
	if err := checkParams(args, usageParams); err != nil {
		return q, err
	}
	var err error
	// the rollups' finest buckets are minutes: to is rounded up to the
	// next minute, from down (and further, to the hour or day, where only
	// those are kept: planTiles)
	q.to = now
	if v := args["to"]; v != "" {
		if q.to, err = parseUsageTime(v, now); err != nil {
			return q, badParam("to", "%v", err)
		}
	}
	q.to = ceilMinute(q.to)
	q.from = q.to.Add(-usageDefaultRange)
	if v := args["from"]; v != "" {
		if q.from, err = parseUsageTime(v, now); err != nil {
			return q, badParam("from", "%v", err)
		}
		q.from = q.from.UTC().Truncate(time.Minute)
	}
	if !q.from.Before(q.to) {
		return q, badParam("from", "must be before to (from %s, to %s)", q.from.Format(time.RFC3339), q.to.Format(time.RFC3339))
	}

	for _, name := range splitItems(args["group_by"]) {
		i := slices.IndexFunc(usageDims, func(d usageDim) bool { return d.name == name })
		if i < 0 {
			return q, badParam("group_by", "unknown dimension %q (want any of %s)", name, usageDimNames())
		}
		if slices.Contains(q.groupBy, i) {
			return q, badParam("group_by", "%q given twice", name)
		}
		q.groupBy = append(q.groupBy, i)
	}

	q.intervalName = "none"
	if v := args["interval"]; v != "" && v != "none" {
		d, ok := usageIntervals[v]
		if !ok {
			return q, badParam("interval", "want minute, hour, day or none, got %q", v)
		}
		if n := q.to.Sub(q.from)/d + 1; n > usageMaxBuckets {
			return q, badParam("interval", "%s buckets over %s make %d, at most %d: use a longer interval or a shorter range",
				v, q.to.Sub(q.from), n, usageMaxBuckets)
		}
		q.interval, q.intervalName = d, v
	}

	if v := args["limit"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return q, badParam("limit", "want a positive number of groups, got %q", v)
		}
		q.limit = n
	}

	q.clients = splitList(args["client"])
	q.providers = splitList(args["provider"])
	q.models = splitList(args["model"])
	// By client only: a record's subject names the provider that served
	// it, and a record served elsewhere may hold failed attempts of a
	// provider filtered for (usageSum.decode reads them).
	q.subjects = usageSubjects(nil, q.clients)
	return q, nil
}

func ceilMinute(t time.Time) time.Time {
	f := t.UTC().Truncate(time.Minute)
	if f.Before(t) {
		f = f.Add(time.Minute)
	}
	return f
}

// parseUsageTime reads an RFC 3339 time, "now", or a time relative to now:
// a negative duration such as -24h, -90m or -7d (d is 24 hours).
func parseUsageTime(v string, now time.Time) (time.Time, error) {
	if v == "now" {
		return now, nil
	}
	if rel, ok := strings.CutPrefix(v, "-"); ok {
		d, err := parseDays(rel)
		if err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("want an RFC 3339 time, now, or a time before now such as -24h, -90m or -7d, got %q", v)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("want an RFC 3339 time, now, or a time before now such as -24h, -90m or -7d, got %q", v)
	}
	return t, nil
}

// parseDays is time.ParseDuration with a leading whole number of days
// allowed: "7d", "1d12h".
func parseDays(s string) (time.Duration, error) {
	days, rest, ok := strings.Cut(s, "d")
	if !ok {
		return time.ParseDuration(s)
	}
	n, err := strconv.Atoi(days)
	if err != nil || n < 0 || n > 3660 {
		return 0, fmt.Errorf("bad day count %q", days)
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil {
			return 0, err
		}
		d += r
	}
	return d, nil
}

// usageSubjects are the filter subjects for provider and client filters
// (usage.Subject: switchyard.usage.<provider>.<client>). A filter whose
// subjects would be too many is left to the records read.
func usageSubjects(providers, clients []string) []string {
	tokens := func(names []string) []string {
		if len(names) == 0 {
			return []string{"*"}
		}
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = usageToken(n)
		}
		return out
	}
	ps, cs := tokens(providers), tokens(clients)
	if len(ps)*len(cs) > usageMaxSubjects {
		cs = []string{"*"}
		if len(ps) > usageMaxSubjects {
			ps = []string{"*"}
		}
	}
	if len(ps) == 1 && ps[0] == "*" && len(cs) == 1 && cs[0] == "*" {
		return []string{bus.UsageSubjects}
	}
	var out []string
	for _, p := range ps {
		for _, c := range cs {
			out = append(out, usage.SubjectPrefix+"."+p+"."+c)
		}
	}
	return out
}

// usageToken is the subject token usage.Subject writes for a provider name
// (or, the same encoding, a client id).
func usageToken(name string) string {
	s := strings.TrimPrefix(usage.Subject(name, ""), usage.SubjectPrefix+".")
	return strings.TrimSuffix(s, "._")
}

// usageReader bounds the reports: records read, time, reports at once.
type usageReader struct {
	maxScan int
	timeout time.Duration
	slots   chan struct{}
}

func newUsageReader(maxScan int) usageReader {
	if maxScan <= 0 {
		maxScan = DefaultUsageMaxScan
	}
	return usageReader{maxScan: maxScan, timeout: usageTimeout, slots: make(chan struct{}, usageConcurrent)}
}

// usageReport: GET /admin/usage?from=&to=&group_by=&interval=&client=&provider=&model=&limit=
func (s *Service) usageReport(c *fiber.Ctx) error {
	args := map[string]string{}
	c.Context().QueryArgs().VisitAll(func(k, v []byte) {
		key := string(k)
		if prev, ok := args[key]; ok && prev != "" {
			args[key] = prev + "," + string(v)
			return
		}
		args[key] = string(v)
	})
	q, err := parseUsageQuery(args, time.Now())
	if err != nil {
		return apiError(c, fiber.StatusBadRequest, codeBadRequest, err.Error())
	}
	res := s.member.Resources()
	if !s.natsUp() || res == nil || res.Usage == nil || res.UsageRollups == nil {
		return natsDown(c)
	}
	// fasthttp does not tell a handler that its caller hung up: a report
	// ends at its bounds, or when the service stops
	ctx, cancel := context.WithTimeout(c.UserContext(), s.usage.timeout)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	select {
	case s.usage.slots <- struct{}{}:
		defer func() { <-s.usage.slots }()
	case <-ctx.Done():
		return apiError(c, fiber.StatusServiceUnavailable, codeBusy, "too many usage reports are running: try again shortly")
	}
	st := rollup.NewStore(nil, res.UsageRollups, s.rollupRes)
	st.Cache = s.rollupCache
	rep, err := s.usage.read(ctx, res.Usage, st, q)
	if err != nil {
		return s.jetStreamFailed(c, err, "usage query", natsDown)
	}
	return c.JSON(rep)
}

// warmRollups reads a 30-day report once the buckets are bound, so that
// the values it decodes are in the rollup cache before an operator's
// first report (which then takes tens of milliseconds, not hundreds).
func (s *Service) warmRollups(ctx context.Context) {
	select {
	case <-s.member.Bound():
	case <-ctx.Done():
		return
	}
	res := s.member.Resources()
	if res == nil || res.Usage == nil || res.UsageRollups == nil {
		return
	}
	q, err := parseUsageQuery(map[string]string{"from": "-30d"}, time.Now())
	if err != nil {
		return
	}
	st := rollup.NewStore(nil, res.UsageRollups, s.rollupRes)
	st.Cache = s.rollupCache
	ctx, cancel := context.WithTimeout(ctx, s.usage.timeout)
	defer cancel()
	start := time.Now()
	if _, err := s.usage.read(ctx, res.Usage, st, q); err != nil {
		s.log.Debug("admin: usage rollups not warmed", "err", err)
		return
	}
	s.log.Debug("admin: usage rollups warmed", "values", s.rollupCache.Len(), "took", time.Since(start))
}
