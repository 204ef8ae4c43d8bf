package hold

// The Engine: its options, construction, policy and Run (which starts the
// store watcher, the writer and the lease taker; lease.go, writes.go), and
// the event it publishes for a record.

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// EngineOptions are the engine's dependencies and policy.
type EngineOptions struct {
	// Store keeps the fleet's records (holdkv.Store on NATS KV; MemStore in
	// tests). Required.
	Store Store
	// Emitter publishes events; nil drops them.
	Emitter Emitter
	// Tallies shares what this engine's circuit breakers count with the
	// fleet (the other engines apply it with ApplyTally); nil keeps the
	// counts to this process.
	Tallies TallySink
	// Instance is this process's id (recorded_by, probe owner). Required.
	Instance string
	// Clock drives the ladder, leases, TTLs and the ramp; nil: SystemClock.
	Clock Clock
	// Log receives background errors; nil: discarded.
	Log *slog.Logger
	// Policy: ladders, floor, jitter, ramp, lease, breaker, per provider.
	// The zero value means DefaultPolicy().
	Policy Policy
	// Rand returns a number in [0, 1) for jitter and the ramp; it must be
	// safe for concurrent use and should not allocate. nil: math/rand/v2.
	Rand func() float64
	// Fingerprint returns the fingerprint of a key's secret for records and
	// events (never the secret); nil leaves it empty.
	Fingerprint func(provider, keyID string) string
	// Source is what holds from reported failures are recorded as:
	// SourceProxy (default) or SourceProber.
	Source string
	// DrainTimeout bounds how long Run keeps writing queued transitions
	// to the store after its context ends (graceful shutdown), so holds
	// recorded by the last requests are not lost; default 2 s, negative
	// turns draining off.
	DrainTimeout time.Duration
	// OnApply, when set, is called (under the table lock: keep it short)
	// for every record another instance wrote, as this engine applies it
	// from the store watch: the hold propagation lag is the time since its
	// RecordedAt.
	OnApply func(rec Record)
}

// Engine is the hold engine of one process: a local lock-free hold table
// fed by the store, and the writer of this process's transitions. The
// proxy asks Admit on its request path (memory only: no I/O, no
// allocation) and Reports every attempt (never blocks on the store).
type Engine struct {
	store Store
	emit  Emitter
	tally TallySink
	inst  string
	clock Clock
	log   *slog.Logger
	pol   atomic.Pointer[Policy] // swapped whole by SetPolicy
	rnd   func() float64
	fp    func(provider, keyID string) string

	onApply  func(rec Record)
	source   string
	drainFor time.Duration

	// idx is Admit's lock-free view of entries; scopes counts its scopes,
	// provs the kinds of scope each provider has (copied on a new
	// provider, counted atomically).
	idx    atomic.Pointer[index]
	scopes atomic.Int64
	provs  atomic.Pointer[map[string]*provKinds]

	mu      sync.Mutex
	entries map[string]*entry // every record of the local table, by id
	// sweepQ holds the deadlines of released records (the end of their
	// ramp) and of held pins (their until), for the sweep.
	sweepQ deadlines
	// trips are the live transient holds of providers and
	// provider+models (tripped breakers), for BreakerStates.
	trips map[string]*entry
	// dueQ holds the due times of live records once Due was first asked
	// (nil before); due the records that came due, until they change.
	dueQ deadlines
	due  map[string]*entry
	// swept counts the deadlines sweeps looked at (tests: the work of a
	// sweep does not grow with the table).
	swept int
	// corr counts the live key+model holds of each model-level refusal by
	// provider, model and class (correlate.go).
	corr map[corrKey]int
	// groups counts the records of entries by class, scope kind and
	// state (HoldCounts).
	groups map[Group]int

	wmu     sync.Mutex
	pending map[string]*intent
	order   []string
	kick    chan struct{}
	// stopped is why the writer ended (nil while it runs): an intent
	// queued after that is answered with it at once, not left waiting.
	stopped error

	leaseReq  chan *entry
	round     atomic.Pointer[chan struct{}] // closed after each lease try (AdmitSoft)
	storeDown atomic.Bool
	running   atomic.Bool

	brk breakers
}

