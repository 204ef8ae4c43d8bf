// Package headroom reads what a provider says is left of a key's rate
// limits (the x-ratelimit-*, anthropic-ratelimit-* and X-RateLimit-*
// headers every answer carries) and keeps it per key and per key+model, so
// that a proxy skips a key whose window cannot fit a request before the
// provider would answer 429. Readings are shared with the fleet on core
// NATS (Report, on switchyard.headroom.<provider>); between answers a proxy
// subtracts what its own requests in flight will take.
package headroom

import "time"

// Kind is what a window counts.
type Kind uint8

// The kinds of window providers state.
const (
	Requests     Kind = iota // requests per window
	Tokens                   // tokens (input and output) per window
	InputTokens              // Anthropic's input-tokens
	OutputTokens             // Anthropic's output-tokens
	NumKinds
)

var kindNames = [NumKinds]string{"requests", "tokens", "input_tokens", "output_tokens"}

// String is the kind's name in reports, metrics and explanations.
func (k Kind) String() string {
	if k >= NumKinds {
		return "unknown"
	}
	return kindNames[k]
}

// ParseKind reads a kind's name (false: not a kind).
func ParseKind(s string) (Kind, bool) {
	for i, n := range kindNames {
		if n == s {
			return Kind(i), true
		}
	}
	return 0, false
}

// Window is one stated limit: its size, what is left of it and when it is
// whole again (unix nanoseconds; 0: not stated).
type Window struct {
	Limit     int64
	Remaining int64
	Reset     int64
}

// Reading is what one answer's headers say. Has has bit 1<<Kind set for
// every window the headers state (a window is stated when its remaining
// count is).
type Reading struct {
	Windows [NumKinds]Window
	Has     uint8
	// RetryAfter is a wait the answer stated (retry-after-ms, retry-after);
	// zero: none.
	RetryAfter time.Duration
}

// Known reports whether the reading states anything.
func (r *Reading) Known() bool { return r.Has != 0 || r.RetryAfter > 0 }

// Stated reports whether the reading states window k.
func (r *Reading) Stated(k Kind) bool { return r.Has&(1<<k) != 0 }

// Dialect is the header family a provider type speaks.
type Dialect uint8

// The dialects.
const (
	DialectNone       Dialect = iota // states nothing we read
	DialectOpenAI                    // x-ratelimit-{limit,remaining,reset}-{requests,tokens}, reset as durations (OpenAI, Azure, Groq, compatible servers)
	DialectAnthropic                 // anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}, reset RFC 3339
	DialectOpenRouter                // X-RateLimit-{Limit,Remaining,Reset}, reset in epoch milliseconds (requests)
)

// Header is what Parse reads headers through: *fasthttp.ResponseHeader
// implements it (Peek is case-insensitive there), as does PeekHeader for
// net/http.
type Header interface {
	Peek(key string) []byte
}
