// Package health is Switchyard's health records: what the prober's active
// checks found about each provider and each key, kept in the
// switchyard_health KV bucket (one JSON record per target), published as
// health events on switchyard.events.health.<provider>[.<key id>], and read
// by proxies from memory through a View fed by a KV watcher.
//
// Health is advice: a proxy uses it to prefer healthy targets and to hide
// offline providers' models from GET /v1/models, never to bring back a
// target the hold engine holds. Holds (shared/hold) stay the authority on
// what is out of rotation.
package health

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/redact"
)

// SchemaVersion is the version of the Record and Event JSON.
const SchemaVersion = 1

// Status is a target's health.
type Status string

// The statuses.
const (
	// Unknown: no check has answered yet, or the provider has no check
	// (no path configured, or checks disabled); Reason says which.
	Unknown Status = "unknown"
	// Healthy: the last check passed.
	Healthy Status = "healthy"
	// Degraded: the last check failed but fewer than unhealthy_after in a
	// row, or it passed slower than degraded_latency, or the active check
	// alone says healthy (or unknown) but the real requests proxies
	// reported in the passive window failed too often
	// (prober.passive_degraded_failures and passive_degraded_ratio;
	// PassiveDegraded is set then). Degraded is advice: routing prefers
	// other targets, Offline stays false.
	Degraded Status = "degraded"
	// Unhealthy: unhealthy_after or more checks in a row failed.
	Unhealthy Status = "unhealthy"
)

// Circuit states of a record (the provider-scope hold, as the prober saw
// it when it wrote the record).
const (
	CircuitClosed   = "closed"
	CircuitOpen     = "open"
	CircuitHalfOpen = "half-open"
)

// anyKey stands for the provider itself in a record id, as in hold ids.
const anyKey = "_"

// ID is the KV key of a target's record: <provider>._ for the provider,
// <provider>.<key id> for one key (the same form as hold scope ids).
func ID(provider, keyID string) string {
	if keyID == "" {
		keyID = anyKey
	}
	return provider + "." + keyID
}

// ParseID is the inverse of ID.
func ParseID(id string) (provider, keyID string, err error) {
	p, k, ok := strings.Cut(id, ".")
	if !ok || p == "" || k == "" || strings.Contains(k, ".") {
		return "", "", errors.New("health id: want <provider>.<key id|_>: " + id)
	}
	if k == anyKey {
		k = ""
	}
	return p, k, nil
}

// Check is what a check sends.
type Check struct {
	Method string `json:"method"`
	Path   string `json:"path"`
}

