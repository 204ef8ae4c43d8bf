// Package config holds Switchyard's one typed configuration: loaded once with
// koanf (defaults -> one YAML file -> SWITCHYARD_* environment), validated,
// and passed down to every service.
//
// Every field here is documented in configs/README.md; a test fails when one
// is not.
package config

import (
	"time"

	"switchyard.dev/shared/failure"
)

// Config is the whole configuration shared by the proxy, prober and admin
// services. Each service reads the sections it needs.
type Config struct {
	Log      Log      `koanf:"log"`
	NATS     NATS     `koanf:"nats"`
	Proxy    Proxy    `koanf:"proxy"`
	Prober   Prober   `koanf:"prober"`
	Admin    Admin    `koanf:"admin"`
	Limits   Limits   `koanf:"limits"`
	Timeouts Timeouts `koanf:"timeouts"`
	Retry    Retry    `koanf:"retry"`
	// Resilience is the global failure handling (holds, ladder, ramp,
	// probes, breaker); providers override it field by field.
	Resilience Resilience `koanf:"resilience"`
	// TripOn holds the global operator rules, by name.
	TripOn    map[string]TripRule `koanf:"trip_on"`
	Providers []Provider          `koanf:"providers"`
	Aliases   map[string]string   `koanf:"aliases"`
	Chains    map[string]Chain    `koanf:"chains"`
	Clients   []ClientKey         `koanf:"clients"`
	// Guardrails are the checks routes, plans and clients attach by name.
	Guardrails []Guardrail `koanf:"guardrails"`
	// Credentials configures secrets rotated through the admin API.
	Credentials Credentials `koanf:"credentials"`
	// Metering configures usage records; Plans the limits client keys
	// name; Prices override the bundled price table.
	Metering Metering        `koanf:"metering"`
	Plans    map[string]Plan `koanf:"plans"`
	Prices   []Price         `koanf:"prices"`
	// Routing is how targets are chosen where the configuration leaves a
	// choice (plain model names, chains without a strategy of their own).
	Routing Routing `koanf:"routing"`
	// Debug configures request debug bundles (process-level: each proxy
	// reads its own).
	Debug Debug `koanf:"debug"`
	// Telemetry configures OpenTelemetry trace export.
	Telemetry Telemetry `koanf:"telemetry"`
	// Cache bounds the fleet's response cache (which requests are cached
	// is the routes', plans' and client keys' cache policies).
	Cache Cache `koanf:"cache"`

	// File is the path the configuration was loaded from ("" when none).
	File string `koanf:"-"`
	// Skipped lists the optional providers Load removed because none of
	// their keys' secrets could be resolved (see Provider.Optional).
	Skipped []string `koanf:"-"`
	// TripRules are the global trip_on rules compiled by Load: TripOn
	// (sorted by name) followed by the SWITCHYARD_TRIP_<NAME>_* rules of
	// the environment (an environment rule replaces a file rule of the
	// same name).
	TripRules []failure.Rule `koanf:"-"`
	// Warnings are lines for the launcher to log: one per skipped provider
	// and per dropped key of an optional provider, naming the unset
	// variable or missing file (never a secret value).
	Warnings []string `koanf:"-"`

	// fromEnv maps each key path set from the environment to its variable,
	// so that messages about it name the variable.
	fromEnv map[string]string
	// fileRefs are the secret references the routing keys of the
	// process's file make (kept through LoadOverlay): a routing version
	// may use them, whatever credentials.references says.
	fileRefs map[SecretRef]bool
	// docName names the routing document the routable keys came from
	// (LoadDocument), for messages about them.
	docName string
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
	// PingInterval is how often a service pings its NATS server; two
	// pings unanswered and it takes the connection for dead and reconnects
	// (to another server of a cluster). A server that vanishes without
	// closing its sockets (power loss, a partition) is noticed in two to
	// three intervals.
	PingInterval time.Duration `koanf:"ping_interval"`
	Embedded     Embedded      `koanf:"embedded"`
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
	// PassiveReportInterval is how often the proxy publishes the outcomes
	// of its attempts per target (switchyard.passive.<provider>) for the
	// prober's health records; 0 turns the reports off.
	PassiveReportInterval time.Duration `koanf:"passive_report_interval"`
	// StartupWait bounds how long a proxy with NATS waits, before it
	// accepts traffic, for the fleet's holds and rotated secrets to load;
	// past it the proxy serves from its configuration (and says so). 0
	// does not wait.
	StartupWait time.Duration `koanf:"startup_wait"`
	// ShutdownDelay: on SIGTERM the proxy keeps serving this long with
	// /readyz answering 503 draining, so that load balancers stop sending
	// before it stops accepting. 0 stops accepting at once.
	ShutdownDelay time.Duration `koanf:"shutdown_delay"`
	// ShutdownTimeout bounds how long requests in flight (streams
	// included) may finish once the proxy stops accepting; those still
	// running are then cut, and recorded.
	ShutdownTimeout time.Duration `koanf:"shutdown_timeout"`
	// WriteTimeout bounds writing one whole answer that is not relayed as
	// it arrives (a JSON answer, a passthrough download) to the caller: a
	// caller that stops reading it is cut instead of keeping its
	// connection for good. It bounds the whole answer, not each write. Relayed answers are bounded by
	// timeouts.stream_idle instead. 0: no bound.
	WriteTimeout time.Duration `koanf:"write_timeout"`
	// RetryAfterBound is the longest Retry-After a caller's SDK is left to
	// wait out: an answer whose Retry-After is longer also says
	// X-Should-Retry: false (the OpenAI and Anthropic SDKs would sleep
	// the whole wait before retrying). 0: always.
	RetryAfterBound time.Duration `koanf:"retry_after_bound"`
}

