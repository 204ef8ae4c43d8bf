package failure

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
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

// ErrUnknownClass is returned by ParseClass for a name that is not a class.
var ErrUnknownClass = errors.New("unknown failure class")

// ParseClass returns the class named s ("rate_limit", "quota_exhausted", ...).
// Matching ignores case and surrounding space; "-" is accepted for "_".
func ParseClass(s string) (Class, error) {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	if n == "unrecognized" {
		return Unrecognised, nil
	}
	for c, name := range classNames {
		if name == n {
			return Class(c), nil
		}
	}
	return Unrecognised, fmt.Errorf("%w %q (want one of %s)", ErrUnknownClass, s, strings.Join(classNames[:], ", "))
}

// MarshalText encodes the class as its name, so JSON carries "rate_limit".
func (c Class) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText decodes a class name.
func (c *Class) UnmarshalText(b []byte) error {
	v, err := ParseClass(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// DefaultScope is the hold scope a class implies: Meaning().Scope.
func (c Class) DefaultScope() Scope { return c.Meaning().Scope }

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

// ErrUnknownScope is returned by ParseScope for a name that is not a scope.
var ErrUnknownScope = errors.New("unknown hold scope")

// ParseScope returns the scope named s ("key", "key+model", ...).
func ParseScope(s string) (Scope, error) {
	n := strings.ToLower(strings.TrimSpace(s))
	for sc, name := range scopeNames {
		if name == n {
			return Scope(sc), nil
		}
	}
	return ScopeNone, fmt.Errorf("%w %q (want one of %s)", ErrUnknownScope, s, strings.Join(scopeNames[:], ", "))
}

// MarshalText encodes the scope as its name, so JSON carries "key+model".
func (s Scope) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a scope name.
func (s *Scope) UnmarshalText(b []byte) error {
	v, err := ParseScope(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
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
	// Rule is the name of the operator trip_on rule that decided the class,
	// empty when the built-in classifier decided.
	Rule string
	// HoldTTL is the hold duration the matching rule asks for; zero means
	// "use the class's ladder".
	HoldTTL time.Duration
	// KeyDependent: a request_rejected refusal that another key of the
	// provider may not give (Gemini's "permission to access the File ...
	// or it may not exist": the file may be another project's, which
	// another key reads). The request rotates to the next key; nothing is
	// held, and when every key refused, the answer is the caller's.
	KeyDependent bool
}
