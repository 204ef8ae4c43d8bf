package admin

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/usage"
	"switchyard.dev/shared/usage/rollup"
)

// usageSum sums records and rollup cells into groups.
type usageSum struct {
	q           usageQuery
	clients     map[string]bool
	providers   map[string]bool
	models      map[string]bool
	groups      map[usageKey]*usageAcc
	totals      usageAcc
	rolledUp    int64
	scanned     int64
	matched     int64
	skipped     int64
	unread      int64
	coveredFrom time.Time
	truncatedBy string
	rec         usage.Record
}

// usageKey identifies a group: its bucket (Unix seconds) and its values
// of q.groupBy, in order.
type usageKey struct {
	bucket int64
	vals   [9]string
}

// usageAcc accumulates one group.
type usageAcc struct {
	key usageKey
	rollup.Sums
}

func newUsageSum(q usageQuery) *usageSum {
	set := func(names []string) map[string]bool {
		if len(names) == 0 {
			return nil
		}
		m := make(map[string]bool, len(names))
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	return &usageSum{q: q, clients: set(q.clients), providers: set(q.providers), models: set(q.models),
		groups: map[usageKey]*usageAcc{}, coveredFrom: q.from}
}

// wants reports whether a record or cell of these dimensions passes the
// filters.
func (s *usageSum) wants(d *rollup.Dims) bool {
	return !(s.clients != nil && !s.clients[d.Client] ||
		s.providers != nil && !s.providers[d.Provider] ||
		s.models != nil && !s.models[d.Model])
}

// acc returns the group of d at time t.
func (s *usageSum) acc(d *rollup.Dims, t time.Time) *usageAcc {
	var k usageKey
	if s.q.interval > 0 {
		k.bucket = t.UTC().Truncate(s.q.interval).Unix()
	}
	for i, di := range s.q.groupBy {
		k.vals[i] = d.Dim(usageDims[di].name)
	}
	acc := s.groups[k]
	if acc == nil {
		acc = &usageAcc{key: k}
		s.groups[k] = acc
	}
	return acc
}

// addCell counts a rollup cell of the bucket starting at start.
func (s *usageSum) addCell(c *rollup.Cell, start time.Time) {
	if !s.wants(&c.Dims) {
		return
	}
	s.rolledUp += c.Requests
	s.matched += c.Requests
	s.acc(&c.Dims, start).Merge(&c.Sums)
	s.totals.Merge(&c.Sums)
}

// decode reads one record (the data of one line of a stream message)
// into s.rec and counts it as scanned; false when it is not a readable
// record of the range and the filters.
func (s *usageSum) decode(data []byte) bool {
	s.scanned++
	r := &s.rec
	if decodeRecord(data, r) != nil || r.V != usage.SchemaVersion {
		s.skipped++
		return false
	}
	if r.At.Before(s.q.from) || !r.At.Before(s.q.to) {
		return false
	}
	d := rollup.DimsOf(r)
	if s.wants(&d) {
		return true
	}
	for i := range r.FailedAttempts {
		if d := rollup.DimsOfFailed(r, &r.FailedAttempts[i]); s.wants(&d) {
			return true
		}
	}
	return false
}

// add counts s.rec, read by decode: the request in the group of its
// dimensions, each failed attempt in the group of its target, as the
// recorder folds them (rollup.Folder.Add), each where the filters let it.
func (s *usageSum) add() {
	r := &s.rec
	if d := rollup.DimsOf(r); s.wants(&d) {
		s.matched++
		s.acc(&d, r.At).Add(r)
		s.totals.Add(r)
	}
	for i := range r.FailedAttempts {
		a := &r.FailedAttempts[i]
		if d := rollup.DimsOfFailed(r, a); s.wants(&d) {
			s.acc(&d, r.At).AddFailed(a)
			s.totals.AddFailed(a)
		}
	}
}

// group is what the accumulator sums to.
func (a *usageAcc) group(q usageQuery, keyed bool) adminapi.UsageGroup {
	g := adminapi.UsageGroup{
		Requests:                a.Requests,
		Errors:                  a.Errors,
		Tokens:                  adminapi.UsageTokens{Tokens: a.Tokens},
		CostUnknownRequests:     a.CostUnknown,
		TokensEstimatedRequests: a.TokensEstimated,
		Streams:                 a.Streams,
		StreamsIncomplete:       a.StreamsIncomplete,
		Cancelled:               a.Cancelled,
		Attempts:                a.Attempts,
		FailedAttempts:          a.FailedAttempts,
		CacheHits:               a.CacheHits,
		CacheSavedUSD:           round(a.CacheSavedUSD, 1e9),
	}
	t := a.Tokens
	g.Tokens.Total = t.Input + t.Output + t.CachedInput + t.CacheWrite + t.Reasoning
	if a.Requests > 0 {
		g.ErrorRate = round(float64(a.Errors)/float64(a.Requests), 1e4)
		g.CacheHitRate = round(float64(a.CacheHits)/float64(a.Requests), 1e4)
	}
	if a.CostUnknown < a.Requests {
		c := round(a.CostUSD, 1e9)
		g.CostUSD = &c
	}
	g.LatencyMS = percentiles(a.Latency)
	if a.TTFT != nil && !a.TTFT.IsEmpty() {
		p := percentiles(a.TTFT)
		g.TTFTMS = &p
	}
	if !keyed {
		return g
	}
	if q.interval > 0 {
		b := time.Unix(a.key.bucket, 0).UTC()
		g.Bucket = &b
	}
	g.Key = make(map[string]string, len(q.groupBy))
	for i, d := range q.groupBy {
		g.Key[usageDims[d].name] = a.key.vals[i]
	}
	return g
}

// percentiles are p50, p95 and p99 of a sketch (within its relative
// accuracy, 1 %), rounded to 0.01 ms.
func percentiles(sk *ddsketch.DDSketch) adminapi.Percentiles {
	v := rollup.Quantiles(sk, 0.50, 0.95, 0.99)
	return adminapi.Percentiles{P50: round(v[0], 100), P95: round(v[1], 100), P99: round(v[2], 100)}
}

func round(v, scale float64) float64 { return math.Round(v*scale) / scale }

// answer sorts the groups, applies the limit (per time bucket) and writes
// the answer.
func (s *usageSum) answer(maxScan int) *adminapi.UsageReport {
	q := s.q
	by := s.truncatedBy
	switch {
	case by != "":
	case s.unread > 0:
		by = "lost"
	case s.coveredFrom.After(q.from):
		by = "coverage"
	}
	a := &adminapi.UsageReport{
		From: q.from.UTC(), To: q.to.UTC(), GroupBy: []string{}, Interval: q.intervalName,
		Filters: adminapi.UsageFilters{Client: q.clients, Provider: q.providers, Model: q.models},
		Limit:   q.limit, CoveredFrom: s.coveredFrom.UTC(),
		RolledUp: s.rolledUp, Scanned: s.scanned, Matched: s.matched, Skipped: s.skipped, UnreadMessages: s.unread,
		Truncated: by != "", TruncatedBy: by, MaxScanned: maxScan,
		Totals: s.totals.group(q, false),
		Groups: []adminapi.UsageGroup{},
	}
	for _, d := range q.groupBy {
		a.GroupBy = append(a.GroupBy, usageDims[d].name)
	}
	accs := make([]*usageAcc, 0, len(s.groups))
	for _, acc := range s.groups {
		accs = append(accs, acc)
	}
	slices.SortFunc(accs, func(x, y *usageAcc) int {
		if c := cmp.Compare(x.key.bucket, y.key.bucket); c != 0 {
			return c
		}
		if c := cmp.Compare(y.CostUSD, x.CostUSD); c != 0 {
			return c
		}
		if c := cmp.Compare(y.Requests, x.Requests); c != 0 {
			return c
		}
		return slices.Compare(x.key.vals[:], y.key.vals[:])
	})
	inBucket := 0
	for i, acc := range accs {
		if i == 0 || acc.key.bucket != accs[i-1].key.bucket {
			inBucket = 0
		}
		inBucket++
		if q.limit > 0 && inBucket > q.limit {
			a.GroupsOmitted++
			continue
		}
		a.Groups = append(a.Groups, acc.group(q, true))
	}
	return a
}
