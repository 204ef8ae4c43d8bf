package hold

import (
	"time"

	"switchyard.dev/shared/failure"
)

// EventKind names an event published on switchyard.events.<kind>.>.
type EventKind string

// The event kinds.
const (
	EventHold       EventKind = "hold"
	EventRelease    EventKind = "release"
	EventTrip       EventKind = "trip"
	EventProbe      EventKind = "probe"
	EventHealth     EventKind = "health"
	EventCredential EventKind = "credential"
	// EventBudget: a client's budget was exhausted (outcome "exhausted",
	// recorded once fleet-wide) or reset by an operator ("reset"). Its
	// subject is switchyard.events.budget.<client id>.
	EventBudget EventKind = "budget"
	// EventGuardrail: a guardrail blocked a request or its answer
	// (outcome "blocked"), published by the proxy that blocked it, on
	// switchyard.events.guardrail.<client id>.
	EventGuardrail EventKind = "guardrail"
)

// EventSchemaVersion is the version of the Event JSON.
const EventSchemaVersion = 1

// Event is what the fleet publishes for subscribers (JSON on
// switchyard.events.<kind>.<provider>[.<key id>], captured by the
// SWITCHYARD_EVENTS stream). It carries key ids and fingerprints only.
type Event struct {
	Version     int           `json:"v"`
	Kind        EventKind     `json:"kind"`
	HoldID      string        `json:"hold_id,omitempty"`
	Scope       Scope         `json:"scope"`
	Class       failure.Class `json:"class"`
	Rung        int           `json:"rung"`
	Until       time.Time     `json:"until,omitzero"`
	Reason      string        `json:"reason,omitempty"`
	Code        string        `json:"code,omitempty"`
	Fingerprint string        `json:"fingerprint,omitempty"`
	// Outcome of a probe (released, escalated, same_rung, settled,
	// counted), of a release (probe, prober, admin, credential, expired)
	// or of a credential rotation (rotated).
	Outcome string `json:"outcome,omitempty"`
	// ProbeSuccesses is the hold record's count of consecutive successful
	// probes (a trip hold that needs breaker.success_threshold of them).
	ProbeSuccesses int    `json:"probe_successes,omitempty"`
	Source         string `json:"source,omitempty"`
	// RequestID is the caller's request whose attempt caused the event
	// (a hold or trip recorded from its failure, a probe it made): the id
	// of its debug bundle. Empty for the prober's and operators' events.
	RequestID  string    `json:"request_id,omitempty"`
	RecordedBy string    `json:"recorded_by"`
	At         time.Time `json:"at"`

	// Budget events: the client key id, its plan, the period (day, week
	// or month) and its id (d20261130, w2026W49, m202611), the spend and
	// the budget in USD.
	Client    string  `json:"client,omitempty"`
	Plan      string  `json:"plan,omitempty"`
	Period    string  `json:"period,omitempty"`
	PeriodID  string  `json:"period_id,omitempty"`
	SpendUSD  float64 `json:"spend_usd,omitempty"`
	BudgetUSD float64 `json:"budget_usd,omitempty"`

	// Guardrail events (and Client, Plan, RequestID): the guardrail that
	// blocked, its stage (input or output) and what it found (a pattern's
	// name, a limit: never the matched text), and the route.
	Guardrail string `json:"guardrail,omitempty"`
	Stage     string `json:"stage,omitempty"`
	Check     string `json:"check,omitempty"`
	Route     string `json:"route,omitempty"`
}

// Emitter publishes events. Emit must not block the caller (publishers
// buffer or drop with a metric, never stall a request).
type Emitter interface {
	Emit(Event)
}