// NewEngine returns an engine; call Run to start its background work.
func NewEngine(opts EngineOptions) *Engine {
	e := &Engine{
		store:    opts.Store,
		emit:     opts.Emitter,
		tally:    opts.Tallies,
		inst:     opts.Instance,
		clock:    opts.Clock,
		log:      opts.Log,
		rnd:      opts.Rand,
		fp:       opts.Fingerprint,
		onApply:  opts.OnApply,
		source:   opts.Source,
		drainFor: opts.DrainTimeout,
		entries:  map[string]*entry{},
		corr:     map[corrKey]int{},
		groups:   map[Group]int{},
		trips:    map[string]*entry{},
		due:      map[string]*entry{},
		pending:  map[string]*intent{},
		kick:     make(chan struct{}, 1),
		leaseReq: make(chan *entry, 256),
	}
	if e.clock == nil {
		e.clock = SystemClock{}
	}
	if e.source == "" {
		e.source = SourceProxy
	}
	if e.drainFor == 0 {
		e.drainFor = 2 * time.Second
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	pol := opts.Policy
	if pol.Global.Ladders == nil {
		pol.Global = DefaultSettings()
	}
	e.pol.Store(&pol)
	if e.rnd == nil {
		e.rnd = rand.Float64
	}
	e.brk.m = map[string]map[string]*breaker{}
	e.idx.Store(newIndex(rand.Uint64(), minBuckets))
	e.provs.Store(&map[string]*provKinds{})
	round := make(chan struct{})
	e.round.Store(&round)
	return e
}

// Instance returns the engine's instance id.
func (e *Engine) Instance() string { return e.inst }

// Policy returns the engine's policy (read it, do not change it: replace
// it with SetPolicy).
func (e *Engine) Policy() *Policy { return e.pol.Load() }

// SetPolicy replaces the engine's policy (a new routing configuration
// changed the resilience settings): holds recorded from now on follow it;
// holds already recorded keep their due times.
func (e *Engine) SetPolicy(p Policy) {
	if p.Global.Ladders == nil {
		p.Global = DefaultSettings()
	}
	e.pol.Store(&p)
}

// Run watches the store into the local table, writes this process's
// transitions (retrying while the store is unavailable), takes probe
// leases for due holds this process's traffic wants to probe, and sweeps
// finished ramps, until ctx ends. Then it drains: transitions still queued
// are written for up to DrainTimeout. It returns nil.
func (e *Engine) Run(ctx context.Context) error {
	if e.store == nil || e.inst == "" {
		return errors.New("hold: engine needs a Store and an Instance")
	}
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("hold: engine already running")
	}
	defer e.running.Store(false)
	e.wmu.Lock()
	e.stopped = nil // a run after an earlier one ended writes again
	e.wmu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { e.watchLoop(ctx) })
	wg.Go(func() { e.writeLoop(ctx) })
	wg.Go(func() { e.leaseLoop(ctx) })
	wg.Wait()
	return nil
}

// sleep waits d on the engine clock, or until ctx ends.
func (e *Engine) sleep(ctx context.Context, d time.Duration) bool {
	ch := make(chan struct{})
	t := e.clock.AfterFunc(d, func() { close(ch) })
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-ch:
		return true
	}
}

func (e *Engine) watchLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		err := e.store.Watch(ctx, e.applyChange)
		if ctx.Err() != nil {
			return
		}
		e.log.Warn("hold store watch ended; retrying", "err", err, "in", backoff)
		if !e.sleep(ctx, backoff) {
			return
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (e *Engine) event(kind EventKind, rec Record, outcome string) Event {
	return Event{
		Version:        EventSchemaVersion,
		Kind:           kind,
		HoldID:         rec.ID,
		Scope:          rec.Scope,
		Class:          rec.Class,
		Rung:           rec.Rung,
		Until:          rec.Until,
		Reason:         rec.Reason,
		Code:           rec.Code,
		Fingerprint:    rec.Fingerprint,
		Outcome:        outcome,
		Source:         rec.Source,
		ProbeSuccesses: rec.ProbeSuccesses,
		RecordedBy:     e.inst,
		At:             e.clock.Now(),
	}
}
