package config

import (
	"strings"
	"time"
)

// Prober configures the prober service: its listener and the defaults of
// every provider's active check (providers[].health_check overrides them per
// provider). See services/prober/README.md.
type Prober struct {
	Listen string `koanf:"listen"`
	// CheckInterval is the time between two checks of a target
	// (providers[].health_check.interval overrides it).
	CheckInterval time.Duration `koanf:"check_interval"`
	// CheckTimeout bounds one check (providers[].health_check.timeout
	// overrides it).
	CheckTimeout time.Duration `koanf:"check_timeout"`
	// Jitter is the fraction (0 to <1) by which each interval varies either
	// way, so that checks do not run in step.
	Jitter float64 `koanf:"jitter"`
	// RecheckInterval is the time between checks while a target's checks
	// fail (the fast loop); the check interval when that is shorter.
	RecheckInterval time.Duration `koanf:"recheck_interval"`
	// UnhealthyAfter is how many consecutive failed checks make a target
	// unhealthy (fewer make it degraded).
	UnhealthyAfter int `koanf:"unhealthy_after"`
	// DegradedLatency marks a passing check slower than this degraded; 0
	// turns it off.
	DegradedLatency time.Duration `koanf:"degraded_latency"`
	// LeaseTTL is the lifetime of a check lease in switchyard_leases: a
	// replica that dies hands its checks over within it. Whole seconds,
	// at least 1 s.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
	// SettleInterval is how often the prober looks for due holds it can
	// settle with a cheap check.
	SettleInterval time.Duration `koanf:"settle_interval"`
	// DiscoveryInterval is the time between two model discoveries of a
	// provider; DiscoveryRetry the time after a discovery that failed.
	DiscoveryInterval time.Duration `koanf:"discovery_interval"`
	DiscoveryRetry    time.Duration `koanf:"discovery_retry"`
	// CompletionProbes allows one-token chat requests to settle holds of
	// model and region classes (they cost tokens); off, those holds are
	// settled by fetching the model's entry, or left to a caller.
	CompletionProbes bool `koanf:"completion_probes"`
	// PassiveWindow is the sliding window over which the passive counts
	// of health records (caller attempts reported by proxies) are summed.
	PassiveWindow time.Duration `koanf:"passive_window"`
	// PassiveDegradedFailures and PassiveDegradedRatio are the passive
	// rule: a target whose active check alone says healthy (or unknown)
	// is recorded degraded while at least PassiveDegradedFailures of the
	// real requests proxies reported in the passive window failed, and at
	// least PassiveDegradedRatio (above 0, at most 1) of them.
	// PassiveDegradedFailures 0 turns the rule off.
	PassiveDegradedFailures int     `koanf:"passive_degraded_failures"`
	PassiveDegradedRatio    float64 `koanf:"passive_degraded_ratio"`
}

// Defaults of the prober section.
func defaultProber() Prober {
	return Prober{
		Listen:            "127.0.0.1:8082",
		CheckInterval:     30 * time.Second,
		CheckTimeout:      5 * time.Second,
		Jitter:            0.1,
		RecheckInterval:   10 * time.Second,
		UnhealthyAfter:    2,
		LeaseTTL:          10 * time.Second,
		SettleInterval:    time.Second,
		DiscoveryInterval: time.Hour,
		DiscoveryRetry:    time.Minute,
		PassiveWindow:     5 * time.Minute,

		PassiveDegradedFailures: 3,
		PassiveDegradedRatio:    0.5,
	}
}

// HealthCheckMethods are the methods a health check may use.
var HealthCheckMethods = []string{"GET", "HEAD", "POST"}

// defaultHealthPaths is the check path of each provider type whose models
// endpoint is known, relative to base_url. Types missing here
// (openai-compatible) have no default: their checks report status unknown
// until providers[].health_check.path is set.
var defaultHealthPaths = map[string]string{
	"openai": "/models", "azure": "/openai/models", "anthropic": "/v1/models",
	"gemini": "/models", "openrouter": "/models", "groq": "/models", "mistral": "/models",
	"deepseek": "/models", "together": "/models", "xai": "/models", "vllm": "/models",
	"ollama": "/models",
}

