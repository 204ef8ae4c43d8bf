// Package debug is Switchyard's request debug bundles: what happened to one
// request (how its model resolved, the selection trace, every attempt with
// its class and the action taken, digests of the bodies, the outcome),
// written by the proxy that served it, asynchronously, to the
// SWITCHYARD_DEBUG stream, and read back by request id from any admin
// instance.
//
// A bundle never holds a body, prompt text, a provider credential, a
// gateway client key or a bearer token: bodies are SHA-256 digests (of the
// whole and of a bounded prefix, with the lengths), provider errors only
// their code, type and a masked message.
package debug

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// SchemaVersion is the version of the Bundle JSON.
const SchemaVersion = 1

// The stream and its subjects (public contracts, see the README):
// switchyard.debug.<outcome>.<provider>.<request id token>.
const (
	Stream   = "SWITCHYARD_DEBUG"
	Prefix   = "switchyard.debug"
	Subjects = Prefix + ".>"
	// DefaultRetention is how long the stream keeps a bundle
	// (debug.retention).
	DefaultRetention = 24 * time.Hour
	// DefaultMaxBytes bounds the stream's size (debug.max_bytes); the
	// oldest bundles go first.
	DefaultMaxBytes = 1 << 30
	// PrefixBytes is the length of the body prefix a digest covers.
	PrefixBytes = 1024
)

// Outcomes: the second token of a bundle's subject.
const (
	OutcomeOK       = "ok"       // 2xx, a stream that reached its terminal event
	OutcomeRejected = "rejected" // 4xx: the request itself (the gateway's or the provider's refusal)
	OutcomeFailed   = "failed"   // 5xx, a stream cut before its end, no target available
)

// OutcomeOf is the outcome of a final status (streamCut: a stream that
// ended before its terminal event).
func OutcomeOf(status int, streamCut bool) string {
	switch {
	case streamCut || status >= 500 || status == 0:
		return OutcomeFailed
	case status >= 400:
		return OutcomeRejected
	}
	return OutcomeOK
}

// Bundle is one request's debug bundle (JSON, schema v 1).
type Bundle struct {
	V         int       `json:"v"`
	RequestID string    `json:"request_id"`
	At        time.Time `json:"at"` // when the request arrived
	Instance  string    `json:"instance"`
	Endpoint  string    `json:"endpoint"`
	Stream    bool      `json:"stream"`
	// TraceParent is the caller's W3C traceparent, when it sent a valid
	// one: the trace the request's spans join when the proxy exports
	// traces. TraceState is its tracestate, for the exporter only: it is
	// the caller's free text, never stored.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"-"`
	// ModelLabel is the model as the proxy's metrics name it, for the
	// exporter's span names: a configured name, "<provider>/*" for an
	// unlisted model, ModelUnknown for one that resolved to nothing (a
	// caller's free text must not become a span name). Not stored.
	ModelLabel string `json:"-"`
	// TraceID is the request's trace: the caller's, or the one the proxy
	// started when it exports traces (absent when neither).
	TraceID string `json:"trace_id,omitempty"`

	// The caller: client key id (never its secret), plan, client type.
	Client     string `json:"client,omitempty"`
	Plan       string `json:"plan,omitempty"`
	ClientType string `json:"client_type,omitempty"`
	// Access is the gateway's decision on the caller: allowed, or the
	// error code it was refused with (invalid_api_key, model_not_allowed,
	// rate_limited, budget_exhausted, ...).
	Access string `json:"access"`
	// Limits is the plan's decision (admitted, refused, none) and what it
	// refused.
	Limits *LimitDecision `json:"limits,omitempty"`
	// Policy is the policy trace: the plan's rules the request was
	// checked against and what each decided, and the guardrails the
	// route, plan and client key attached, each with the level that set
	// its action.
	Policy *Policy `json:"policy,omitempty"`
	// Guardrails are the decisions of the request's guardrails, in the
	// order they ran: never the text they matched.
	Guardrails []GuardrailDecision `json:"guardrails,omitempty"`

	Model string `json:"model"` // as asked
	Route *Route `json:"route,omitempty"`

	Attempts []Attempt `json:"attempts"`

	Request  Digest  `json:"request"`
	Response *Digest `json:"response,omitempty"`

	Status          int      `json:"status"`
	Outcome         string   `json:"outcome"`
	ErrorCode       string   `json:"error_code,omitempty"`
	Class           string   `json:"class,omitempty"`
	LatencyMS       float64  `json:"latency_ms"`
	TTFTMS          float64  `json:"ttft_ms,omitempty"`
	StreamCompleted bool     `json:"stream_completed,omitempty"`
	Cancelled       bool     `json:"cancelled,omitempty"`
	Provider        string   `json:"provider,omitempty"` // what served it
	ServedModel     string   `json:"served_model,omitempty"`
	KeyID           string   `json:"key_id,omitempty"`
	Tokens          *Tokens  `json:"tokens,omitempty"`
	CostUSD         *float64 `json:"cost_usd,omitempty"`
	// Sampled says why the bundle was kept: failure, retried (served after
	// failed attempts), sampled (a share of successes), forced
	// (X-Switchyard-Debug).
	Sampled string `json:"sampled"`
}

