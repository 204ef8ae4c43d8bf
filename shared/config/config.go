// Package config holds Switchyard's one typed configuration: loaded once with
// koanf (defaults -> one YAML file -> SWITCHYARD_* environment), validated,
// and passed down to every service.
//
// Every field here is documented in configs/README.md; a test fails when one
// is not.
package config

import "time"

// Config is the whole configuration shared by the proxy, prober and admin
// services. Each service reads the sections it needs.
type Config struct {
	Log       Log               `koanf:"log"`
	NATS      NATS              `koanf:"nats"`
	Proxy     Proxy             `koanf:"proxy"`
	Prober    Service           `koanf:"prober"`
	Admin     Service           `koanf:"admin"`
	Limits    Limits            `koanf:"limits"`
	Timeouts  Timeouts          `koanf:"timeouts"`
	Retry     Retry             `koanf:"retry"`
	Providers []Provider        `koanf:"providers"`
	Aliases   map[string]string `koanf:"aliases"`
	Chains    map[string]Chain  `koanf:"chains"`
	Clients   []ClientKey       `koanf:"clients"`

	// File is the path the configuration was loaded from ("" when none).
	File string `koanf:"-"`
	// Skipped lists the optional providers Load removed because none of
	// their keys' secrets could be resolved (see Provider.Optional).
	Skipped []string `koanf:"-"`
	// Warnings are lines for the launcher to log: one per skipped provider
	// and per dropped key of an optional provider, naming the unset
	// variable or missing file (never a secret value).
	Warnings []string `koanf:"-"`

	// fromEnv maps each key path set from the environment to its variable,
	// so that messages about it name the variable.
	fromEnv map[string]string
}

// Log selects the log level and format.
type Log struct {
	// Level is debug, info, warn or error.
	Level string `koanf:"level"`
	// Format is auto (tint on a terminal, JSON otherwise), json or text.
	Format string `koanf:"format"`
}

// NATS says how services reach NATS. With URL empty, the all-in-one launcher
// runs an embedded server as configured under Embedded.
type NATS struct {
	URL       string        `koanf:"url"` // comma-separated list
	User      string        `koanf:"user"`
	Password  SecretRef     `koanf:"password"`
	Token     SecretRef     `koanf:"token"`
	CredsFile string        `koanf:"creds_file"`
	TLS       TLS           `koanf:"tls"`
	Name      string        `koanf:"name"`
	Timeout   time.Duration `koanf:"connect_timeout"`
	Embedded  Embedded      `koanf:"embedded"`
	// Replicas and Storage apply to the buckets and stream Switchyard creates.
	Replicas int    `koanf:"replicas"`
	Storage  string `koanf:"storage"` // file or memory

	// PasswordValue and TokenValue are Password and Token resolved by Load
	// (zero when not configured).
	PasswordValue Secret `koanf:"-"`
	TokenValue    Secret `koanf:"-"`
}

// TLS configures a TLS client connection to NATS.
type TLS struct {
	CAFile   string `koanf:"ca_file"`
	CertFile string `koanf:"cert_file"`
	KeyFile  string `koanf:"key_file"`
}

// Embedded configures the in-process NATS server of the all-in-one launcher.
type Embedded struct {
	Listen   string `koanf:"listen"`    // host:port; 127.0.0.1:4222 by default
	StoreDir string `koanf:"store_dir"` // JetStream data directory
}

// Service is the listener of a service.
type Service struct {
	Listen string `koanf:"listen"`
}

// Proxy configures the data plane service.
type Proxy struct {
	Listen string `koanf:"listen"`
	// RequireClientKey rejects requests without a valid gateway key. It is
	// on by default whenever clients are configured.
	RequireClientKey *bool `koanf:"require_client_key"`
}

// Limits bound what one proxy accepts.
type Limits struct {
	MaxInFlight  int `koanf:"max_in_flight"`
	MaxBodyBytes int `koanf:"max_body_bytes"`
	MaxAttempts  int `koanf:"max_attempts"`
}

// Timeouts bound attempts.
type Timeouts struct {
	Attempt    time.Duration `koanf:"attempt"`
	StreamIdle time.Duration `koanf:"stream_idle"`
	Connect    time.Duration `koanf:"connect"`
	Request    time.Duration `koanf:"request"` // whole request, all attempts; 0 = caller's deadline only
}

