package fakeprovider

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"
)

// DefaultRateLimitWindow is the window of a RateLimit that sets none.
const DefaultRateLimitWindow = time.Minute

// RateLimit configures the rate limiter. It counts the calls of each key
// (with PerModel, of each key and model) in fixed windows: a window opens
// at the first call after the previous one ended and lasts Window. A call
// that would take a window past Requests calls or Tokens tokens is refused
// with the flavour's 429. The zero value limits nothing (the limiter is
// off).
type RateLimit struct {
	// Requests is the calls a window admits (0: not limited).
	Requests int64 `json:"requests,omitempty" yaml:"requests,omitempty"`
	// Tokens is the tokens a window admits (0: not limited); a call counts
	// the input and output tokens of its usage (see README.md).
	Tokens int64 `json:"tokens,omitempty" yaml:"tokens,omitempty"`
	// Window is how long a window lasts (DefaultRateLimitWindow when 0).
	Window time.Duration `json:"window,omitempty" yaml:"window,omitempty"`
	// PerModel counts each key and model apart instead of each key.
	PerModel bool `json:"per_model,omitempty" yaml:"per_model,omitempty"`
}

// Enabled reports whether the limit limits anything.
func (l RateLimit) Enabled() bool { return l.Requests > 0 || l.Tokens > 0 }

// Validate reports the first bad field, naming its key.
func (l RateLimit) Validate() error {
	switch {
	case l.Requests < 0:
		return fmt.Errorf("requests: must not be negative, got %d", l.Requests)
	case l.Tokens < 0:
		return fmt.Errorf("tokens: must not be negative, got %d", l.Tokens)
	case l.Window < 0:
		return fmt.Errorf("window: must not be negative, got %s", l.Window)
	}
	return nil
}

func (l RateLimit) window() time.Duration {
	if l.Window <= 0 {
		return DefaultRateLimitWindow
	}
	return l.Window
}

// rateLimitJSON is RateLimit with the window as a string.
type rateLimitJSON struct {
	Requests int64    `json:"requests,omitempty"`
	Tokens   int64    `json:"tokens,omitempty"`
	Window   Duration `json:"window,omitempty"`
	PerModel bool     `json:"per_model,omitempty"`
}

// MarshalJSON writes the limit with snake_case keys and the window as a
// string.
func (l RateLimit) MarshalJSON() ([]byte, error) {
	return json.Marshal(rateLimitJSON{Requests: l.Requests, Tokens: l.Tokens, Window: Duration(l.Window), PerModel: l.PerModel})
}

// UnmarshalJSON reads a limit; unknown keys are an error.
func (l *RateLimit) UnmarshalJSON(b []byte) error {
	var j rateLimitJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("decode rate limit: %w", err)
	}
	*l = RateLimit{Requests: j.Requests, Tokens: j.Tokens, Window: time.Duration(j.Window), PerModel: j.PerModel}
	return nil
}

// Clock is the rate limiter's time source; tests pass one they move by
// hand.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// RateLimitStat is what the rate limiter counted for one key (with
// PerModel, one key and model) since the limit was set.
type RateLimitStat struct {
	Key   string `json:"key"`
	Model string `json:"model,omitempty"` // with PerModel only
	// Admitted and Limited count the calls let through and refused (429).
	Admitted int `json:"admitted"`
	Limited  int `json:"limited"`
	// Requests and Tokens are what the current window has counted; Reset
	// is when it ends (zero, with both counts 0, when no window is open).
	Requests int64     `json:"requests"`
	Tokens   int64     `json:"tokens"`
	Reset    time.Time `json:"reset,omitzero"`
}

// refusal is why the limiter refused a call.
type refusal uint8

const (
	notRefused      refusal = iota
	refusedRequests         // the window has no call left
	refusedTokens           // the window has too few tokens left
	refusedTooLarge         // the call alone needs more tokens than a window holds
)

