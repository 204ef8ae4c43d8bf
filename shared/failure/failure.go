// Package failure classifies a failed upstream attempt: from the provider's
// own error code and type first, message patterns next, the HTTP status last.
package failure

import (
	"net/http"
	"time"
)

// Class is what a failure says about its target.
type Class uint8

// The classes, in the order of the architecture table.
const (
	Unrecognised Class = iota
	Transient
	RateLimit
	CredentialRejected
	QuotaExhausted
	ModelNotAccessible
	ModelRetired
	RegionBlocked
	RequestRejected
)

var classNames = [...]string{
	Unrecognised:       "unrecognised",
	Transient:          "transient",
	RateLimit:          "rate_limit",
	CredentialRejected: "credential_rejected",
	QuotaExhausted:     "quota_exhausted",
	ModelNotAccessible: "model_not_accessible",
	ModelRetired:       "model_retired",
	RegionBlocked:      "region_blocked",
	RequestRejected:    "request_rejected",
}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "unrecognised"
}

// Scope is what a hold for a failure covers.
type Scope uint8

// The scopes.
const (
	ScopeNone Scope = iota
	ScopeKey
	ScopeKeyModel
	ScopeProvider
	ScopeProviderModel
)

var scopeNames = [...]string{
	ScopeNone:          "none",
	ScopeKey:           "key",
	ScopeKeyModel:      "key+model",
	ScopeProvider:      "provider",
	ScopeProviderModel: "provider+model",
}

func (s Scope) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return "none"
}

// Input is one failed attempt as the gateway saw it.
type Input struct {
	// Provider is the provider type (openai, azure, anthropic, gemini, ...).
	Provider string
	// Status is the HTTP status, 0 when the attempt failed in transport.
	Status int
	Header http.Header
	// Body is the response body (JSON or text), or the data of an error
	// event when Stream is true.
	Body []byte
	// Stream is true when the error arrived as a stream event.
	Stream bool
	// Err is the transport error, if any.
	Err error
}

// Result is the classification of one failure.
type Result struct {
	Class Class
	Scope Scope
	// RetryAfter is the wait the provider stated; valid when HasWait.
	RetryAfter time.Duration
	HasWait    bool
	// Code is the provider's own error code or type ("insufficient_quota").
	Code string
	// Reason is a short human explanation.
	Reason string
}
