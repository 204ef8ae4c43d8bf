package hold

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"switchyard.dev/shared/failure"
)

// breakers are the circuit breakers of this process, per provider (model
// "") or per provider+model. gobreaker counts consecutive transient
// failures and decides the trip; the trip becomes a fleet hold (class
// transient, source breaker), and the hold's lifecycle (cooldown, one
// probe, ramp) replaces gobreaker's own half-open timer: when the hold is
// released, the breaker starts over closed. A trip that finds its scope
// already held (an operator's pin, a keyless provider's rate limit) records
// nothing; the breaker stays open under that hold and starts over closed
// when it ends, whatever its class.
type breakers struct {
	mu sync.Mutex
	m  map[string]map[string]*breaker
}

type breaker struct {
	cb              *gobreaker.CircuitBreaker[struct{}]
	provider, model string
	// threshold is the policy's consecutive_failures as of the last count
	// (a runtime routing change applies to breakers already made).
	threshold atomic.Int64
	// last is what the last failure counted asked (its trip records it).
	last atomic.Pointer[Tripped]
}

var (
	errTransient = errors.New("transient failure")
	okFn         = func() (struct{}, error) { return struct{}{}, nil }
	failFn       = func() (struct{}, error) { return struct{}{}, errTransient }
)

// gobreaker's own open timeout: long enough never to fire, since the
// hold's lifecycle decides when the provider comes back.
const breakerNeverHalfOpen = 365 * 24 * time.Hour

func (e *Engine) newBreaker(provider, model string, threshold int) *breaker {
	b := &breaker{provider: provider, model: model}
	b.threshold.Store(int64(threshold))
	name := provider
	if model != "" {
		name += "/" + model
	}
	b.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1,
		Timeout:     breakerNeverHalfOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return int64(c.ConsecutiveFailures) >= b.threshold.Load() },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				e.trip(provider, model, int(b.threshold.Load()), b.last.Load())
			}
		},
	})
	return b
}

// breakerFor returns the breaker of provider (and model), creating it,
// with threshold as its trip point from now on.
func (e *Engine) breakerFor(provider, model string, threshold int) *breaker {
	e.brk.mu.Lock()
	defer e.brk.mu.Unlock()
	pm := e.brk.m[provider]
	if pm == nil {
		pm = map[string]*breaker{}
		e.brk.m[provider] = pm
	}
	b := pm[model]
	if b == nil {
		b = e.newBreaker(provider, model, threshold)
		pm[model] = b
	} else {
		b.threshold.Store(int64(threshold))
	}
	return b
}

// breakerReport feeds one attempt to the breaker: successes reset the
// count, transient failures (with a counted status, or a transport error
// or local timeout) add one. Retrying attempts (one retry sequence counts
// once), cancellations and failures of other classes are not counted.
// What the breaker counted goes to the fleet as a Tally (a success only
// when it reset a count), so every engine counts the fleet's failures.
func (e *Engine) breakerReport(set *Settings, provider, model string, out Outcome) {
	bp := &set.Breaker
	if !bp.Enabled || bp.ConsecutiveFailures <= 0 || out.Retrying || out.Cancelled {
		return
	}
	if !out.OK && (out.Result.Class != failure.Transient || !bp.countsForBreaker(out.Status)) {
		return
	}
	target := model // the model the attempt asked for, whatever the breaker's scope
	if !bp.PerModel {
		model = ""
	}
	var cause *Tripped
	if !out.OK {
		cause = &Tripped{Operation: out.Operation, Model: target}
	}
	if n, counted := e.breakerCount(provider, model, cause, out.Sent, bp.ConsecutiveFailures); counted && e.tally != nil {
		t := Tally{
			Version: TallySchemaVersion, Provider: provider, Model: model, Outcome: tallyOutcome(!out.OK),
			Consecutive: n, Instance: e.inst, At: e.clock.Now(),
		}
		if cause != nil {
			t.Operation, t.TargetModel = cause.Operation, cause.Model
		}
		e.tally.SendTally(t)
	}
}

// breakerCount applies one outcome to the breaker of provider (and
// model): a failure (cause, what it asked: its trip records it; at, when
// it was sent or counted: zero when unknown) or a success (cause nil). A
// failure from before an operator released the breaker's scope is not
// counted (staleFailure). counted reports whether it changed the count (a
// failure of a closed breaker, a success that reset a count); n is the
// count after it.
func (e *Engine) breakerCount(provider, model string, cause *Tripped, at time.Time, threshold int) (n int, counted bool) {
	if cause == nil {
		// the common path: no breaker, or a count of 0, means nothing to reset
		e.brk.mu.Lock()
		b := e.brk.m[provider][model]
		e.brk.mu.Unlock()
		if b == nil || b.cb.Counts().ConsecutiveFailures == 0 {
			return 0, false
		}
		_, err := b.cb.Execute(okFn)
		if err == nil && model != "" {
			e.dropClosed(provider, model, b)
		}
		return 0, err == nil
	}
	if e.staleFailure(provider, model, at) {
		return 0, false
	}
	b := e.breakerFor(provider, model, threshold)
	b.last.Store(cause)
	if _, err := b.cb.Execute(failFn); err != errTransient {
		return 0, false // open: the trip hold decides, nothing is counted
	}
	return int(b.cb.Counts().ConsecutiveFailures), true
}

