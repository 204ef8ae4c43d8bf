package failure

import (
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// maxWait bounds a stated wait; anything longer is treated as garbage.
const maxWait = 31 * 24 * time.Hour

// statedWait finds the wait the provider stated, in order of precedence:
// retry-after-ms, Retry-After, a google.rpc RetryInfo, a hint in the
// message, then (for rate limits only, since they arrive on every response)
// the x-ratelimit-reset-* and anthropic-ratelimit-*-reset headers and
// OpenRouter's X-RateLimit-Reset metadata.
func statedWait(h http.Header, sig *signal, class Class, now time.Time) (time.Duration, bool) {
	if d, ok := retryAfterMS(h.Get("Retry-After-Ms")); ok {
		return d, true
	}
	if d, ok := RetryAfter(h.Get("Retry-After"), now); ok {
		return d, true
	}
	for _, l := range sig.layers() {
		if l.hasDelay {
			return l.retryDelay, true
		}
	}
	for _, l := range sig.layers() {
		if d, ok := WaitHint(l.message); ok {
			return d, true
		}
	}
	if class != RateLimit {
		return 0, false
	}
	if d, ok := openAIReset(h); ok {
		return d, true
	}
	if d, ok := anthropicReset(h, now); ok {
		return d, true
	}
	for _, l := range sig.layers() {
		if l.resetMS > 0 {
			if d := time.UnixMilli(l.resetMS).Sub(now); d > 0 && d <= maxWait {
				return d, true
			}
		}
	}
	return 0, false
}

// RetryAfter parses a Retry-After header value: delay-seconds or an
// HTTP-date, relative to now. A date in the past yields no wait.
func RetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if sec, err := strconv.ParseFloat(v, 64); err == nil {
		return secondsToDuration(sec)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d <= 0 || d > maxWait {
		return 0, false
	}
	return d, true
}

func retryAfterMS(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, false
	}
	return secondsToDuration(ms / 1000)
}

// ResetDuration parses an x-ratelimit-reset-* value: OpenAI's Go-style
// duration ("1s", "6m0s", "20ms", "2m59.56s") or plain seconds ("60").
func ResetDuration(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if sec, err := strconv.ParseFloat(v, 64); err == nil {
		return secondsToDuration(sec)
	}
	return parseGoDuration(v)
}

// openAIReset reads x-ratelimit-reset-requests/-tokens: the reset of the
// exhausted dimension (remaining 0), else the longer of the two.
func openAIReset(h http.Header) (time.Duration, bool) {
	return pickReset(h, []string{"requests", "tokens"}, func(dim string) (time.Duration, bool) {
		return ResetDuration(h.Get("X-Ratelimit-Reset-" + dim))
	}, "X-Ratelimit-Remaining-")
}

// anthropicReset reads anthropic-ratelimit-*-reset (RFC 3339 instants).
func anthropicReset(h http.Header, now time.Time) (time.Duration, bool) {
	return pickReset(h, []string{"requests", "tokens", "input-tokens", "output-tokens"}, func(dim string) (time.Duration, bool) {
		v := strings.TrimSpace(h.Get("Anthropic-Ratelimit-" + dim + "-Reset"))
		if v == "" {
			return 0, false
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return 0, false
		}
		d := t.Sub(now)
		if d <= 0 || d > maxWait {
			return 0, false
		}
		return d, true
	}, "Anthropic-Ratelimit-")
}

func pickReset(h http.Header, dims []string, reset func(string) (time.Duration, bool), remainingPrefix string) (time.Duration, bool) {
	var exhausted, longest time.Duration
	var anyExhausted, anyReset bool
	for _, dim := range dims {
		d, ok := reset(dim)
		if !ok {
			continue
		}
		anyReset = true
		longest = max(longest, d)
		rem := remainingPrefix + dim
		if remainingPrefix == "Anthropic-Ratelimit-" {
			rem += "-Remaining"
		}
		if strings.TrimSpace(h.Get(rem)) == "0" {
			anyExhausted = true
			exhausted = max(exhausted, d)
		}
	}
	switch {
	case anyExhausted:
		return exhausted, true
	case anyReset:
		return longest, true
	}
	return 0, false
}

// hintRE finds "try again in 20s", "Please retry in 6.17s", "retry after 45
// seconds", "try again in 1m30s", "try again in 250ms".
const hintUnits = `(?:milliseconds?|millis|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)`

var hintRE = regexp.MustCompile(`(?i)(?:try again|retry)(?: later)?\s+(?:in|after)\s+(?:about\s+|approximately\s+)?((?:\d+(?:\.\d+)?\s*` + hintUnits + `\s*(?:and\s+)?)*\d+(?:\.\d+)?\s*` + hintUnits + `\b)`)

var hintPartRE = regexp.MustCompile(`(?i)(\d+(?:\.\d+)?)\s*(` + hintUnits[3:len(hintUnits)-1] + `)`)

// WaitHint finds a wait stated in an error message.
func WaitHint(msg string) (time.Duration, bool) {
	m := hintRE.FindStringSubmatch(msg)
	if m == nil {
		return 0, false
	}
	var sec float64
	for _, p := range hintPartRE.FindAllStringSubmatch(m[1], -1) {
		n, err := strconv.ParseFloat(p[1], 64)
		if err != nil {
			return 0, false
		}
		switch u := strings.ToLower(p[2]); {
		case u == "ms" || strings.HasPrefix(u, "milli"):
			sec += n / 1000
		case u == "m" || strings.HasPrefix(u, "min"):
			sec += n * 60
		case u == "h" || strings.HasPrefix(u, "h"):
			sec += n * 3600
		default:
			sec += n
		}
	}
	return secondsToDuration(sec)
}

// parseGoDuration parses "17s", "0.5s", "6m0s"; negative or huge values are
// rejected.
func parseGoDuration(v string) (time.Duration, bool) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 || d > maxWait {
		return 0, false
	}
	return d, true
}

func secondsToDuration(sec float64) (time.Duration, bool) {
	if math.IsNaN(sec) || sec < 0 || sec > maxWait.Seconds() {
		return 0, false
	}
	return time.Duration(sec * float64(time.Second)).Round(time.Millisecond), true
}
