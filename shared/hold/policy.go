package hold

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
)

// Ladder is one class's hold ladder: wait = Base * 2^rung, capped at
// Ceiling, then jittered.
type Ladder struct {
	Base    time.Duration
	Ceiling time.Duration
}

// StatusRange is an inclusive range of HTTP statuses ("5xx" = 500-599).
type StatusRange struct{ Lo, Hi int }

// BreakerPolicy configures a provider's circuit breaker.
type BreakerPolicy struct {
	Enabled bool
	// PerModel: one breaker (and one trip hold) per provider+model.
	PerModel bool
	// ConsecutiveFailures trips the breaker; 0 disables it.
	ConsecutiveFailures int
	// Cooldown is the first hold of a trip; a failed probe doubles it up
	// to MaxCooldown.
	Cooldown, MaxCooldown time.Duration
	// FailureOnStatuses: transient failures with these statuses count
	// (status 0, a transport error or local timeout, always counts); an
	// empty list: no status counts.
	FailureOnStatuses []StatusRange
	// SuccessThreshold is how many consecutive successful probes release
	// a trip hold (breaker.success_threshold; 1 or less: the first). A
	// success before the last keeps the hold, counted in its record's
	// ProbeSuccesses, and makes it due again at once.
	SuccessThreshold int
}

// Settings is the policy for one provider (or the global one).
type Settings struct {
	Ladders         map[failure.Class]Ladder
	StatedWaitFloor time.Duration
	Jitter          float64 // fraction either way
	RampStartShare  float64
	RampDuration    time.Duration
	ProbeLease      time.Duration
	// CallerGrace: a proxy's engine leaves a due hold of a class the prober
	// settles cheaply (failure.Meaning.CheapCheck) to the prober this long.
	CallerGrace time.Duration
	Breaker     BreakerPolicy
	// AllHeld is config.AllHeldFailFast or config.AllHeldTrySoft (for the
	// proxy; the engine does not use it).
	AllHeld string
	// CorrelateKeys: this many keys held for one model-level refusal of
	// one model hold the provider+model too (0: off).
	CorrelateKeys int
}

// Policy is the engine's configuration: global settings and each
// provider's resolved settings (global merged with its overrides).
type Policy struct {
	Global    Settings
	Providers map[string]*Settings
}

// For returns the settings of provider (the global ones when it has none).
func (p *Policy) For(provider string) *Settings {
	if s, ok := p.Providers[provider]; ok {
		return s
	}
	return &p.Global
}

// DefaultSettings returns the engine defaults (the ladder table in the
// README's architecture section).
func DefaultSettings() Settings {
	return Settings{
		Ladders: map[failure.Class]Ladder{
			failure.RateLimit:          {5 * time.Second, 5 * time.Minute},
			failure.CredentialRejected: {5 * time.Minute, 24 * time.Hour},
			failure.QuotaExhausted:     {10 * time.Minute, 24 * time.Hour},
			failure.ModelNotAccessible: {10 * time.Minute, 24 * time.Hour},
			failure.ModelRetired:       {time.Hour, 7 * 24 * time.Hour},
			failure.RegionBlocked:      {10 * time.Minute, 24 * time.Hour},
		},
		StatedWaitFloor: time.Second,
		Jitter:          0.1,
		RampStartShare:  0.1,
		RampDuration:    60 * time.Second,
		ProbeLease:      30 * time.Second,
		CallerGrace:     3 * time.Second,
		Breaker: BreakerPolicy{
			Enabled:             true,
			ConsecutiveFailures: 5,
			Cooldown:            30 * time.Second,
			MaxCooldown:         5 * time.Minute,
			FailureOnStatuses:   []StatusRange{{500, 599}, {408, 408}},
			SuccessThreshold:    1,
		},
		AllHeld:       config.AllHeldTrySoft,
		CorrelateKeys: 2,
	}
}

// DefaultPolicy is DefaultSettings for every provider.
func DefaultPolicy() Policy { return Policy{Global: DefaultSettings()} }

