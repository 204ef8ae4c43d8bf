package config

import (
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/failure"
)

func TestResilienceLoads(t *testing.T) {
	path := writeConfig(t, `
resilience:
  ladder:
    rate_limit: {base: 2s, ceiling: 1m}
  jitter: 0
  ramp: {start_share: 0.25, duration: 2m}
  breaker:
    failure_on_statuses: ["5xx", "429"]
  all_held_policy: fail_fast
trip_on:
  quota:
    match: 'quota .* exceeded'
    class: quota_exhausted
    ttl: 6h
`+minimal+`    resilience:
      ladder:
        credential_rejected: {base: 1m}
      breaker: {enabled: false, scope: model}
    trip_on:
      org:
        match: suspended
        class: credential_rejected
`)
	env := append([]string{
		"SWITCHYARD_RESILIENCE_LADDER_RATE_LIMIT_CEILING=3m",
		"SWITCHYARD_TRIP_ENVRULE_MATCH=flaky",
		"SWITCHYARD_TRIP_ENVRULE_CLASS=transient",
	}, minimalEnv...)
	cfg, err := Load(path, env)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	r := cfg.Resilience
	if r.Ladder.RateLimit != (Ladder{Base: 2 * time.Second, Ceiling: 3 * time.Minute}) {
		t.Errorf("rate_limit ladder = %+v (env override of the ceiling expected)", r.Ladder.RateLimit)
	}
	if r.Jitter == nil || *r.Jitter != 0 || r.Ramp.StartShare == nil || *r.Ramp.StartShare != 0.25 || r.Ramp.Duration != 2*time.Minute {
		t.Errorf("jitter/ramp = %v %v %s", r.Jitter, r.Ramp.StartShare, r.Ramp.Duration)
	}
	if len(r.Breaker.FailureOnStatuses) != 2 || r.AllHeldPolicy != AllHeldFailFast {
		t.Errorf("breaker/all_held = %+v %q", r.Breaker, r.AllHeldPolicy)
	}
	p := cfg.Providers[0].Resilience
	if p.Ladder.CredentialRejected.Base != time.Minute || p.Breaker.Enabled == nil || *p.Breaker.Enabled || p.Breaker.Scope != "model" {
		t.Errorf("provider resilience = %+v", p)
	}
	if len(cfg.TripRules) != 2 || cfg.TripRules[0].Name != "quota" || cfg.TripRules[0].TTL != 6*time.Hour ||
		cfg.TripRules[1].Name != "envrule" || cfg.TripRules[1].Class != failure.Transient {
		t.Errorf("global rules = %+v", cfg.TripRules)
	}
	cl := cfg.Classifier()
	if rs := cl.RulesFor("openai"); len(rs) != 1 || rs[0].Name != "org" {
		t.Errorf("openai rules = %+v", rs)
	}
	if rs := cl.RulesFor("other"); len(rs) != 2 {
		t.Errorf("global rules for other = %+v", rs)
	}
}