// Record is one target's health as stored in switchyard_health (JSON). It
// never contains a secret: keys are named by id.
type Record struct {
	Version  int    `json:"v"`
	ID       string `json:"id"`
	Provider string `json:"provider"`
	Key      string `json:"key,omitempty"` // "" for the provider record
	Status   Status `json:"status"`
	// Reason explains the status in a few words ("no health_check.path
	// configured", "HTTP 503", "dial tcp: connection refused").
	Reason string `json:"reason,omitempty"`
	// CircuitState is the provider-scope hold's state: closed (none),
	// open (held) or half-open (due, or its probe is out).
	CircuitState string `json:"circuit_state"`
	// ActiveCheckOK is the result of the last active check (null when none
	// ran).
	ActiveCheckOK *bool  `json:"active_check_ok"`
	Check         *Check `json:"check,omitempty"`
	// PassiveSuccess and PassiveFailure count the caller attempts at the
	// target that proxies reported (PassiveReport) over the writing
	// prober's passive window: a provider record sums its keys.
	PassiveSuccess uint64 `json:"passive_success"`
	PassiveFailure uint64 `json:"passive_failure"`
	// PassiveByKey breaks a provider record's passive counts down by key
	// id (keys without attempts in the window are left out).
	PassiveByKey map[string]PassiveCounts `json:"passive_by_key,omitempty"`
	// PassiveLatencyMS is the average latency (ms, to the upstream's
	// response headers) of the successful caller attempts in the passive
	// window: a provider record over all its keys, a key record its own
	// (0 when none succeeded).
	PassiveLatencyMS float64 `json:"passive_latency_ms"`
	// PassiveLatencyByModel is, on provider records, the same average by
	// model (the configuration's model name); models without a successful
	// attempt in the window are left out.
	PassiveLatencyByModel map[string]float64 `json:"passive_latency_by_model,omitempty"`
	// PassiveDegraded reports that Status is degraded by the passive rule:
	// the active check alone says healthy (or there is none: unknown), but
	// at least prober.passive_degraded_failures of the real requests in
	// the window failed, and at least prober.passive_degraded_ratio of
	// them. Reason says so ("passive: 4 of 6 real requests failed in the
	// last 5m0s"). It clears by itself once the window no longer meets
	// the rule.
	PassiveDegraded     bool `json:"passive_degraded,omitempty"`
	ConsecutiveFailures int  `json:"consecutive_failures"`
	// AvgLatencyMS is an exponentially weighted average (alpha 0.3) of
	// check latencies.
	AvgLatencyMS float64 `json:"avg_latency_ms"`
	LastStatus   int     `json:"last_status,omitempty"` // HTTP status of the last check, 0 for a network error
	// LastErrorCode and LastErrorClass describe the last failed check (the
	// provider's error code and the classifier's class).
	LastErrorCode  string    `json:"last_error_code,omitempty"`
	LastErrorClass string    `json:"last_error_class,omitempty"`
	CheckedAt      time.Time `json:"checked_at,omitzero"`
	// CooldownUntil is when the provider-scope hold becomes due (zero when
	// none).
	CooldownUntil time.Time `json:"cooldown_until,omitzero"`
	// Models are the model ids the provider listed at its last discovery
	// (provider records only).
	Models   []string  `json:"models,omitempty"`
	ModelsAt time.Time `json:"models_at,omitzero"`
	// CheckedBy is the instance id of the prober that wrote the record.
	CheckedBy string `json:"checked_by"`
	// UpdatedAt is when the record was last written, by any write (a
	// check, a passive refresh, a discovery), in UTC. Store.Put sets it.
	UpdatedAt time.Time `json:"updated_at,omitzero"`

	// Revision is the bucket revision of the value (not serialised).
	Revision uint64 `json:"-"`
}

// Offline reports whether the record says the target is out: unhealthy,
// or its provider-scope hold is open.
func (r Record) Offline() bool { return r.Status == Unhealthy || r.CircuitState == CircuitOpen }

// EventKind is the kind token of health events.
const EventKind = "health"

// Event is published on switchyard.events.health.<provider>[.<key id>]
// when a target's status changes.
type Event struct {
	Version   int       `json:"v"`
	Kind      string    `json:"kind"` // "health"
	Provider  string    `json:"provider"`
	Key       string    `json:"key,omitempty"`
	Status    Status    `json:"status"`
	Previous  Status    `json:"previous"`
	Reason    string    `json:"reason,omitempty"`
	Code      string    `json:"code,omitempty"`
	Class     string    `json:"class,omitempty"`
	CheckedAt time.Time `json:"checked_at,omitzero"`
	// RecordedBy is the instance id of the publisher.
	RecordedBy string    `json:"recorded_by"`
	At         time.Time `json:"at"`
}

// EventFor is the event of a record whose status moved from previous.
func EventFor(rec Record, previous Status, at time.Time) Event {
	return Event{
		Version: SchemaVersion, Kind: EventKind, Provider: rec.Provider, Key: rec.Key,
		Status: rec.Status, Previous: previous, Reason: rec.Reason, Code: rec.LastErrorCode,
		Class: rec.LastErrorClass, CheckedAt: rec.CheckedAt, RecordedBy: rec.CheckedBy, At: at.UTC(),
	}
}

// Publish sends ev on its subject with a core NATS publish (best effort:
// the SWITCHYARD_EVENTS stream captures it; the bucket is the source of
// truth). Reasons are masked for anything that looks like a credential.
func Publish(nc *nats.Conn, ev Event) error {
	if ev.Version == 0 {
		ev.Version = SchemaVersion
	}
	ev.Kind = EventKind
	ev.Reason = redact.String(ev.Reason)
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return nc.Publish(bus.EventSubject(EventKind, ev.Provider, ev.Key), data)
}
