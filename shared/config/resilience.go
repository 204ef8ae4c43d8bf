package config

import (
	"fmt"
	"strconv"
	"strings"

	"switchyard.dev/shared/failure"
)

// All-held policies (resilience.all_held_policy).
const (
	AllHeldFailFast = "fail_fast"
	AllHeldTrySoft  = "try_soft"
)

// ParseStatusClass reads one entry of breaker.failure_on_statuses: a status
// ("503") or a class of statuses ("5xx"). It returns the inclusive range.
func ParseStatusClass(s string) (lo, hi int, err error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if len(s) == 3 && strings.HasSuffix(s, "xx") && s[0] >= '1' && s[0] <= '5' {
		d := int(s[0]-'0') * 100
		return d, d + 99, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 {
		return 0, 0, fmt.Errorf("%q is neither an HTTP status nor a class like \"5xx\"", s)
	}
	return n, n, nil
}

// resilience checks a resilience section (global or a provider's).
func (v *validator) resilience(prefix string, r Resilience) {
	for _, l := range []struct {
		name string
		l    Ladder
	}{
		{"rate_limit", r.Ladder.RateLimit},
		{"credential_rejected", r.Ladder.CredentialRejected},
		{"quota_exhausted", r.Ladder.QuotaExhausted},
		{"model_not_accessible", r.Ladder.ModelNotAccessible},
		{"model_retired", r.Ladder.ModelRetired},
		{"region_blocked", r.Ladder.RegionBlocked},
	} {
		at := prefix + ".ladder." + l.name
		if l.l.Base < 0 {
			v.add(at+".base", "must be >= 0, got %s", l.l.Base)
		}
		if l.l.Ceiling < 0 {
			v.add(at+".ceiling", "must be >= 0, got %s", l.l.Ceiling)
		}
		if l.l.Base > 0 && l.l.Ceiling > 0 && l.l.Ceiling < l.l.Base {
			v.add(at+".ceiling", "%s is less than %s.base (%s)", l.l.Ceiling, at, l.l.Base)
		}
	}
	if r.StatedWaitFloor < 0 {
		v.add(prefix+".stated_wait_floor", "must be >= 0, got %s", r.StatedWaitFloor)
	}
	if r.Jitter != nil && (*r.Jitter < 0 || *r.Jitter >= 1) {
		v.add(prefix+".jitter", "must be a fraction from 0 to below 1, got %g", *r.Jitter)
	}
	if r.Ramp.StartShare != nil && (*r.Ramp.StartShare <= 0 || *r.Ramp.StartShare > 1) {
		v.add(prefix+".ramp.start_share", "must be above 0 and at most 1, got %g", *r.Ramp.StartShare)
	}
	if r.Ramp.Duration < 0 {
		v.add(prefix+".ramp.duration", "must be >= 0, got %s", r.Ramp.Duration)
	}
	if r.Probe.Lease < 0 {
		v.add(prefix+".probe.lease", "must be >= 0, got %s", r.Probe.Lease)
	}
	if r.Probe.CallerGrace < 0 {
		v.add(prefix+".probe.caller_grace", "must be >= 0, got %s", r.Probe.CallerGrace)
	}
	b := r.Breaker
	if b.Scope != "" {
		v.oneOf(prefix+".breaker.scope", b.Scope, "provider", "model")
	}
	if b.ConsecutiveFailures != nil && *b.ConsecutiveFailures < 0 {
		v.add(prefix+".breaker.consecutive_failures", "must be >= 0 (0 switches the breaker off), got %d", *b.ConsecutiveFailures)
	}
	if b.Cooldown < 0 {
		v.add(prefix+".breaker.cooldown", "must be >= 0, got %s", b.Cooldown)
	}
	if b.SuccessThreshold < 0 || b.SuccessThreshold > 100 {
		v.add(prefix+".breaker.success_threshold", "must be from 1 to 100 (0 or unset: inherit), got %d", b.SuccessThreshold)
	}
	if b.MaxCooldown < 0 {
		v.add(prefix+".breaker.max_cooldown", "must be >= 0, got %s", b.MaxCooldown)
	}
	if b.Cooldown > 0 && b.MaxCooldown > 0 && b.MaxCooldown < b.Cooldown {
		v.add(prefix+".breaker.max_cooldown", "%s is less than %s.breaker.cooldown (%s)", b.MaxCooldown, prefix, b.Cooldown)
	}
	for i, s := range b.FailureOnStatuses {
		if _, _, err := ParseStatusClass(s); err != nil {
			v.add(fmt.Sprintf("%s.breaker.failure_on_statuses[%d]", prefix, i), "%s", err)
		}
	}
	if r.AllHeldPolicy != "" {
		v.oneOf(prefix+".all_held_policy", r.AllHeldPolicy, AllHeldFailFast, AllHeldTrySoft)
	}
}

// tripOn checks a trip_on map by compiling each rule.
func (v *validator) tripOn(prefix string, rules map[string]TripRule) {
	for _, name := range sortedKeys(rules) {
		if _, err := compileTripRule(name, rules[name]); err != nil {
			v.add(prefix+"."+name, "%s", err)
		}
	}
}

func compileTripRule(name string, r TripRule) (failure.Rule, error) {
	ttl := ""
	if r.TTL != 0 {
		ttl = r.TTL.String()
	}
	return failure.CompileRule(name, r.Match, r.Class, ttl)
}

// compileTripOn compiles a trip_on map, sorted by name (Validate has
// checked it).
func compileTripOn(rules map[string]TripRule) ([]failure.Rule, error) {
	out := make([]failure.Rule, 0, len(rules))
	for _, name := range sortedKeys(rules) {
		r, err := compileTripRule(name, rules[name])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// compileRules fills TripRules (global: file then environment) and each
// provider's TripRules.
func (c *Config) compileRules(environ []string) error {
	global, err := compileTripOn(c.TripOn)
	if err != nil {
		return fmt.Errorf("%s: trip_on: %w", source(c.File), err)
	}
	env, err := failure.RulesFromEnv(environ)
	if err != nil {
		return fmt.Errorf("environment: %w", err)
	}
	for _, r := range env {
		replaced := false
		for i := range global {
			if global[i].Name == r.Name {
				global[i], replaced = r, true
			}
		}
		if !replaced {
			global = append(global, r)
		}
	}
	c.TripRules = global
	for i := range c.Providers {
		p := &c.Providers[i]
		if p.TripOn == nil {
			continue
		}
		if p.TripRules, err = compileTripOn(p.TripOn); err != nil {
			return fmt.Errorf("%s: providers[%d].trip_on: %w", source(c.File), i, err)
		}
	}
	return nil
}

// Classifier returns a failure classifier applying the trip_on rules: the
// global set, replaced by a provider's own set where it has one.
func (c *Config) Classifier() *failure.Classifier {
	cl := &failure.Classifier{Global: c.TripRules, PerProvider: map[string][]failure.Rule{}}
	for _, p := range c.Providers {
		if p.TripOn != nil {
			cl.PerProvider[p.Name] = p.TripRules
		}
	}
	return cl
}

// Policy is the retry lists as the failure package reads them.
func (r Retry) Policy() failure.RetryPolicy {
	return failure.RetryPolicy{OnStatuses: r.OnStatuses, RotateOnStatuses: r.RotateOnStatuses, OnTransportErrors: r.OnTransportErrors}
}