// LimitDecision is a plan's decision on the request.
// Policy is a request's policy trace.
type Policy struct {
	// Plan is the client key's plan ("": none, no rule applies).
	Plan string `json:"plan,omitempty"`
	// Rules are the plan's limits in the order they were checked.
	Rules []PolicyRule `json:"rules,omitempty"`
	// Guardrails are the guardrails attached, in the order they run.
	Guardrails []PolicyGuardrail `json:"guardrails,omitempty"`
}

// PolicyRule is one of a plan's limits and its verdict on the request.
type PolicyRule struct {
	Rule    string  `json:"rule"`    // requests_per_minute, tokens_per_minute, concurrent_requests, budget.day ...
	Limit   float64 `json:"limit"`   // the plan's value
	Verdict string  `json:"verdict"` // passed, refused, not_checked (after the one that refused)
}

// PolicyGuardrail is one attached guardrail: its name, the action in
// force and the level that set it (route, plan or client: the most
// specific that named it).
type PolicyGuardrail struct {
	Guardrail string `json:"guardrail"`
	Action    string `json:"action"`
	From      string `json:"from"`
}

type LimitDecision struct {
	Decision string `json:"decision"` // admitted or refused
	Code     string `json:"code,omitempty"`
	Limit    string `json:"limit,omitempty"`
}

// GuardrailDecision is what one guardrail decided on the request: its
// action as attached (block, redact, warn), its verdict (pass, or the
// action taken), what it found (a pattern's name, limits.messages,
// tools.allow ...; never the matched text) and how long it took.
type GuardrailDecision struct {
	Guardrail string  `json:"guardrail"`
	Stage     string  `json:"stage"` // input or output
	Action    string  `json:"action"`
	Verdict   string  `json:"verdict"`
	Check     string  `json:"check,omitempty"`
	TookUS    float64 `json:"took_us"`
}

// Route is how the model resolved and the selection trace.
type Route struct {
	Name     string `json:"name"` // chain:<name>, provider/model or the plain name
	Kind     string `json:"kind"` // chain, model or plain
	Strategy string `json:"strategy"`
	// Needs, Region: what the request asked of a target.
	Needs          []string `json:"needs,omitempty"`
	Region         string   `json:"region,omitempty"`
	RegionRequired bool     `json:"region_required,omitempty"`
	// Steps are every step of the route: the order tried (Tried from 1),
	// or why not.
	Steps []Step `json:"steps"`
}

