package failure

import "slices"

// Action is what the proxy does after a failed attempt.
type Action uint8

// The actions.
const (
	// Return gives the upstream's answer to the caller: the request itself
	// is at fault, or nothing says another target would do better.
	Return Action = iota
	// RetrySame tries the same target again after a backoff.
	RetrySame
	// Rotate moves on: the next key of the step, then the next step.
	Rotate
)

func (a Action) String() string {
	switch a {
	case RetrySame:
		return "retry_same"
	case Rotate:
		return "rotate"
	}
	return "return"
}

// Meaning is what a failure class means to every part of Switchyard: the
// proxy's next move, whether a failure holds its target and how widely,
// whether the hold is soft, whether the failure counts against the target
// in health figures. It is one table (Class.Meaning) that the proxy, the
// hold engine, the prober and the admin service all read.
type Meaning struct {
	// Action is what the proxy does next (before the operator's
	// retry.on_statuses / retry.rotate_on_statuses lists, see InPlace).
	Action Action
	// InPlace: the operator's retry.on_statuses and retry.rotate_on_statuses
	// apply to this class. False where the class decides alone: a revoked
	// key or an exhausted quota (no backoff fixes them) and a request the
	// provider refused for what it asked (a 429 "request too large for
	// TPM" goes back to the caller after one attempt, never to every key).
	InPlace bool
	// Holds: a failure of this class holds its target by itself (a
	// transient failure holds only through the circuit breaker).
	Holds bool
	// Scope is the default hold scope (the classifier narrows a rate limit
	// to key+model when the provider names a per-model limit; trip_on
	// rules may set their own).
	Scope Scope
	// Soft: a hold of this class (or a breaker trip, for transient) may be
	// tried in declared order when every candidate is held and
	// resilience.all_held_policy is try_soft.
	Soft bool
	// Blames: the failure counts against the target in passive health (a
	// rejected request or an unrecognised answer does not).
	Blames bool
	// CheapCheck: the prober can settle a due hold of this class without a
	// caller's request (list models with the key, fetch the model's entry,
	// run the provider's health check), so callers leave it the first claim
	// (resilience.probe.caller_grace).
	CheapCheck bool
}

// meanings is the table; the architecture section of the README shows it.
var meanings = [...]Meaning{
	Unrecognised:       {Action: Return, InPlace: true},
	Transient:          {Action: RetrySame, InPlace: true, Soft: true, Blames: true, CheapCheck: true},
	RateLimit:          {Action: Rotate, InPlace: true, Holds: true, Scope: ScopeKey, Soft: true, Blames: true},
	CredentialRejected: {Action: Rotate, Holds: true, Scope: ScopeKey, Blames: true, CheapCheck: true},
	QuotaExhausted:     {Action: Rotate, Holds: true, Scope: ScopeKey, Blames: true, CheapCheck: true},
	ModelNotAccessible: {Action: Rotate, InPlace: true, Holds: true, Scope: ScopeKeyModel, Blames: true, CheapCheck: true},
	ModelRetired:       {Action: Rotate, InPlace: true, Holds: true, Scope: ScopeKeyModel, Blames: true, CheapCheck: true},
	RegionBlocked:      {Action: Rotate, InPlace: true, Holds: true, Scope: ScopeKeyModel, Blames: true},
	RequestRejected:    {Action: Return},
}

// Meaning returns what the class means (the Unrecognised row for an
// unknown value).
func (c Class) Meaning() Meaning {
	if int(c) < len(meanings) {
		return meanings[c]
	}
	return meanings[Unrecognised]
}

// Settlement is how the probe of a hold reads a failure.
type Settlement uint8

// The settlements of a failed probe.
const (
	// Escalate: the same refusal; the hold climbs one rung.
	Escalate Settlement = iota
	// SameRung: a transient failure (5xx, network) says nothing about the
	// held scope; the hold waits again on its rung.
	SameRung
	// Settle: a different answer came back, so the held refusal is over;
	// the hold is released and the new failure, if it holds, is recorded
	// on its own scope.
	Settle
)

// ProbeSettlement is how a failed probe of a hold of class held settles
// when the probe's failure is of class got.
func ProbeSettlement(held, got Class) Settlement {
	switch {
	case got == held:
		return Escalate
	case got == Transient:
		return SameRung
	}
	return Settle
}

// RetryPolicy is the operator's retry lists (config retry.on_statuses,
// retry.rotate_on_statuses, retry.on_transport_errors).
type RetryPolicy struct {
	OnStatuses        []int
	RotateOnStatuses  []int
	OnTransportErrors bool
}

// ActionFor is what the proxy does after an attempt that failed with r:
// status is the answer's (0: no answer, a transport failure), stream that
// it was an error event of a stream. A transport failure is retried in
// place when the policy says so, except a timeout, which rotates (the
// retry budget is for fast failures: a hung target would cost the attempt
// timeout twice); the policy's status lists apply to the classes that
// allow them (Meaning.InPlace); otherwise the class decides, except that
// an answer with a status is retried in place only when on_statuses
// lists it (a transient 501 the operator did not list rotates; an empty
// list retries no status in place).
func (r Result) ActionFor(status int, stream bool, p RetryPolicy) Action {
	m := r.Class.Meaning()
	switch {
	case r.Class == RequestRejected && r.KeyDependent:
		return Rotate // another key may be served: nothing is held
	case status == 0 && !stream && r.Class == Transient:
		if p.OnTransportErrors && r.Code != "timeout" {
			return RetrySame
		}
		return Rotate
	case m.InPlace && slices.Contains(p.OnStatuses, status):
		return RetrySame
	case m.InPlace && slices.Contains(p.RotateOnStatuses, status):
		return Rotate
	case m.Action == RetrySame && status != 0:
		return Rotate // a status retry.on_statuses does not list is not retried in place
	}
	return m.Action
}
