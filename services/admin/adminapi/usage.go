package adminapi

import (
	"time"

	"switchyard.dev/shared/usage"
)

// The usage report (GET /admin/usage).

// UsageReport is the answer of GET /admin/usage.
type UsageReport struct {
	// the query, resolved
	From     time.Time    `json:"from"`
	To       time.Time    `json:"to"`
	GroupBy  []string     `json:"group_by"`
	Interval string       `json:"interval"`
	Filters  UsageFilters `json:"filters"`
	Limit    int          `json:"limit"`
	// CoveredFrom is the earliest time the answer's data covers: From,
	// or later when the records before it are gone (rollups past their
	// retention, or records the stream discarded before the recorder read
	// them).
	CoveredFrom time.Time `json:"covered_from"`
	// RolledUp records were counted from the rollups; Scanned records were
	// read from the stream (those the recorder had not folded yet);
	// Matched records (of both) fell in the range and the filters; Skipped
	// could not be read (not JSON, or a schema version this service does
	// not know).
	RolledUp int64 `json:"rolled_up"`
	Scanned  int64 `json:"scanned"`
	Matched  int64 `json:"matched"`
	Skipped  int64 `json:"skipped"`
	// UnreadMessages are stream messages (one or more records each) that
	// may fall in the range and that the answer could not read: discarded
	// by the stream before the recorder read them, or left when the read
	// stopped.
	UnreadMessages int64 `json:"unread_messages"`
	// Truncated: the sums cover part of the range, because MaxScanned
	// records were read ("max_scanned"), the report ran out of time
	// ("deadline"), messages were lost before the recorder read them
	// ("lost") or the start of the range is past every retention
	// ("coverage": the data starts at CoveredFrom).
	Truncated   bool   `json:"truncated"`
	TruncatedBy string `json:"truncated_by,omitempty"`
	MaxScanned  int    `json:"max_scanned"`
	// Totals sums every matched record; Groups one group per time bucket
	// and combination of the group_by values, sorted by bucket, then cost
	// (descending), then requests (descending).
	Totals UsageGroup   `json:"totals"`
	Groups []UsageGroup `json:"groups"`
	// GroupsOmitted were left out by limit.
	GroupsOmitted int `json:"groups_omitted"`
}

// UsageFilters are the report's filters, resolved.
type UsageFilters struct {
	Client   []string `json:"client,omitempty"`
	Provider []string `json:"provider,omitempty"`
	Model    []string `json:"model,omitempty"`
}

// UsageGroup is what the records of one group sum to.
type UsageGroup struct {
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
	Tokens    UsageTokens `json:"tokens"`
	// CostUSD sums the known costs; null when no request of the group had
	// a known price. CostUnknownRequests had none (their cost is not in
	// CostUSD: it is unknown, not 0).
	CostUSD                 *float64 `json:"cost_usd"`
	CostUnknownRequests     int64    `json:"cost_unknown_requests"`
	TokensEstimatedRequests int64    `json:"tokens_estimated_requests"`
	// LatencyMS: percentiles of every request's latency, read from the
	// merged DDSketches of the rollups (within 1 % of the exact value);
	// TTFTMS of the streams' time to first token, null without a stream
	// that had one.
	LatencyMS         Percentiles  `json:"latency_ms"`
	TTFTMS            *Percentiles `json:"ttft_ms"`
	Streams           int64        `json:"streams"`
	StreamsIncomplete int64        `json:"streams_incomplete"`
	Cancelled         int64        `json:"cancelled"`
	// Attempts are the upstream attempts made on the group's targets, and
	// FailedAttempts those of them that failed (not the cancelled ones):
	// an attempt counts under the provider, key, model and class of its
	// own target, so a failover's failed attempts show under the key that
	// failed, not the one that answered. Groups with no request of their
	// own (every attempt failed there, the requests were served
	// elsewhere) have requests 0.
	Attempts       int64 `json:"attempts"`
	FailedAttempts int64 `json:"failed_attempts"`
	// CacheHits are the requests answered from the response cache
	// (CacheHitRate of Requests) and CacheSavedUSD what they saved: the
	// costs of the answers they replayed.
	CacheHits     int64   `json:"cache_hits"`
	CacheHitRate  float64 `json:"cache_hit_rate"`
	CacheSavedUSD float64 `json:"cache_saved_usd"`
}

// UsageTokens are a group's token counts, with their total.
type UsageTokens struct {
	usage.Tokens
	Total int64 `json:"total"`
}

// Percentiles are latency percentiles in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}