// ladder returns the ladder of class c (a breaker hold uses the breaker's
// cooldowns).
func (s *Settings) ladder(c failure.Class) Ladder {
	if c == failure.Transient {
		return Ladder{s.Breaker.Cooldown, s.Breaker.MaxCooldown}
	}
	return s.Ladders[c]
}

// LadderWait is base * 2^rung capped at the ceiling, before jitter.
func (s *Settings) LadderWait(c failure.Class, rung int) time.Duration {
	l := s.ladder(c)
	d := l.Base
	for i := 0; i < rung && (l.Ceiling <= 0 || d < l.Ceiling); i++ {
		d *= 2
	}
	if l.Ceiling > 0 && d > l.Ceiling {
		d = l.Ceiling
	}
	return d
}

// nextRung is the rung after a failed due probe of a hold of class c on
// rung: one up, but never past the first rung whose wait reaches the
// ceiling (waits do not grow past it, so neither does the rung).
func (s *Settings) nextRung(c failure.Class, rung int) int {
	l := s.ladder(c)
	if l.Ceiling <= 0 || l.Base <= 0 {
		return rung + 1
	}
	top := 0
	for d := l.Base; d < l.Ceiling; d *= 2 {
		top++
	}
	return min(rung+1, top)
}

// Early probes: a soft hold's early probe (the try_soft pass) goes out at
// most once per EarlyProbeInterval fleet-wide, the larger of
// minEarlyProbeInterval and earlyProbeShare of the hold's ladder wait on
// its rung.
const (
	minEarlyProbeInterval = time.Second
	earlyProbeShare       = 0.1
)

// EarlyProbeInterval is how long after an early probe of a hold of class
// c on rung the next may go out (fleet-wide): the larger of 1 s and a
// tenth of the rung's ladder wait (3 s for a breaker's 30 s cooldown).
func (s *Settings) EarlyProbeInterval(c failure.Class, rung int) time.Duration {
	return max(minEarlyProbeInterval, time.Duration(float64(s.LadderWait(c, rung))*earlyProbeShare))
}

// Wait is how long a hold of class c on rung lasts, given the failure
// (its stated wait, or its rule's TTL). rnd returns a number in [0, 1) and
// drives the jitter.
func (s *Settings) Wait(c failure.Class, rung int, res failure.Result, rnd func() float64) time.Duration {
	switch {
	case res.HoldTTL > 0:
		return res.HoldTTL
	case res.HasWait:
		return max(res.RetryAfter, s.StatedWaitFloor)
	}
	d := s.LadderWait(c, rung)
	if s.Jitter > 0 {
		if rnd == nil {
			rnd = rand.Float64
		}
		d = time.Duration(float64(d) * (1 + s.Jitter*(2*rnd()-1)))
	}
	return max(d, time.Millisecond)
}

// countsForBreaker reports whether a transient failure with this status
// counts against the breaker.
func (b *BreakerPolicy) countsForBreaker(status int) bool {
	if status == 0 {
		return true
	}
	for _, r := range b.FailureOnStatuses {
		if status >= r.Lo && status <= r.Hi {
			return true
		}
	}
	return false
}

// PolicyFromConfig builds the engine policy: engine defaults, overridden by
// the global resilience section, overridden per provider. Errors name the
// file and key path (the loader has validated each field; this checks the
// merged result, e.g. a provider's base above the global ceiling).
func PolicyFromConfig(cfg *config.Config) (Policy, error) {
	src := cfg.At // where a key came from: the file, or the routing version
	var errs []error
	global := DefaultSettings()
	if err := overlay(&global, cfg.Resilience, src, "resilience"); err != nil {
		errs = append(errs, err)
	}
	p := Policy{Global: global, Providers: map[string]*Settings{}}
	for i, pc := range cfg.Providers {
		s := global.clone()
		if err := overlay(&s, pc.Resilience, src, fmt.Sprintf("providers[%d].resilience", i)); err != nil {
			errs = append(errs, err)
		}
		p.Providers[pc.Name] = &s
	}
	return p, errors.Join(errs...)
}