// Limits bound what one proxy accepts.
type Limits struct {
	MaxInFlight  int `koanf:"max_in_flight"`
	MaxBodyBytes int `koanf:"max_body_bytes"`
	MaxAttempts  int `koanf:"max_attempts"`
	// The listener limits of every service (proxy, prober, admin):
	// ReadTimeout bounds reading one request (headers and body), so a
	// slow sender is cut; IdleTimeout closes a keep-alive connection
	// waiting for its next request; MaxConnections caps the open
	// connections of one listener (more are answered 503 and closed).
	ReadTimeout    time.Duration `koanf:"read_timeout"`
	IdleTimeout    time.Duration `koanf:"idle_timeout"`
	MaxConnections int           `koanf:"max_connections"`
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
	// Selection among keys of equal priority: round_robin, weighted or
	// least_latency.
	Selection string `koanf:"selection"`
	// HashOn makes weighted selection sticky: the key is chosen by a
	// stable hash of a request attribute (client, user, header:<Name>)
	// instead of smooth weighted round robin.
	HashOn string `koanf:"hash_on"`
	// PriorityOrder is highest_first (the default: a larger priority is
	// tried first) or lowest_first (priority 1 before 2).
	PriorityOrder string `koanf:"priority_order"`
	// AllowUnlistedModels lets callers name a model the provider does not
	// list, as "<provider>/<model>": tried on the provider instead of 404.
	AllowUnlistedModels bool `koanf:"allow_unlisted_models"`
	// Region is where the provider serves from (eu, us-east, ...), for
	// region routing; "" is no region.
	Region string `koanf:"region"`
	// Budget caps the provider's spend (USD per day, week, month,
	// fleet-wide): a provider over it is skipped, and budget_aware
	// routing skips it when the request's estimated cost exceeds what is
	// left.
	Budget      Budget      `koanf:"budget"`
	Timeouts    Timeouts    `koanf:"timeouts"`
	Resilience  Resilience  `koanf:"resilience"`
	HealthCheck HealthCheck `koanf:"health_check"`
	// TripOn, when set (even empty), replaces the global trip_on rules for
	// this provider.
	TripOn map[string]TripRule `koanf:"trip_on"`

	// TripRules is TripOn compiled by Load (sorted by name); nil when
	// TripOn is not set.
	TripRules []failure.Rule `koanf:"-"`
}

// Key is one credential of a provider.
type Key struct {
	ID       string    `koanf:"id"`
	Secret   SecretRef `koanf:"secret"`
	Priority int       `koanf:"priority"`
	Weight   int       `koanf:"weight"`
	// Enabled false takes the key out of rotation (and out of the
	// prober's checks) without removing it; unset means enabled.
	Enabled *bool `koanf:"enabled"`

	// Value is the resolved secret, filled in by Load.
	Value Secret `koanf:"-"`
}

