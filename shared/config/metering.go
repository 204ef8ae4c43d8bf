package config

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"sort"
	"time"
)

// Metering configures the usage records the proxies publish (one per
// request, on the SWITCHYARD_USAGE stream) and how they share what their
// callers consumed for the plans' limits.
type Metering struct {
	// Enabled publishes usage records; on by default. Plan limits work
	// either way.
	Enabled *bool `koanf:"enabled"`
	// Retention is how long the SWITCHYARD_USAGE stream keeps a record
	// (the admin's usage queries reach back this far).
	Retention time.Duration `koanf:"retention"`
	// MaxBytes bounds the SWITCHYARD_USAGE stream: the oldest records go
	// first. Without a bound a busy fleet's records would fill the NATS
	// store within the retention, and a full store refuses every write,
	// hold records included.
	MaxBytes int64 `koanf:"max_bytes"`
	// Buffer is how many records a proxy keeps while NATS does not take
	// them; beyond it new records are dropped (and counted).
	Buffer int `koanf:"buffer"`
	// LimitsInterval is how often a proxy reports its callers' consumption
	// to the fleet (the switchyard_limits bucket); a limit may be overshot
	// by at most the requests in flight and one interval's consumption.
	LimitsInterval time.Duration `koanf:"limits_interval"`
	// EstimateOutputTokens is the output a request without max_tokens is
	// assumed to produce when its cost is estimated against a budget.
	EstimateOutputTokens int `koanf:"estimate_output_tokens"`
	// Rollups configures the usage rollups the admin folds the records
	// into (the switchyard_usage_rollups bucket).
	Rollups Rollups `koanf:"rollups"`
	// Store is a PostgreSQL database the admin's recorder also writes
	// every record to, once (optional: unset, the rollups only).
	Store Store `koanf:"store"`
}

// Store is the PostgreSQL database of every usage record.
type Store struct {
	// URL is a postgres:// (or postgresql://) connection URL without a
	// password: postgres://user@host:5432/db?sslmode=verify-full. Unset:
	// no store.
	URL string `koanf:"url"`
	// Password references the user's password (env:NAME or file:PATH);
	// unset: none, or what PostgreSQL's own PGPASSFILE gives.
	Password SecretRef `koanf:"password"`

	// PasswordValue is Password resolved by Load.
	PasswordValue Secret `koanf:"-"`
}

// Rollups is how long each resolution of the usage rollups is kept, and
// how the admin's recorder works.
type Rollups struct {
	// Minute, Hour and Day are how long buckets of that width are kept
	// after they end.
	Minute time.Duration `koanf:"minute"`
	Hour   time.Duration `koanf:"hour"`
	Day    time.Duration `koanf:"day"`
	// FlushInterval is how often the recorder writes what it folded (and
	// then its checkpoint).
	FlushInterval time.Duration `koanf:"flush_interval"`
	// Lease is the TTL of the recorder's lease: when the active recorder
	// stops renewing it, another admin instance takes over within about
	// this long.
	Lease time.Duration `koanf:"lease"`
}

// IsEnabled reports whether usage records are published.
func (m Metering) IsEnabled() bool { return m.Enabled == nil || *m.Enabled }

// Plan is a set of limits that client keys name (clients[].plan). Zero
// limits are no limit.
type Plan struct {
	// Models the plan allows (the same forms as clients[].models); a
	// client key of the plan may use what both its own list and the
	// plan's allow. Empty: every model the key allows.
	Models             []string `koanf:"models"`
	RequestsPerMinute  int      `koanf:"requests_per_minute"`
	TokensPerMinute    int      `koanf:"tokens_per_minute"`
	ConcurrentRequests int      `koanf:"concurrent_requests"`
	// Budget caps spend per calendar period (UTC), in the price table's
	// currency (USD).
	Budget Budget `koanf:"budget"`
	// Guardrails the plan's requests run, over their route's (see
	// Effective).
	Guardrails []string `koanf:"guardrails"`
	// Cache is the plan's cache policy, over its keys' routes' (see
	// EffectiveCache).
	Cache CachePolicy `koanf:"cache"`
}

// Budget is spend per period; 0: no cap for that period.
type Budget struct {
	Day   float64 `koanf:"day" json:"day"`
	Week  float64 `koanf:"week" json:"week"`
	Month float64 `koanf:"month" json:"month"`
}

// Price is one entry of the price table, in USD per million tokens. It
// overrides the bundled table for its model. Provider (a configured
// provider's name) or ProviderType narrows it; neither: the model on any
// provider. Unset cached_input and cache_write cost as input, reasoning as
// output.
type Price struct {
	Provider     string   `koanf:"provider"`
	ProviderType string   `koanf:"provider_type"`
	Model        string   `koanf:"model"`
	Input        *float64 `koanf:"input"`
	Output       *float64 `koanf:"output"`
	CachedInput  *float64 `koanf:"cached_input"`
	CacheWrite   *float64 `koanf:"cache_write"`
	Reasoning    *float64 `koanf:"reasoning"`
}

// Plan returns the plan a client key names, or nil.
func (c *Config) Plan(name string) *Plan {
	if p, ok := c.Plans[name]; ok {
		return &p
	}
	return nil
}