// Step is one step of a route in a bundle.
type Step struct {
	Step   int    `json:"step"`
	Target string `json:"target"`
	// Tried is the position in which the request tried the step (1 for
	// the first); 0: not tried.
	Tried int `json:"tried,omitempty"`
	// Reason is why the step was not a candidate (inactive, unhealthy,
	// lacks_capability, over_budget, ...; see the routing docs), or
	// "held" when every key it had left was held, "headroom" when every
	// key it had left was held or could not fit the request (headroom
	// routing).
	Reason string `json:"reason,omitempty"`
	// Held are the step's keys the hold engine kept the request from, with
	// the holds' ids.
	Held []HeldKey `json:"held,omitempty"`
	// Headroom are the step's keys skipped because what their provider
	// stated is left of a window could not fit the request.
	Headroom []HeadroomKey `json:"headroom,omitempty"`
}

// HeadroomKey is a key the request skipped for its headroom, until Reset
// (when its provider stated one).
type HeadroomKey struct {
	KeyID string    `json:"key_id"`
	Reset time.Time `json:"reset,omitzero"`
}

// HeldKey is a key the request skipped because it was held.
type HeldKey struct {
	KeyID  string `json:"key_id"`
	HoldID string `json:"hold_id,omitempty"`
	Class  string `json:"class,omitempty"`
}

// Attempt is one upstream attempt.
type Attempt struct {
	N           int     `json:"n"`
	Provider    string  `json:"provider"`
	Model       string  `json:"model"` // as sent upstream
	KeyID       string  `json:"key_id"`
	Fingerprint string  `json:"fingerprint,omitempty"`
	StartMS     float64 `json:"start_ms"` // offset from the request's arrival
	DurationMS  float64 `json:"duration_ms"`
	TTFTMS      float64 `json:"ttft_ms,omitempty"` // to the upstream's response headers
	Status      int     `json:"status,omitempty"`  // 0: no answer (a transport error)
	Class       string  `json:"class,omitempty"`
	// Error is the provider's error: code, type and a masked message
	// (never the body).
	Error *ProviderError `json:"error,omitempty"`
	// Action is what the proxy did next: served, retry_same, rotate,
	// return (to the caller), or stopped (out of attempts or time).
	Action    string  `json:"action"`
	BackoffMS float64 `json:"backoff_ms,omitempty"` // waited before the next attempt
	Probe     bool    `json:"probe,omitempty"`
	Soft      bool    `json:"soft,omitempty"` // an early probe of a soft hold (try_soft)
	// Stream: whether the attempt's stream reached its terminal event.
	StreamCompleted bool `json:"stream_completed,omitempty"`
	// SpanID is the attempt's span in the request's trace (the parent its
	// upstream was told), when the proxy exports traces.
	SpanID string `json:"span_id,omitempty"`
}

// ProviderError is what a bundle keeps of a provider's error.
type ProviderError struct {
	Code    string `json:"code,omitempty"`
	Type    string `json:"type,omitempty"`
	Message string `json:"message,omitempty"` // masked, bounded
}

// Tokens are the request's tokens (from metering).
type Tokens struct {
	Input       int64 `json:"input"`
	Output      int64 `json:"output"`
	CachedInput int64 `json:"cached_input,omitempty"`
	CacheWrite  int64 `json:"cache_write,omitempty"`
	Reasoning   int64 `json:"reasoning,omitempty"`
	Estimated   bool  `json:"estimated,omitempty"`
}

// Digest identifies a body without holding it: its length and SHA-256,
// and the SHA-256 of its first PrefixBytes (equal bodies have equal
// digests; a caller can check a body it kept).
type Digest struct {
	Bytes        int    `json:"bytes"`
	SHA256       string `json:"sha256"`
	PrefixBytes  int    `json:"prefix_bytes"`
	PrefixSHA256 string `json:"prefix_sha256"`
}

// DigestOf is the digest of b.
func DigestOf(b []byte) Digest {
	n := min(len(b), PrefixBytes)
	whole, prefix := sha256.Sum256(b), sha256.Sum256(b[:n])
	return Digest{Bytes: len(b), SHA256: hex.EncodeToString(whole[:]), PrefixBytes: n, PrefixSHA256: hex.EncodeToString(prefix[:])}
}

// ModelUnknown is the model label (Bundle.ModelLabel, the proxy's metrics)
// of a request whose model resolved to nothing.
const ModelUnknown = "unknown"
