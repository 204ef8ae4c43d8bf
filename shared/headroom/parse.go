package headroom

import (
	"net/http"
	"time"
	"unsafe"
)

// DialectFor is the dialect a provider type speaks: Anthropic's and
// OpenRouter's their own, Gemini none (it states no windows in headers),
// every other type (OpenAI, Azure, Groq and the OpenAI-compatible
// servers) OpenAI's.
func DialectFor(providerType string) Dialect {
	switch providerType {
	case "anthropic":
		return DialectAnthropic
	case "openrouter":
		return DialectOpenRouter
	case "gemini":
		return DialectNone
	}
	return DialectOpenAI
}

// PerModel reports whether the dialect's windows are a model's on the key
// (OpenAI's, Azure's per deployment, Anthropic's per model class) rather
// than the key's over all its models (OpenRouter's).
func (d Dialect) PerModel() bool { return d == DialectOpenAI || d == DialectAnthropic }

// Bounds past which a stated value is taken for garbage.
const (
	// maxRetryAfter is the longest wait a retry-after header may state.
	maxRetryAfter = 24 * time.Hour
	// maxAhead is the furthest ahead a reset may lie (OpenAI's daily
	// windows reset within a day; a week leaves room for any other).
	maxAhead = 7 * 24 * time.Hour
)

// Header names, canonical (net/http's form: fasthttp's Peek normalizes
// to the same, and compares case-insensitively in effect), so that
// PeekHeader finds them without canonicalizing.
const (
	hdrRetryAfter   = "Retry-After"
	hdrRetryAfterMs = "Retry-After-Ms"
)

// windowHeaders are the names of one window's headers ("": not sent).
type windowHeaders struct{ limit, remaining, reset string }

// dialectSpec is how one dialect states its windows: the headers of
// each kind, and how to read a reset (unix nanoseconds; 0: not stated).
type dialectSpec struct {
	windows [NumKinds]windowHeaders
	reset   func(b []byte, now int64) int64
}

var dialects = [...]dialectSpec{
	DialectOpenAI: {
		windows: [NumKinds]windowHeaders{
			Requests: {"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
			Tokens:   {"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
		},
		reset: resetAfter,
	},
	DialectAnthropic: {
		windows: [NumKinds]windowHeaders{
			Requests:     {"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
			Tokens:       {"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
			InputTokens:  {"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
			OutputTokens: {"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
		},
		reset: resetAt,
	},
	DialectOpenRouter: {
		windows: [NumKinds]windowHeaders{
			Requests: {"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"},
		},
		reset: resetAtMillis,
	},
}

// Parse reads what headers h of an answer in dialect d state of the
// key's windows and of a wait (retry-after-ms, retry-after: read in every
// dialect, DialectNone too) into r, which it zeroes first; now is when
// the answer arrived. A window is stated when its remaining count is; its
// limit is 0 when not stated, its reset 0 when not stated or unreadable.
// Negative, malformed and absurd values (a reset over a week ahead, a
// wait over maxRetryAfter) are ignored. It reports r.Known(). Parse does
// not allocate (given a Header whose Peek does not).
func Parse(d Dialect, h Header, now time.Time, r *Reading) bool {
	*r = Reading{}
	if h == nil {
		return false
	}
	at := now.UnixNano()
	if int(d) < len(dialects) && dialects[d].reset != nil {
		spec := &dialects[d]
		for k := range spec.windows {
			names := &spec.windows[k]
			if names.remaining == "" {
				continue
			}
			rem, ok := parseCount(h.Peek(names.remaining))
			if !ok {
				continue
			}
			w := &r.Windows[k]
			w.Remaining = rem
			w.Limit, _ = parseCount(h.Peek(names.limit))
			w.Reset = spec.reset(trim(h.Peek(names.reset)), at)
			r.Has |= 1 << k
		}
	}
	r.RetryAfter = retryAfter(h, at)
	return r.Known()
}

// retryAfter is the wait h states: retry-after-ms (milliseconds, maybe
// fractional) if readable, else retry-after (seconds, maybe fractional,
// or an HTTP date); 0 when none is readable and within maxRetryAfter.
func retryAfter(h Header, now int64) time.Duration {
	if d, ok := parseNumber(trim(h.Peek(hdrRetryAfterMs)), int64(time.Millisecond)); ok && d <= maxRetryAfter {
		return d
	}
	b := trim(h.Peek(hdrRetryAfter))
	if d, ok := parseNumber(b, int64(time.Second)); ok {
		if d > maxRetryAfter {
			return 0
		}
		return d
	}
	if sec, ok := parseHTTPDate(b); ok {
		until, ok := unixNanos(sec, 0, now, maxRetryAfter)
		if ok && until > now {
			return time.Duration(until - now)
		}
	}
	return 0
}

// resetAfter reads an OpenAI reset: a duration from now ("6m0s",
// "2m59.56s", "20ms"; a bare number is seconds).
func resetAfter(b []byte, now int64) int64 {
	d, ok := parseDuration(b)
	if !ok {
		return 0
	}
	return now + int64(d)
}

// resetAt reads an Anthropic reset: an RFC 3339 time.
func resetAt(b []byte, now int64) int64 {
	sec, nsec, ok := parseRFC3339(b)
	if !ok {
		return 0
	}
	t, _ := unixNanos(sec, nsec, now, maxAhead)
	return t
}

// resetAtMillis reads an OpenRouter reset: unix milliseconds.
func resetAtMillis(b []byte, now int64) int64 {
	ms, ok := parseCount(b)
	if !ok {
		return 0
	}
	t, _ := unixNanos(ms/1000, (ms%1000)*int64(time.Millisecond), now, maxAhead)
	return t
}

// unixNanos is sec seconds and nsec nanoseconds past the epoch in unix
// nanoseconds, if after the epoch and at most ahead past now (0 and false
// otherwise: checked before the sum can overflow).
func unixNanos(sec, nsec, now int64, ahead time.Duration) (int64, bool) {
	if sec < 0 || sec > (now+int64(ahead))/int64(time.Second) {
		return 0, false
	}
	t := sec*int64(time.Second) + nsec
	if t <= 0 || t > now+int64(ahead) {
		return 0, false
	}
	return t, true
}

// PeekHeader lets Parse read a net/http header. Its Peek canonicalizes
// the key as http.Header.Get does (no allocation for a canonical key,
// which is all Parse asks for) and returns the first value without a
// copy: the bytes are the header's string's and must not be modified.
type PeekHeader http.Header

// Peek is key's first value (nil: none).
func (h PeekHeader) Peek(key string) []byte {
	v := http.Header(h).Get(key)
	if v == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(v), len(v))
}

var _ Header = PeekHeader(nil)
