// Package gwerror is the catalogue of the errors the gateway itself
// answers with: each code, the HTTP status it comes with, and whether a
// caller may send the same request again later. Every answer of the proxy
// that is its own (not a provider's error relayed) takes its status from
// here; the proxy's README lists the same table (a test holds them equal).
//
// The codes are a public contract: SDKs and operators' scripts match on
// them. The plan limits' codes are the limiter's (shared/planlimit), listed
// here so that one table has every code.
package gwerror

import (
	"slices"

	"switchyard.dev/shared/planlimit"
)

// The gateway's error codes. Untyped: they are the codes callers see in
// the error bodies, and the strings failure.Result.Code and the usage
// records carry.
const (
	InvalidJSON         = "invalid_json"
	DuplicateKey        = "duplicate_key"
	InvalidRequest      = "invalid_request"
	MissingModel        = "missing_model"
	UnsupportedForKind  = "unsupported_operation"
	Unsupported         = "unsupported_translation"
	NoMatchingTarget    = "no_matching_target"
	GuardrailBlocked    = "guardrail_blocked"
	InvalidAPIKey       = "invalid_api_key"
	ModelNotAllowed     = "model_not_allowed"
	ModelNotFound       = "model_not_found"
	ProviderNotFound    = "provider_not_found"
	NotFound            = "not_found"
	RequestTooLarge     = "request_too_large"
	UnsupportedEncoding = "unsupported_content_encoding"
	// RateLimited: a plan's per-minute limits refused the request, or
	// every attempt ended rate limited by its provider.
	RateLimited        = string(planlimit.RateLimited)
	ConcurrencyLimited = string(planlimit.ConcurrencyLimited)
	BudgetExhausted    = string(planlimit.BudgetExhausted)
	BudgetInsufficient = string(planlimit.BudgetInsufficient)
	Overloaded         = "gateway_overloaded"
	CircuitOpen        = "circuit_open"
	NoTarget           = "no_available_target"
	ProviderError      = "provider_error"
	AllFailed          = "all_providers_failed"
	StreamIncomplete   = "stream_incomplete"
	GatewayError       = "gateway_error"
)

// Entry is one code of the catalogue.
type Entry struct {
	Code string
	// Status is the HTTP status the code is answered with; Also the other
	// statuses it may come with (provider_error is 504 when the deadline
	// passed before any attempt; not_found is 405 for a known path with
	// another method; invalid_request is any 4xx the HTTP server refused a
	// request with before a handler ran).
	Status int
	Also   []int
	// InStream: the code ends a stream that had begun (its answer's status
	// is the stream's 200; the error event carries Status).
	InStream bool
	// Retryable: the same request may succeed later unchanged (a caller's
	// SDK backs off and retries it); false: it must change, or the gateway
	// has spent its own attempts already (X-Should-Retry says which).
	Retryable bool
}

// catalogue is every code, in the order of the proxy's README table.
var catalogue = []Entry{
	{Code: InvalidJSON, Status: 400},
	{Code: MissingModel, Status: 400},
	{Code: InvalidRequest, Status: 400, Also: []int{anyClientError}},
	{Code: Unsupported, Status: 400},
	{Code: UnsupportedForKind, Status: 400},
	{Code: NoMatchingTarget, Status: 400},
	{Code: GuardrailBlocked, Status: 400},
	{Code: DuplicateKey, Status: 400},
	{Code: InvalidAPIKey, Status: 401},
	{Code: ModelNotAllowed, Status: 403},
	{Code: ModelNotFound, Status: 404},
	{Code: ProviderNotFound, Status: 404},
	{Code: NotFound, Status: 404, Also: []int{405}},
	{Code: RequestTooLarge, Status: 413},
	{Code: UnsupportedEncoding, Status: 415},
	{Code: RateLimited, Status: 429, Retryable: true},
	{Code: ConcurrencyLimited, Status: 429, Retryable: true},
	{Code: BudgetExhausted, Status: 429}, // admitted again when its period resets, hours away
	{Code: BudgetInsufficient, Status: 429},
	{Code: Overloaded, Status: 503, Retryable: true},
	{Code: CircuitOpen, Status: 503, Retryable: true},
	{Code: NoTarget, Status: 503, Retryable: true},
	{Code: ProviderError, Status: 502, Also: []int{504}, Retryable: true},
	{Code: AllFailed, Status: 502, Retryable: true},
	{Code: StreamIncomplete, Status: 502, InStream: true, Retryable: true},
	{Code: GatewayError, Status: 500, Retryable: true},
}

// anyClientError in Entry.Also stands for any 4xx status.
const anyClientError = 0

// Catalogue returns every entry (a copy).
func Catalogue() []Entry { return slices.Clone(catalogue) }

// index finds an entry by code.
var index = func() map[string]*Entry {
	m := make(map[string]*Entry, len(catalogue))
	for i := range catalogue {
		m[catalogue[i].Code] = &catalogue[i]
	}
	return m
}()

// Lookup returns the entry of a code.
func Lookup(code string) (Entry, bool) {
	e, ok := index[code]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Allows reports whether status is one a code may come with: its Status
// or one of Also.
func (e Entry) Allows(status int) bool {
	if status == e.Status {
		return true
	}
	for _, s := range e.Also {
		if s == status || (s == anyClientError && status >= 400 && status < 500) {
			return true
		}
	}
	return false
}