// Retry says when an attempt is retried on the same target.
type Retry struct {
	// SameTargetAttempts is how many attempts one target gets (first try
	// included) on transport errors and the statuses below.
	SameTargetAttempts int           `koanf:"same_target_attempts"`
	BackoffBase        time.Duration `koanf:"backoff_base"`
	BackoffMax         time.Duration `koanf:"backoff_max"`
	// OnStatuses retries these statuses on the same target.
	OnStatuses []int `koanf:"on_statuses"`
	// OnTransportErrors retries connection failures on the same target.
	OnTransportErrors bool `koanf:"on_transport_errors"`
	// RotateOnStatuses moves to the next key of the same step.
	RotateOnStatuses []int `koanf:"rotate_on_statuses"`
}

// Provider is one configured upstream.
type Provider struct {
	Name    string `koanf:"name"`
	Type    string `koanf:"type"`
	BaseURL string `koanf:"base_url"`
	// Optional providers are skipped (with a log line) when none of their
	// keys' secrets is set, instead of failing the load.
	Optional bool  `koanf:"optional"`
	Keys     []Key `koanf:"keys"`
	// Models this provider serves. A model's upstream name may differ
	// (Azure deployments, vendor prefixes): see Model.
	Models []Model `koanf:"models"`
	// Headers are added to every upstream request (not secrets).
	Headers map[string]string `koanf:"headers"`
	// APIVersion is Azure's api-version or Anthropic's anthropic-version.
	APIVersion string `koanf:"api_version"`
	// Selection among keys of equal priority: round_robin or weighted.
	Selection   string      `koanf:"selection"`
	Timeouts    Timeouts    `koanf:"timeouts"`
	Resilience  Resilience  `koanf:"resilience"`
	HealthCheck HealthCheck `koanf:"health_check"`
}

// Key is one credential of a provider.
type Key struct {
	ID       string    `koanf:"id"`
	Secret   SecretRef `koanf:"secret"`
	Priority int       `koanf:"priority"`
	Weight   int       `koanf:"weight"`

	// Value is the resolved secret, filled in by Load.
	Value Secret `koanf:"-"`
}

// Model is one model a provider serves.
type Model struct {
	Name string `koanf:"name"`
	// Upstream is the name sent upstream (an Azure deployment, say);
	// Name when empty.
	Upstream string `koanf:"upstream"`
	// Kind is chat or embedding.
	Kind string `koanf:"kind"`
}

// Resilience holds per-provider overrides of the failure handling. Its
// fields are filled in by the hold engine issue; a zero value means "use the
// global defaults".
type Resilience struct {
	Breaker Breaker `koanf:"breaker"`
}

// Breaker configures the provider's circuit breaker.
type Breaker struct {
	Enabled             *bool         `koanf:"enabled"`
	Scope               string        `koanf:"scope"` // provider or model
	ConsecutiveFailures int           `koanf:"consecutive_failures"`
	Cooldown            time.Duration `koanf:"cooldown"`
}

// HealthCheck configures the prober's active check of a provider.
type HealthCheck struct {
	Path             string        `koanf:"path"`
	Method           string        `koanf:"method"`
	Body             string        `koanf:"body"`
	ExpectedStatuses []int         `koanf:"expected_statuses"`
	Interval         time.Duration `koanf:"interval"`
	Timeout          time.Duration `koanf:"timeout"`
	PerKey           bool          `koanf:"per_key"`
}

// Chain is a virtual model: an ordered list of steps.
type Chain struct {
	Steps []ChainStep `koanf:"steps"`
}

// ChainStep is one step of a chain, a provider/model target. An inactive
// step is skipped but keeps its place.
type ChainStep struct {
	Target string `koanf:"target"` // provider/model
	Active *bool  `koanf:"active"`

	// Unavailable is set by Load when the step's provider is an optional
	// provider that was skipped (see Config.Skipped). The step keeps its
	// place and is treated like an inactive step; switching it active does
	// not bring it back, since there is no provider to send to.
	Unavailable bool `koanf:"-"`
}

// IsActive reports whether the step takes traffic: true unless set false
// or unavailable.
func (s ChainStep) IsActive() bool { return !s.Unavailable && (s.Active == nil || *s.Active) }

// ClientKey is a gateway key a caller presents.
type ClientKey struct {
	ID     string    `koanf:"id"`
	Secret SecretRef `koanf:"secret"`
	// Models the key may use: model names, aliases, "chain:<name>",
	// "<provider>/*", or "*" for all.
	Models []string `koanf:"models"`

	// Value is the resolved secret, filled in by Load.
	Value Secret `koanf:"-"`
}

// SecretRef points at a secret: "env:NAME" or "file:/path". Secrets are
// never written inline in configuration files.
type SecretRef string