func (v *validator) metering() {
	m := v.cfg.Metering
	if m.Retention <= 0 {
		v.add("metering.retention", "must be > 0, got %s", m.Retention)
	}
	if m.MaxBytes < 1<<20 {
		v.add("metering.max_bytes", "must be at least 1048576 (1 MiB), got %d", m.MaxBytes)
	}
	if m.Buffer <= 0 {
		v.add("metering.buffer", "must be > 0, got %d", m.Buffer)
	}
	if m.LimitsInterval < 10*time.Millisecond {
		v.add("metering.limits_interval", "must be >= 10ms, got %s", m.LimitsInterval)
	}
	if m.EstimateOutputTokens < 0 {
		v.add("metering.estimate_output_tokens", "must be >= 0, got %d", m.EstimateOutputTokens)
	}
	r := m.Rollups
	// each resolution is kept at least as long as its bucket's width, and
	// no finer one longer than a coarser one (a report reads the finest at
	// its edges)
	prev := time.Duration(0)
	for _, f := range [...]struct {
		key      string
		keep, at time.Duration
	}{{"minute", r.Minute, time.Hour}, {"hour", r.Hour, 24 * time.Hour}, {"day", r.Day, 7 * 24 * time.Hour}} {
		switch {
		case f.keep < f.at:
			v.add("metering.rollups."+f.key, "must be at least %s, got %s", f.at, f.keep)
		case f.keep < prev:
			v.add("metering.rollups."+f.key, "must be at least as long as the finer resolution's %s, got %s", prev, f.keep)
		}
		prev = max(prev, f.keep)
	}
	if r.FlushInterval < 10*time.Millisecond || r.FlushInterval > time.Minute {
		v.add("metering.rollups.flush_interval", "must be between 10ms and 1m, got %s", r.FlushInterval)
	}
	if r.Lease < 3*time.Second {
		v.add("metering.rollups.lease", "must be at least 3s, got %s", r.Lease)
	}
	v.store(m.Store)
}

// store checks metering.store. Its messages never quote the URL: it may
// hold a password by mistake.
func (v *validator) store(s Store) {
	if s.URL == "" {
		if s.Password != "" {
			v.add("metering.store.password", "is set without metering.store.url")
		}
		return
	}
	u, err := url.Parse(s.URL)
	switch {
	case err != nil:
		v.add("metering.store.url", "is not a URL (want postgres://user@host:5432/db)")
		return
	case u.Scheme != "postgres" && u.Scheme != "postgresql":
		v.add("metering.store.url", "scheme %q: want postgres://user@host:5432/db", u.Scheme)
		return
	}
	if _, ok := u.User.Password(); ok || u.Query().Has("password") {
		v.add("metering.store.url", "holds a password: secrets are referenced, not inline; give it as metering.store.password (env:NAME or file:PATH)")
	}
	if u.Host == "" && !u.Query().Has("host") {
		v.add("metering.store.url", "names no host (postgres://user@host:5432/db, or ?host=/socket/dir)")
	}
	v.secretRef("metering.store.password", s.Password, false)
}

func (v *validator) plans() {
	names := make([]string, 0, len(v.cfg.Plans))
	for n := range v.cfg.Plans {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := v.cfg.Plans[n]
		at := "plans." + n
		if !idRE.MatchString(n) {
			v.add(at, "plan name %q must match %s", n, idRE)
		}
		for j, m := range p.Models {
			v.clientModel(fmt.Sprintf("%s.models[%d]", at, j), m)
		}
		for key, val := range map[string]int{
			"requests_per_minute": p.RequestsPerMinute, "tokens_per_minute": p.TokensPerMinute,
			"concurrent_requests": p.ConcurrentRequests,
		} {
			if val < 0 {
				v.add(at+"."+key, "must be >= 0 (0: no limit), got %d", val)
			}
		}
		v.budget(at+".budget", p.Budget)
	}
	for i, cl := range v.cfg.Clients {
		if cl.Plan != "" && v.cfg.Plan(cl.Plan) == nil {
			v.add(fmt.Sprintf("clients[%d].plan", i), "no plan named %q (plans: %s)", cl.Plan, joinOrNone(names))
		}
	}
}

// budget checks a budget's amounts (USD, 0: none).
func (v *validator) budget(at string, b Budget) {
	for _, f := range [...]struct {
		key string
		val float64
	}{{"day", b.Day}, {"week", b.Week}, {"month", b.Month}} {
		if f.val < 0 || math.IsNaN(f.val) || math.IsInf(f.val, 0) {
			v.add(at+"."+f.key, "must be >= 0 (0: no budget), got %g", f.val)
		}
	}
}

func (v *validator) prices() {
	for i, p := range v.cfg.Prices {
		at := fmt.Sprintf("prices[%d]", i)
		if p.Model == "" {
			v.add(at+".model", "must be set")
		}
		if p.Provider != "" {
			if _, ok := v.models[p.Provider]; !ok && !slices.Contains(v.cfg.Skipped, p.Provider) {
				v.add(at+".provider", "no provider named %q", p.Provider)
			}
		}
		switch {
		case p.ProviderType != "" && p.Provider != "":
			v.add(at+".provider_type", "give provider or provider_type, not both (a provider has one type)")
		case p.ProviderType != "":
			v.oneOf(at+".provider_type", p.ProviderType, ProviderTypes...)
		}
		if p.Input == nil && p.Output == nil {
			v.add(at, "sets no price: give input and/or output (USD per million tokens)")
		}
		for key, val := range map[string]*float64{
			"input": p.Input, "output": p.Output, "cached_input": p.CachedInput,
			"cache_write": p.CacheWrite, "reasoning": p.Reasoning,
		} {
			if val != nil && *val < 0 {
				v.add(at+"."+key, "must be >= 0, got %g", *val)
			}
		}
	}
}

func joinOrNone(names []string) string {
	if len(names) == 0 {
		return "none configured"
	}
	return fmt.Sprint(names)
}
