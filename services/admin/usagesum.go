package admin

import (
	"cmp"
	"math"
	"slices"
	"time"

	"switchyard.dev/shared/usage"
)

// usageAnswer is the answer of GET /admin/usage.
type usageAnswer struct {
	// the query, resolved
	From     time.Time    `json:"from"`
	To       time.Time    `json:"to"`
	GroupBy  []string     `json:"group_by"`
	Interval string       `json:"interval"`
	Filters  usageFilters `json:"filters"`
	Limit    int          `json:"limit"`
	// Scanned records were read from the stream; Matched of them fell in
	// the range and the filters; Skipped could not be read (not JSON, or a
	// schema version this service does not know).
	Scanned int64 `json:"scanned"`
	Matched int64 `json:"matched"`
	Skipped int64 `json:"skipped"`
	// Truncated: the read stopped before the end of the range, because
	// MaxScanned records were read ("max_scanned") or the report ran out
	// of time ("deadline"): the sums cover part of the range.
	Truncated   bool   `json:"truncated"`
	TruncatedBy string `json:"truncated_by,omitempty"`
	MaxScanned  int    `json:"max_scanned"`
	// Totals sums every matched record; Groups one group per time bucket
	// and combination of the group_by values, sorted by bucket, then cost
	// (descending), then requests (descending).
	Totals usageGroup   `json:"totals"`
	Groups []usageGroup `json:"groups"`
	// GroupsOmitted were left out by limit.
	GroupsOmitted int `json:"groups_omitted"`
}

type usageFilters struct {
	Client   []string `json:"client,omitempty"`
	Provider []string `json:"provider,omitempty"`
	Model    []string `json:"model,omitempty"`
}

// usageGroup is what the records of one group sum to.
type usageGroup struct {
	// Bucket is the start of the group's time bucket (UTC), with an
	// interval only.
	Bucket *time.Time `json:"bucket,omitempty"`
	// Key holds the group's value of each group_by dimension ("" for a
	// record without one, such as the class of a success).
	Key      map[string]string `json:"key,omitempty"`
	Requests int64             `json:"requests"`
	// Errors are the requests answered with a status of 400 or more.
	Errors    int64       `json:"errors"`
	ErrorRate float64     `json:"error_rate"`
	Tokens    usageTokens `json:"tokens"`
	// CostUSD sums the known costs; null when no request of the group had
	// a known price. CostUnknownRequests had none (their cost is not in
	// CostUSD: it is unknown, not 0).
	CostUSD                 *float64 `json:"cost_usd"`
	CostUnknownRequests     int64    `json:"cost_unknown_requests"`
	TokensEstimatedRequests int64    `json:"tokens_estimated_requests"`
	// LatencyMS: exact percentiles (nearest rank) of every request's
	// latency; TTFTMS of the streams' time to first token, null without a
	// stream that had one.
	LatencyMS         usagePercentiles  `json:"latency_ms"`
	TTFTMS            *usagePercentiles `json:"ttft_ms"`
	Streams           int64             `json:"streams"`
	StreamsIncomplete int64             `json:"streams_incomplete"`
	Cancelled         int64             `json:"cancelled"`
}

type usageTokens struct {
	usage.Tokens
	Total int64 `json:"total"`
}

type usagePercentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
}

// usageSum sums records into groups.
type usageSum struct {
	q           usageQuery
	clients     map[string]bool
	providers   map[string]bool
	models      map[string]bool
	groups      map[usageKey]*usageAcc
	totals      usageAcc
	scanned     int64
	matched     int64
	skipped     int64
	truncatedBy string
	rec         usage.Record
}

// usageKey identifies a group: its bucket (Unix seconds) and its values
// of q.groupBy, in order.
type usageKey struct {
	bucket int64
	vals   [9]string
}

// usageAcc accumulates one group. Latencies are kept, as float32
// milliseconds, for exact percentiles: 4 bytes a record (8 for a stream
// with a first token), once in its group and once in the totals.
type usageAcc struct {
	key                                                           usageKey
	requests, errors, costUnknown, estimated, streams, incomplete int64
	cancelled                                                     int64
	tokens                                                        usage.Tokens
	cost                                                          float64
	latency, ttft                                                 []float32
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
		groups: map[usageKey]*usageAcc{}}
}