func TestResilienceValidation(t *testing.T) {
	tests := []struct {
		name string
		yaml string // prepended to minimal
		prov string // appended to minimal (provider keys)
		env  []string
		want string
	}{
		{"ceiling below base", "resilience:\n  ladder:\n    rate_limit: {base: 10m, ceiling: 1m}\n", "", nil,
			"$FILE: resilience.ladder.rate_limit.ceiling: 1m0s is less than resilience.ladder.rate_limit.base (10m0s)"},
		{"negative base", "", "    resilience:\n      ladder:\n        model_retired: {base: -1s}\n", nil,
			"$FILE: providers[0].resilience.ladder.model_retired.base: must be >= 0, got -1s"},
		{"jitter", "resilience:\n  jitter: 1.5\n", "", nil, "$FILE: resilience.jitter: must be a fraction from 0 to below 1, got 1.5"},
		{"start share", "", "    resilience:\n      ramp: {start_share: 0}\n", nil,
			"$FILE: providers[0].resilience.ramp.start_share: must be above 0 and at most 1, got 0"},
		{"bad status class", "resilience:\n  breaker:\n    failure_on_statuses: [5xx, 6xx]\n", "", nil,
			`$FILE: resilience.breaker.failure_on_statuses[1]: "6xx" is neither an HTTP status nor a class like "5xx"`},
		{"all held policy", "resilience:\n  all_held_policy: panic\n", "", nil, `$FILE: resilience.all_held_policy: unknown value "panic"`},
		{"breaker scope", "", "    resilience:\n      breaker: {scope: key}\n", nil, `$FILE: providers[0].resilience.breaker.scope: unknown value "key"`},
		{"bad rule regex", "trip_on:\n  broken:\n    match: '('\n    class: transient\n", "", nil,
			`$FILE: trip_on.broken: invalid trip_on rule "broken": match:`},
		{"bad rule class", "", "    trip_on:\n      weird:\n        match: x\n        class: nonsense\n", nil,
			`$FILE: providers[0].trip_on.weird: invalid trip_on rule "weird": class:`},
		{"env rule without class", "", "", []string{"SWITCHYARD_TRIP_HALF_MATCH=x"},
			`environment: invalid trip_on rule "half": class:`},
		{"env override named", "", "", []string{"SWITCHYARD_RESILIENCE_PROBE_LEASE=-5s"},
			"$FILE: resilience.probe.lease (from SWITCHYARD_RESILIENCE_PROBE_LEASE): must be >= 0, got -5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.yaml+minimal+tt.prov)
			_, err := Load(path, append(tt.env, minimalEnv...))
			want := strings.ReplaceAll(tt.want, "$FILE", path)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Load error = %v\nwant it to contain %q", err, want)
			}
		})
	}
}

func TestParseStatusClass(t *testing.T) {
	for _, tt := range []struct {
		in     string
		lo, hi int
		ok     bool
	}{
		{"5xx", 500, 599, true}, {"4XX", 400, 499, true}, {"503", 503, 503, true},
		{"6xx", 0, 0, false}, {"99", 0, 0, false}, {"abc", 0, 0, false},
	} {
		lo, hi, err := ParseStatusClass(tt.in)
		if (err == nil) != tt.ok || lo != tt.lo || hi != tt.hi {
			t.Errorf("ParseStatusClass(%q) = %d, %d, %v", tt.in, lo, hi, err)
		}
	}
}

// TestListsOmittedEmptyOrExplicit: the retry and breaker lists load as
// written: omitted (the default, or inherit for a provider), [] (an
// empty list, not the default), explicit; consecutive_failures 0 loads
// as 0 (the breaker off), apart from unset.
func TestListsOmittedEmptyOrExplicit(t *testing.T) {
	path := writeConfig(t, `
retry:
  on_statuses: []
resilience:
  breaker:
    failure_on_statuses: []
    consecutive_failures: 0
`+minimal+`    resilience:
      breaker: {failure_on_statuses: ["503"]}
`)
	cfg, err := Load(path, minimalEnv)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if cfg.Retry.OnStatuses == nil || len(cfg.Retry.OnStatuses) != 0 || len(cfg.Retry.RotateOnStatuses) != 1 {
		t.Errorf("retry = %+v, want on_statuses [] and the default rotate_on_statuses", cfg.Retry)
	}
	b := cfg.Resilience.Breaker
	if b.FailureOnStatuses == nil || len(b.FailureOnStatuses) != 0 || b.ConsecutiveFailures == nil || *b.ConsecutiveFailures != 0 {
		t.Errorf("breaker = %+v, want failure_on_statuses [] and consecutive_failures 0", b)
	}
	pb := cfg.Providers[0].Resilience.Breaker
	if len(pb.FailureOnStatuses) != 1 || pb.ConsecutiveFailures != nil {
		t.Errorf("provider breaker = %+v, want its own list and consecutive_failures unset", pb)
	}
	cfg, err = Load(writeConfig(t, minimal), minimalEnv)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if b := cfg.Resilience.Breaker; b.FailureOnStatuses != nil || b.ConsecutiveFailures != nil {
		t.Errorf("omitted breaker lists = %+v, want unset", b)
	}
}