// IsEnabled reports whether the key takes traffic (enabled unless set
// false).
func (k Key) IsEnabled() bool { return k.Enabled == nil || *k.Enabled }

// Model is one model a provider serves.
type Model struct {
	Name string `koanf:"name"`
	// Upstream is the name sent upstream (an Azure deployment, say);
	// Name when empty.
	Upstream string `koanf:"upstream"`
	// Kind is chat or embedding.
	Kind string `koanf:"kind"`
	// Capabilities the model has (tools, vision, audio, json_schema,
	// reasoning); unset: unknown (capability routing gives it the
	// benefit of the doubt unless fail_closed).
	Capabilities []string `koanf:"capabilities"`
	// ContextWindow and MaxOutput are in tokens (0: unknown).
	ContextWindow int `koanf:"context_window"`
	MaxOutput     int `koanf:"max_output"`
	// Guardrails the requests routed to the model (by its name, an alias
	// or provider/model) run (see Effective).
	Guardrails []string `koanf:"guardrails"`
	// Cache keeps the answers of requests routed to the model (see
	// EffectiveCache).
	Cache CachePolicy `koanf:"cache"`
}

// Resilience is the failure handling: the hold ladder, stated waits,
// jitter, the ramp, probe leases, the circuit breaker and the all-held
// policy. The same shape serves as the global section (resilience) and as a
// provider's overrides (providers[].resilience): a zero value (or nil
// pointer) means "inherit" (the global value, or the hold engine's
// default). The engine's policy is built by hold.PolicyFromConfig.
type Resilience struct {
	Ladder Ladders `koanf:"ladder"`
	// StatedWaitFloor is the shortest hold a provider-stated wait gives.
	StatedWaitFloor time.Duration `koanf:"stated_wait_floor"`
	// Jitter is the fraction (0 to <1) by which a ladder wait varies either
	// way, so that a fleet does not re-check in step.
	Jitter *float64 `koanf:"jitter"`
	Ramp   Ramp     `koanf:"ramp"`
	Probe  Probe    `koanf:"probe"`
	// Breaker configures the circuit breaker.
	Breaker Breaker `koanf:"breaker"`
	// AllHeldPolicy is what the proxy does when every candidate is held:
	// fail_fast (503) or try_soft (try holds of soft classes in declared
	// order).
	AllHeldPolicy string `koanf:"all_held_policy"`
	// CorrelateKeys: when this many keys of a provider are held for the
	// same model-level refusal (model_not_accessible, model_retired,
	// region_blocked) of one model, the provider+model is held too, so a
	// retired model costs that many calls, not one per key. 0 turns it
	// off; unset: 2 (or the global value, for a provider).
	CorrelateKeys *int `koanf:"correlate_keys"`
}

// Ladders holds the ladder of each class that holds.
type Ladders struct {
	RateLimit          Ladder `koanf:"rate_limit"`
	CredentialRejected Ladder `koanf:"credential_rejected"`
	QuotaExhausted     Ladder `koanf:"quota_exhausted"`
	ModelNotAccessible Ladder `koanf:"model_not_accessible"`
	ModelRetired       Ladder `koanf:"model_retired"`
	RegionBlocked      Ladder `koanf:"region_blocked"`
}

// Ladder is one class's hold ladder: the first wait and the longest.
type Ladder struct {
	Base    time.Duration `koanf:"base"`
	Ceiling time.Duration `koanf:"ceiling"`
}

// Ramp is how a released target returns: its share of traffic grows from
// StartShare to 1 over Duration.
type Ramp struct {
	StartShare *float64      `koanf:"start_share"`
	Duration   time.Duration `koanf:"duration"`
}

// Probe configures the fleet-wide probe of a due hold.
type Probe struct {
	// Lease is how long the one probe may take before another instance
	// may take the right to probe.
	Lease time.Duration `koanf:"lease"`
	// CallerGrace is how long after a hold falls due the proxies leave its
	// probe to the prober, for the classes the prober settles with a cheap
	// check (no caller's request spent); then a caller's request may probe.
	CallerGrace time.Duration `koanf:"caller_grace"`
}