// DefaultHealthPath returns the health check path of a provider type (its
// models endpoint, relative to base_url), or "" when the type has none.
func DefaultHealthPath(typ string) string { return defaultHealthPaths[typ] }

// CheckEnabled reports whether the provider's active check runs (true
// unless health_check.enabled is false).
func (h HealthCheck) CheckEnabled() bool { return h.Enabled == nil || *h.Enabled }

// DiscoveryEnabled reports whether the prober discovers the provider's
// models: health_check.discovery when set, else as the active check
// (CheckEnabled). A provider whose checks are off gets no discovery calls
// unless it asks for them.
func (h HealthCheck) DiscoveryEnabled() bool {
	if h.Discovery != nil {
		return *h.Discovery
	}
	return h.CheckEnabled()
}

// validateProber checks the prober section.
func (v *validator) prober() {
	p := v.cfg.Prober
	v.listen("prober.listen", p.Listen)
	for _, d := range []struct {
		key string
		val time.Duration
	}{
		{"prober.check_interval", p.CheckInterval}, {"prober.check_timeout", p.CheckTimeout},
		{"prober.recheck_interval", p.RecheckInterval}, {"prober.lease_ttl", p.LeaseTTL},
		{"prober.settle_interval", p.SettleInterval}, {"prober.discovery_interval", p.DiscoveryInterval},
		{"prober.discovery_retry", p.DiscoveryRetry}, {"prober.passive_window", p.PassiveWindow},
	} {
		if d.val <= 0 {
			v.add(d.key, "must be > 0, got %s", d.val)
		}
	}
	if p.LeaseTTL > 0 && (p.LeaseTTL < time.Second || p.LeaseTTL%time.Second != 0) {
		v.add("prober.lease_ttl", "must be whole seconds, at least 1s, got %s", p.LeaseTTL)
	}
	if p.LeaseTTL > 0 && p.CheckTimeout > p.LeaseTTL*9/10 {
		v.add("prober.check_timeout", "must be at most nine tenths of prober.lease_ttl (%s), got %s: a check ends within the lease of the prober replica that runs it", p.LeaseTTL*9/10, p.CheckTimeout)
	}
	if p.Jitter < 0 || p.Jitter >= 1 {
		v.add("prober.jitter", "must be from 0 to below 1, got %v", p.Jitter)
	}
	if p.UnhealthyAfter < 1 {
		v.add("prober.unhealthy_after", "must be >= 1, got %d", p.UnhealthyAfter)
	}
	if p.DegradedLatency < 0 {
		v.add("prober.degraded_latency", "must be >= 0, got %s", p.DegradedLatency)
	}
	if p.PassiveDegradedFailures < 0 {
		v.add("prober.passive_degraded_failures", "must be >= 0 (0 turns the passive rule off), got %d", p.PassiveDegradedFailures)
	}
	if !(p.PassiveDegradedRatio > 0 && p.PassiveDegradedRatio <= 1) {
		v.add("prober.passive_degraded_ratio", "must be above 0 and at most 1, got %v", p.PassiveDegradedRatio)
	}
}

// healthCheck checks a provider's health_check section.
func (v *validator) healthCheck(at string, hc HealthCheck) {
	if hc.Path != "" && !strings.HasPrefix(hc.Path, "/") {
		v.add(at+".path", "%q must start with /", hc.Path)
	}
	if hc.Method != "" {
		v.oneOf(at+".method", hc.Method, HealthCheckMethods...)
	}
	if hc.Body != "" && hc.Method != "POST" {
		v.add(at+".body", "is only sent with method POST")
	}
	v.statuses(at+".expected_statuses", hc.ExpectedStatuses)
	if hc.Interval < 0 {
		v.add(at+".interval", "must be >= 0, got %s", hc.Interval)
	}
	if hc.Timeout < 0 {
		v.add(at+".timeout", "must be >= 0, got %s", hc.Timeout)
	}
}