// dropClosed forgets the per-model breaker b once a success reset it: a
// closed breaker with no count is what a missing one is, and the models a
// provider's breakers count may be the callers' own names (unlisted
// models), which must not pile up, each with its state series, in every
// member of the fleet. A failure counted meanwhile on b keeps it.
func (e *Engine) dropClosed(provider, model string, b *breaker) {
	e.brk.mu.Lock()
	defer e.brk.mu.Unlock()
	if e.brk.m[provider][model] == b && b.cb.State() == gobreaker.StateClosed && b.cb.Counts().ConsecutiveFailures == 0 {
		delete(e.brk.m[provider], model)
	}
}

// ApplyTally applies what another instance's breaker counted to this
// engine's breaker of the same provider (and model), so that a breaker's
// threshold counts consecutive failures across the fleet: a failure adds
// one, a success resets. Tallies of this instance, or of a provider whose
// breaker is off here, are ignored, and so are failures counted before
// an operator released the breaker's scope (staleFailure). The trip that may
// follow is recorded like any (once fleet-wide: the first write wins).
func (e *Engine) ApplyTally(t Tally) {
	if t.Instance == e.inst || t.Provider == "" {
		return
	}
	bp := &e.Policy().For(t.Provider).Breaker
	if !bp.Enabled || bp.ConsecutiveFailures <= 0 || bp.PerModel != (t.Model != "") {
		return
	}
	var cause *Tripped
	if t.Outcome == TallyFailure {
		cause = &Tripped{Operation: t.Operation, Model: t.TargetModel}
	}
	e.breakerCount(t.Provider, t.Model, cause, t.At, bp.ConsecutiveFailures)
}

// staleFailure reports whether a failure sent (or, for a tally, counted
// by its sender) at at came before an operator released the breaker's
// scope (a provider reset, a released trip hold; releasedSince): it
// belongs to the episode the release ended. An attempt in flight during
// the reset, or a tally still on its way, must not count towards a new
// trip, or failures from before the reset would hold the provider again
// after it.
func (e *Engine) staleFailure(provider, model string, at time.Time) bool {
	id := breakerScope(provider, model).ID()
	e.mu.Lock()
	en := e.entries[id]
	e.mu.Unlock()
	return en != nil && releasedSince(en.rec, at)
}

// breakerScope is the scope a breaker of provider (and model) holds.
func breakerScope(provider, model string) Scope {
	if model != "" {
		return Scope{Kind: ScopeProviderModel, Provider: provider, Model: model}
	}
	return Scope{Kind: ScopeProvider, Provider: provider}
}

// BreakerCount is the consecutive failures the breaker of provider (model
// "" unless the breaker is per model) has counted, fleet-wide as far as
// this engine has heard.
func (e *Engine) BreakerCount(provider, model string) int {
	e.brk.mu.Lock()
	b := e.brk.m[provider][model]
	e.brk.mu.Unlock()
	if b == nil {
		return 0
	}
	return int(b.cb.Counts().ConsecutiveFailures)
}

// trip turns a tripped breaker into a hold of the provider (or
// provider+model), recorded once fleet-wide with hold and trip events;
// cause (what the last failure asked) goes into the record, for its
// probe.
func (e *Engine) trip(provider, model string, threshold int, cause *Tripped) {
	scope := breakerScope(provider, model)
	res := failure.Result{
		Class:  failure.Transient,
		Scope:  failure.ScopeProvider,
		Code:   "circuit_open",
		Reason: fmt.Sprintf("circuit breaker tripped after %d consecutive transient failures", threshold),
	}
	if cause != nil && cause.Operation == "" {
		cause = nil // an older instance's tally: what failed is unknown
	}
	e.hold(holdReq{scope, res, SourceBreaker, cause}, "", time.Time{})
}

// breakerBack starts the breaker of a provider (or provider+model) scope
// over, closed, when the scope stops being held. Whatever the class: the
// breaker may have tripped under a hold of another class (a pin, a rate
// limit), which its trip found in place and left alone (hold), or the
// trip hold may have been pinned over; left open, it would count nothing
// and never trip again.
func (e *Engine) breakerBack(scope Scope) {
	if scope.Key != "" {
		return
	}
	e.brk.mu.Lock()
	defer e.brk.mu.Unlock()
	// Only drop it: called with e.mu held, it must not take the
	// breaker's own lock (a trip holds that lock while it takes e.mu).
	delete(e.brk.m[scope.Provider], scope.Model)
}

// BreakerStates returns the circuit state of every provider with a breaker
// (provider, or "provider/model" with scope model): closed, open (a trip
// hold is waiting out its cooldown) or half-open (the hold is due or its
// one probe is out). For the admin service.
func (e *Engine) BreakerStates() map[string]string {
	out := map[string]string{}
	pol := e.Policy()
	names := make([]string, 0, len(pol.Providers))
	for name, s := range pol.Providers {
		if s.Breaker.Enabled && s.Breaker.ConsecutiveFailures > 0 && !s.Breaker.PerModel {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		out[n] = "closed"
	}
	e.brk.mu.Lock()
	var bs []*breaker
	for _, pm := range e.brk.m {
		for _, b := range pm {
			bs = append(bs, b)
		}
	}
	e.brk.mu.Unlock()
	for _, b := range bs {
		out[breakerName(b.provider, b.model)] = b.cb.State().String()
	}
	now := e.clock.Now()
	e.mu.Lock()
	for _, en := range e.trips {
		r := en.rec
		st := "half-open"
		if r.State == StateHeld && now.Before(r.Until) {
			st = "open"
		}
		out[breakerName(r.Scope.Provider, r.Scope.Model)] = st
	}
	e.mu.Unlock()
	return out
}

func breakerName(provider, model string) string {
	if model == "" {
		return provider
	}
	return provider + "/" + model
}