// limitVerdict is what the limiter decided for one call: what its answer
// states (after counting the call when it was let through) and, for a
// refused call, why and how long until its window resets.
type limitVerdict struct {
	limit        RateLimit
	requestsUsed int64 // what the window has counted, this call included when let through
	tokensUsed   int64
	requestsLeft int64
	tokensLeft   int64
	tokens       int64 // what the call needs
	reset        time.Time
	refused      refusal
	retryAfter   time.Duration
}

type limitScope struct{ key, model string }

// limitWindow is one scope's current window and its counts.
type limitWindow struct {
	reset             time.Time // end of the window; zero: none opened yet
	requests, tokens  int64
	admitted, limited int
}

// limiter keeps the fixed windows of every key (or key and model).
type limiter struct {
	clock Clock

	mu      sync.Mutex
	limit   RateLimit
	windows map[limitScope]*limitWindow
}

func newLimiter(clock Clock, l RateLimit) *limiter {
	return &limiter{clock: clock, limit: l, windows: make(map[limitScope]*limitWindow)}
}

// set replaces the limit and forgets every window and count.
func (l *limiter) set(limit RateLimit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.limit = limit
	l.windows = make(map[limitScope]*limitWindow)
}

func (l *limiter) get() RateLimit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// admit counts a call of key and model that needs tokens; false when no
// limit is set.
func (l *limiter) admit(key, model string, tokens int64) (limitVerdict, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.limit
	if !lim.Enabled() {
		return limitVerdict{}, false
	}
	now := l.clock.Now()
	sc := limitScope{key: key}
	if lim.PerModel {
		sc.model = model
	}
	w := l.windows[sc]
	if w == nil {
		w = &limitWindow{}
		l.windows[sc] = w
	}
	if !now.Before(w.reset) {
		w.reset, w.requests, w.tokens = now.Add(lim.window()), 0, 0
	}
	v := limitVerdict{limit: lim, reset: w.reset, tokens: tokens}
	switch {
	case lim.Tokens > 0 && tokens > lim.Tokens:
		v.refused = refusedTooLarge
	case lim.Requests > 0 && w.requests >= lim.Requests:
		v.refused = refusedRequests
	case lim.Tokens > 0 && w.tokens+tokens > lim.Tokens:
		v.refused = refusedTokens
	default:
		w.requests++
		w.tokens += tokens
		w.admitted++
	}
	if v.refused != notRefused {
		w.limited++
		v.retryAfter = w.reset.Sub(now)
	}
	v.requestsUsed, v.tokensUsed = w.requests, w.tokens
	v.requestsLeft = max(lim.Requests-w.requests, 0)
	v.tokensLeft = max(lim.Tokens-w.tokens, 0)
	return v, true
}

func (l *limiter) stats() []RateLimitStat {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	out := make([]RateLimitStat, 0, len(l.windows))
	for sc, w := range l.windows {
		st := RateLimitStat{Key: sc.key, Model: sc.model, Admitted: w.admitted, Limited: w.limited}
		if now.Before(w.reset) {
			st.Requests, st.Tokens, st.Reset = w.requests, w.tokens, w.reset
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b RateLimitStat) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Model, b.Model))
	})
	return out
}

// SetRateLimit replaces the rate limit and starts every window and count
// over; a RateLimit that limits nothing turns the limiter off. An invalid
// field (see RateLimit.Validate) is refused.
func (s *Server) SetRateLimit(l RateLimit) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("rate_limit.%w", err)
	}
	s.limiter.set(l)
	return nil
}

// RateLimit returns the rate limit in force.
func (s *Server) RateLimit() RateLimit { return s.limiter.get() }

// RateLimitStats returns what the rate limiter counted per key (with
// PerModel, per key and model) since the limit was set, sorted by key and
// model.
func (s *Server) RateLimitStats() []RateLimitStat { return s.limiter.stats() }

// RateLimited returns how many calls of key the rate limiter refused since
// the limit was set, every model together.
func (s *Server) RateLimited(key string) int {
	n := 0
	for _, st := range s.limiter.stats() {
		if st.Key == key {
			n += st.Limited
		}
	}
	return n
}
