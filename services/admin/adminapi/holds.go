package adminapi

import (
	"time"

	"switchyard.dev/shared/hold"
)

// Holds and providers (/admin/holds, /admin/providers/status).

// Hold is a hold record as the API shows it: the record (the switchyard_holds
// value) plus whether it keeps its scope out of rotation now and
// how long until it is due.
type Hold struct {
	hold.Record
	// Live: held or probing (a released record is ramping back).
	Live bool `json:"live"`
	// RemainingMS until Until (held) or RampUntil (released); 0 when due.
	RemainingMS int64 `json:"remaining_ms"`
}

// StatusQueued is Queued.Status of a 202 answer.
const StatusQueued = "queued"

// Queued is what a 202 answer of a write says (a release, a pin, a
// provider reset, a budget reset): applied by the admin service, written
// to NATS once JetStream answers; Message says what that means. The
// answer also names what was written and queued (ids).
type Queued struct {
	Status  string `json:"status"` // StatusQueued
	Message string `json:"message"`
}

// HoldList is GET /admin/holds: the holds that match the filters, and
// whether the admin service reaches NATS (false: the list may be stale).
type HoldList struct {
	Holds []Hold `json:"holds"`
	NATS  bool   `json:"nats"`
}

// ProvidersStatus is GET /admin/providers/status.
type ProvidersStatus struct {
	Providers   []ProviderStatus `json:"providers"`
	NATS        bool             `json:"nats"`
	Instance    string           `json:"instance"`
	GeneratedAt time.Time        `json:"generated_at"`
}

// Provider status pills.
const (
	StatusHealthy     = "healthy"
	StatusDegraded    = "degraded"
	StatusCircuitOpen = "circuit_open"
	StatusRecovering  = "recovering"
	StatusOffline     = "offline"
)

// ProviderStatus is one provider in GET /admin/providers/status.
type ProviderStatus struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Status is the dashboard pill: healthy, degraded (some targets held),
	// circuit_open, recovering (breaker half-open, or targets ramping back
	// after a release), offline (the provider, or every key, held).
	Status string `json:"status"`
	// CircuitState is closed, open, half-open, or disabled (no breaker).
	CircuitState string `json:"circuit_state"`
	// ModelCircuits is the state of each per-model breaker (breaker.scope model).
	ModelCircuits map[string]string `json:"model_circuits,omitempty"`
	// Health is the prober's verdict from switchyard_health (healthy,
	// degraded, unhealthy, unknown); unknown until the prober writes a
	// record.
	Health string `json:"health"`
	// HealthReason is the record's reason, if any.
	HealthReason string `json:"health_reason,omitempty"`
	// Holds of the provider and provider+model scopes.
	Holds      []Hold      `json:"holds"`
	Keys       []KeyStatus `json:"keys"`
	Resilience Resilience  `json:"resilience"`
}

// KeyStatus is one key of a ProviderStatus.
type KeyStatus struct {
	ID          string `json:"id"`
	Fingerprint string `json:"fingerprint"`
	Priority    int    `json:"priority"`
	Weight      int    `json:"weight"`
	// Enabled false: switched off by the configuration (no traffic, no
	// checks), still listed.
	Enabled   bool       `json:"enabled"`
	RotatedAt *time.Time `json:"rotated_at,omitempty"`
	// Health of the key (per-key checks), unknown without a record.
	Health string `json:"health"`
	// HealthReason is the key's record's reason, if any.
	HealthReason string `json:"health_reason,omitempty"`
	Holds        []Hold `json:"holds"`
	// Headroom is what the key's provider last stated is left of its
	// rate-limit windows, as the proxies report it (headroom routing);
	// absent when nothing was stated.
	Headroom []Headroom `json:"headroom,omitempty"`
}

// Headroom is one rate-limit window of a key as its provider last stated
// it in an answer to a proxy. A window whose reset has passed is shown
// whole (remaining = limit, share 1), as the proxies count it.
type Headroom struct {
	// Model is set where the provider scopes windows by model (OpenAI,
	// Anthropic): the window is the model's on the key.
	Model string `json:"model,omitempty"`
	// Kind is requests, tokens, input_tokens or output_tokens.
	Kind      string `json:"kind"`
	Limit     int64  `json:"limit,omitempty"`
	Remaining int64  `json:"remaining"`
	// Share is remaining over limit (absent: no limit stated).
	Share *float64  `json:"share,omitempty"`
	Reset time.Time `json:"reset"`
	// At is when the answer that stated it arrived.
	At time.Time `json:"at"`
}

// Resilience is the resilience settings in force for a provider.
type Resilience struct {
	Ladders         map[string]Ladder `json:"ladders"`
	StatedWaitFloor string            `json:"stated_wait_floor"`
	Jitter          float64           `json:"jitter"`
	Ramp            struct {
		StartShare float64 `json:"start_share"`
		Duration   string  `json:"duration"`
	} `json:"ramp"`
	Probe struct {
		Lease string `json:"lease"`
	} `json:"probe"`
	Breaker struct {
		Enabled             bool     `json:"enabled"`
		Scope               string   `json:"scope"`
		ConsecutiveFailures int      `json:"consecutive_failures"`
		Cooldown            string   `json:"cooldown"`
		MaxCooldown         string   `json:"max_cooldown"`
		FailureOnStatuses   []string `json:"failure_on_statuses"`
	} `json:"breaker"`
	AllHeldPolicy string     `json:"all_held_policy"`
	TripOn        []TripRule `json:"trip_on"`
	// TripOnSource is "provider" when the provider's own trip_on replaces
	// the global rules, else "global".
	TripOnSource string `json:"trip_on_source"`
}

// Ladder is a class's hold ladder: base and ceiling.
type Ladder struct {
	Base    string `json:"base"`
	Ceiling string `json:"ceiling"`
}

// TripRule is one trip_on rule in force.
type TripRule struct {
	Name  string `json:"name"`
	Match string `json:"match"`
	Class string `json:"class"`
	TTL   string `json:"ttl,omitempty"`
}