// Breaker configures the circuit breaker.
type Breaker struct {
	Enabled *bool  `koanf:"enabled"`
	Scope   string `koanf:"scope"` // provider or model
	// ConsecutiveFailures trips the breaker; 0 switches it off (unset:
	// inherit; the default is 5).
	ConsecutiveFailures *int          `koanf:"consecutive_failures"`
	Cooldown            time.Duration `koanf:"cooldown"`
	// MaxCooldown is the ceiling of a breaker hold's ladder (a probe that
	// fails again doubles the cooldown).
	MaxCooldown time.Duration `koanf:"max_cooldown"`
	// FailureOnStatuses lists the statuses whose transient failures count
	// ("503", or a class such as "5xx"); transport errors and timeouts
	// always count. Unset: inherit; an explicit empty list: no status
	// counts.
	FailureOnStatuses []string `koanf:"failure_on_statuses"`
	// SuccessThreshold is how many consecutive successful probes release a
	// breaker hold (0: inherit; the default is 1).
	SuccessThreshold int `koanf:"success_threshold"`
}

// TripRule is one operator trip_on rule: a regex tried case-insensitively
// on the provider's error code, type, status text and message, the class it
// means, and optionally the hold duration.
type TripRule struct {
	Match string        `koanf:"match"`
	Class string        `koanf:"class"`
	TTL   time.Duration `koanf:"ttl"`
}

// HealthCheck configures the prober's active check of a provider. Unset
// fields take the provider type's default (its models endpoint, see
// DefaultHealthPath) or the prober section's.
type HealthCheck struct {
	// Enabled false switches the provider's active checks off (unset: on).
	Enabled          *bool         `koanf:"enabled"`
	Path             string        `koanf:"path"`
	Method           string        `koanf:"method"`
	Body             string        `koanf:"body"`
	ExpectedStatuses []int         `koanf:"expected_statuses"`
	Interval         time.Duration `koanf:"interval"`
	Timeout          time.Duration `koanf:"timeout"`
	PerKey           bool          `koanf:"per_key"`
	// Discovery switches the prober's model discovery of the provider on
	// or off (unset: as Enabled).
	Discovery *bool `koanf:"discovery"`
}

// Chain is a virtual model: an ordered list of steps.
type Chain struct {
	Steps []ChainStep `koanf:"steps"`
	// Strategy orders the steps (routing.strategy when unset).
	Strategy string `koanf:"strategy"`
	// HashOn makes the weighted strategy sticky (routing.hash_on when
	// unset).
	HashOn string `koanf:"hash_on"`
	// Region is the region the region_affinity strategy prefers when the
	// request names none.
	Region string `koanf:"region"`
	// FailClosed rejects steps of unknown health or missing metadata
	// (routing.fail_closed when unset).
	FailClosed *bool `koanf:"fail_closed"`
	// Guardrails the chain's requests run (see Effective).
	Guardrails []string `koanf:"guardrails"`
	// Cache keeps the chain's answers (see EffectiveCache).
	Cache CachePolicy `koanf:"cache"`
}

// ChainStep is one step of a chain, a provider/model target. An inactive
// step is skipped but keeps its place.
type ChainStep struct {
	Target string `koanf:"target"` // provider/model
	Active *bool  `koanf:"active"`
	// Weight is the step's share under the weighted strategy (default 1).
	Weight int `koanf:"weight"`

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
	// Plan names the plan (plans.<name>) whose limits the key's requests
	// count against; "" for none.
	Plan string `koanf:"plan"`
	// Region is the region the key's requests prefer (or, with
	// RegionRequired, must be served in) when they name none.
	Region         string `koanf:"region"`
	RegionRequired bool   `koanf:"region_required"`
	// Guardrails the key's requests run, over its route's and plan's
	// (see Effective).
	Guardrails []string `koanf:"guardrails"`
	// Cache is the key's cache policy, over its route's and plan's (see
	// EffectiveCache).
	Cache CachePolicy `koanf:"cache"`

	// Value is the resolved secret, filled in by Load.
	Value Secret `koanf:"-"`
}

// SecretRef points at a secret: "env:NAME" or "file:/path". Secrets are
// never written inline in configuration files.
type SecretRef string
