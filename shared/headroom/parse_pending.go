package headroom

// A stand-in for the parser being written beside this change (parse.go
// replaces this file): OpenAI-style requests and tokens windows only.

import (
	"strconv"
	"time"
)

// DialectFor is the dialect a provider type speaks.
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

// Parse reads h in dialect d into r.
func Parse(d Dialect, h Header, now time.Time, r *Reading) bool {
	*r = Reading{}
	if d != DialectOpenAI {
		return false
	}
	for k, sfx := range [...]string{Requests: "requests", Tokens: "tokens"} {
		rem, err := strconv.ParseInt(string(h.Peek("x-ratelimit-remaining-"+sfx)), 10, 64)
		if err != nil {
			continue
		}
		lim, _ := strconv.ParseInt(string(h.Peek("x-ratelimit-limit-"+sfx)), 10, 64)
		w := Window{Limit: lim, Remaining: rem}
		if dur, err := time.ParseDuration(string(h.Peek("x-ratelimit-reset-" + sfx))); err == nil {
			w.Reset = now.Add(dur).UnixNano()
		}
		r.Windows[k] = w
		r.Has |= 1 << k
	}
	return r.Known()
}