// add counts one record (the data of one stream message).
func (s *usageSum) add(data []byte) {
	s.scanned++
	r := &s.rec
	if decodeRecord(data, r) != nil || r.V != usage.SchemaVersion {
		s.skipped++
		return
	}
	if r.At.Before(s.q.from) || !r.At.Before(s.q.to) ||
		s.clients != nil && !s.clients[r.ClientID] ||
		s.providers != nil && !s.providers[r.Provider] ||
		s.models != nil && !s.models[r.Model] {
		return
	}
	s.matched++
	var k usageKey
	if s.q.interval > 0 {
		k.bucket = r.At.UTC().Truncate(s.q.interval).Unix()
	}
	for i, d := range s.q.groupBy {
		k.vals[i] = usageDims[d].of(r)
	}
	acc := s.groups[k]
	if acc == nil {
		acc = &usageAcc{key: k}
		s.groups[k] = acc
	}
	acc.add(r)
	s.totals.add(r)
}

func (a *usageAcc) add(r *usage.Record) {
	a.requests++
	if r.Status >= 400 {
		a.errors++
	}
	a.tokens.Input += r.Tokens.Input
	a.tokens.Output += r.Tokens.Output
	a.tokens.CachedInput += r.Tokens.CachedInput
	a.tokens.CacheWrite += r.Tokens.CacheWrite
	a.tokens.Reasoning += r.Tokens.Reasoning
	if r.CostUSD != nil {
		a.cost += *r.CostUSD
	} else {
		a.costUnknown++
	}
	if r.TokensEstimated {
		a.estimated++
	}
	if r.Stream {
		a.streams++
		if !r.StreamCompleted {
			a.incomplete++
		}
		if r.TTFTMS > 0 {
			a.ttft = append(a.ttft, float32(r.TTFTMS))
		}
	}
	if r.Cancelled {
		a.cancelled++
	}
	a.latency = append(a.latency, float32(r.LatencyMS))
}

// group is what the accumulator sums to.
func (a *usageAcc) group(q usageQuery, keyed bool) usageGroup {
	g := usageGroup{
		Requests:                a.requests,
		Errors:                  a.errors,
		Tokens:                  usageTokens{Tokens: a.tokens},
		CostUnknownRequests:     a.costUnknown,
		TokensEstimatedRequests: a.estimated,
		Streams:                 a.streams,
		StreamsIncomplete:       a.incomplete,
		Cancelled:               a.cancelled,
	}
	t := a.tokens
	g.Tokens.Total = t.Input + t.Output + t.CachedInput + t.CacheWrite + t.Reasoning
	if a.requests > 0 {
		g.ErrorRate = round(float64(a.errors)/float64(a.requests), 1e4)
	}
	if a.costUnknown < a.requests {
		c := round(a.cost, 1e9)
		g.CostUSD = &c
	}
	g.LatencyMS = percentiles(a.latency)
	if len(a.ttft) > 0 {
		p := percentiles(a.ttft)
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

// percentiles are the exact p50 and p95 (nearest rank) of vs, which they
// sort.
func percentiles(vs []float32) usagePercentiles {
	if len(vs) == 0 {
		return usagePercentiles{}
	}
	slices.Sort(vs)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(vs)))) - 1
		return round(float64(vs[max(i, 0)]), 100)
	}
	return usagePercentiles{P50: rank(0.50), P95: rank(0.95)}
}

func round(v, scale float64) float64 { return math.Round(v*scale) / scale }

// answer sorts the groups, applies the limit (per time bucket) and writes
// the answer.
func (s *usageSum) answer(maxScan int) *usageAnswer {
	q := s.q
	a := &usageAnswer{
		From: q.from.UTC(), To: q.to.UTC(), GroupBy: []string{}, Interval: q.intervalName,
		Filters: usageFilters{Client: q.clients, Provider: q.providers, Model: q.models},
		Limit:   q.limit, Scanned: s.scanned, Matched: s.matched, Skipped: s.skipped,
		Truncated: s.truncatedBy != "", TruncatedBy: s.truncatedBy, MaxScanned: maxScan,
		Totals: s.totals.group(q, false),
		Groups: []usageGroup{},
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
		if c := cmp.Compare(y.cost, x.cost); c != 0 {
			return c
		}
		if c := cmp.Compare(y.requests, x.requests); c != 0 {
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