func (s Settings) clone() Settings {
	l := make(map[failure.Class]Ladder, len(s.Ladders))
	for c, v := range s.Ladders {
		l[c] = v
	}
	s.Ladders = l
	return s
}

func overlay(s *Settings, r config.Resilience, src func(path string) string, at string) error {
	var errs []error
	for _, l := range []struct {
		name string
		c    failure.Class
		l    config.Ladder
	}{
		{"rate_limit", failure.RateLimit, r.Ladder.RateLimit},
		{"credential_rejected", failure.CredentialRejected, r.Ladder.CredentialRejected},
		{"quota_exhausted", failure.QuotaExhausted, r.Ladder.QuotaExhausted},
		{"model_not_accessible", failure.ModelNotAccessible, r.Ladder.ModelNotAccessible},
		{"model_retired", failure.ModelRetired, r.Ladder.ModelRetired},
		{"region_blocked", failure.RegionBlocked, r.Ladder.RegionBlocked},
	} {
		cur := s.Ladders[l.c]
		if l.l.Base > 0 {
			cur.Base = l.l.Base
		}
		if l.l.Ceiling > 0 {
			cur.Ceiling = l.l.Ceiling
		}
		if cur.Ceiling < cur.Base {
			errs = append(errs, fmt.Errorf("%s: ceiling %s is below base %s (after defaults and global values)", src(at+".ladder."+l.name), cur.Ceiling, cur.Base))
		}
		s.Ladders[l.c] = cur
	}
	if r.StatedWaitFloor > 0 {
		s.StatedWaitFloor = r.StatedWaitFloor
	}
	if r.Jitter != nil {
		s.Jitter = *r.Jitter
	}
	if r.Ramp.StartShare != nil {
		s.RampStartShare = *r.Ramp.StartShare
	}
	if r.Ramp.Duration > 0 {
		s.RampDuration = r.Ramp.Duration
	}
	if r.Probe.Lease > 0 {
		s.ProbeLease = r.Probe.Lease
	}
	if r.Probe.CallerGrace > 0 {
		s.CallerGrace = r.Probe.CallerGrace
	}
	if r.CorrelateKeys != nil {
		if *r.CorrelateKeys < 0 {
			errs = append(errs, fmt.Errorf("%s: must be >= 0 (0 turns it off), got %d", src(at+".correlate_keys"), *r.CorrelateKeys))
		} else {
			s.CorrelateKeys = *r.CorrelateKeys
		}
	}
	b := r.Breaker
	if b.Enabled != nil {
		s.Breaker.Enabled = *b.Enabled
	}
	switch b.Scope {
	case "model":
		s.Breaker.PerModel = true
	case "provider":
		s.Breaker.PerModel = false
	}
	if b.ConsecutiveFailures != nil { // 0: the breaker is off
		s.Breaker.ConsecutiveFailures = *b.ConsecutiveFailures
	}
	if b.Cooldown > 0 {
		s.Breaker.Cooldown = b.Cooldown
	}
	if b.MaxCooldown > 0 {
		s.Breaker.MaxCooldown = b.MaxCooldown
	}
	if b.SuccessThreshold > 0 {
		s.Breaker.SuccessThreshold = b.SuccessThreshold
	}
	if s.Breaker.MaxCooldown < s.Breaker.Cooldown {
		errs = append(errs, fmt.Errorf("%s: %s is below cooldown %s (after defaults and global values)", src(at+".breaker.max_cooldown"), s.Breaker.MaxCooldown, s.Breaker.Cooldown))
	}
	if b.FailureOnStatuses != nil { // explicit: replaces; []: no status counts
		s.Breaker.FailureOnStatuses = []StatusRange{}
		for i, st := range b.FailureOnStatuses {
			lo, hi, err := config.ParseStatusClass(st)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", src(fmt.Sprintf("%s.breaker.failure_on_statuses[%d]", at, i)), err))
				continue
			}
			s.Breaker.FailureOnStatuses = append(s.Breaker.FailureOnStatuses, StatusRange{lo, hi})
		}
	}
	if r.AllHeldPolicy != "" {
		s.AllHeld = r.AllHeldPolicy
	}
	return errors.Join(errs...)
}
