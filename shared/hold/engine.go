package hold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"switchyard.dev/shared/failure"
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

func (e *Engine) leaseLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case en := <-e.leaseReq:
			e.takeLease(ctx, en)
			e.endRound()
		}
	}
}

// takeLease tries to take the probe lease of a due hold the local traffic
// wants; while the store is unavailable it takes a local lease (this
// instance probes for itself; the outcome is written when the store is
// back).
func (e *Engine) takeLease(ctx context.Context, en *entry) {
	e.mu.Lock()
	cur := e.entries[en.rec.ID]
	e.mu.Unlock()
	if cur != en {
		return
	}
	early := en.early.Swap(false)
	if en.over != nil {
		// A local lease lapsed: the record it stood over decides again
		// (leased in the store if it is back, else locally once more).
		if en = e.endLocalLease(en); en == nil {
			return
		}
	}
	if en.rec.Pinned && en.rec.State == StateHeld {
		e.endPin(en)
		en.wanted.Store(false)
		return
	}
	_, ok, err := e.tryProbe(ctx, en.rec.ID, early)
	switch {
	case ok:
	case errors.Is(err, ErrUnavailable) || (errors.Is(err, errPending) && e.storeDown.Load()):
		e.localLease(en)
	default:
		if err != nil && !errors.Is(err, errPending) {
			e.log.Warn("take probe lease", "hold", en.rec.ID, "err", err)
		}
		en.wanted.Store(false)
	}
}

// localLease puts a lease of this instance's own over en: nothing is
// queued to write it (the store was unavailable). It is not pending, so a
// record the store brings replaces it, and when it lapses takeLease puts
// en back (endLocalLease).
func (e *Engine) localLease(en *entry) {
	now := e.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.entries[en.rec.ID] != en {
		return
	}
	rec := en.rec
	set := e.Policy().For(rec.Scope.Provider)
	rec.State = StateProbing
	rec.Probe = &Probe{Owner: e.inst, Started: now, LeaseUntil: now.Add(set.ProbeLease)}
	rec.EarlyProbeAfter = now.Add(set.EarlyProbeInterval(rec.Class, rec.Rung)) // as tryProbe writes it
	n := e.newEntry(rec)
	n.over = en
	e.installLocked(n)
}

// underLeaseLocked keeps a local lease whose probe is out (its one
// AdmitProbe handed out, its lease not lapsed) in place of a held record
// the store or this instance's writer brings for the same hold (the
// hold's own write landing once the store is back): the record becomes
// what the lease stands over, put back when the lease lapses, and the
// lease takes its revision so that the probe's outcome is written over
// it. Replacing the lease would let this instance hand out a second probe
// while the first runs, and the first's outcome would settle the second's
// lease. Only this instance's own write of the hold is taken under the
// lease: an operator's pin or another instance's change replaces it (the
// probe's outcome then finds no lease and settles nothing, so the change
// stands). It reports whether it kept the lease. e.mu is held.
func (e *Engine) underLeaseLocked(cur *entry, rec Record) bool {
	if cur == nil || cur.over == nil || !cur.token.Load() || rec.State != StateHeld ||
		rec.Pinned || rec.RecordedBy != e.inst || e.clock.Now().UnixNano() >= cur.leaseUntil {
		return false
	}
	// A new entry: a published one never changes (readers hold it
	// without e.mu).
	n := e.newEntry(cur.rec)
	n.rec.Revision = rec.Revision
	n.over = e.newEntry(rec)
	n.token.Store(true)
	e.installLocked(n)
	return true
}

// endLocalLease puts back the entry a lapsed local lease stood over and
// returns it (nil when the lease is no longer the current entry). The
// entry is the same one (a write queued for it still finds it); its lease
// request is this one, being served.
func (e *Engine) endLocalLease(en *entry) *entry {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.entries[en.rec.ID] != en {
		return nil
	}
	b := en.over
	b.wanted.Store(true)
	e.installLocked(b)
	return b
}

// intent is a write this process wants in the store. Intents for one id
// merge (the latest record wins, events add up).
type intent struct {
	rec   Record // rec.Revision is ignored; base is the expected revision
	base  uint64 // 0: create
	ttl   time.Duration
	hold  *holdReq // a new hold: on ErrExists adopt a live record, escalate a released one
	force bool     // overwrite whatever is there (operator pin)
	ev    []Event
	done  []chan error
	entry *entry // the local entry this write makes durable
}

type holdReq struct {
	scope   Scope
	res     failure.Result
	source  string
	tripped *Tripped // a breaker's trip: what it was tripped by
}

func (e *Engine) enqueue(in *intent) {
	e.wmu.Lock()
	if e.stopped != nil {
		err := e.stopped
		e.wmu.Unlock()
		e.notify(in, err)
		return
	}
	if old := e.pending[in.rec.ID]; old != nil {
		in.ev = append(old.ev, in.ev...)
		in.done = append(old.done, in.done...)
		if in.hold == nil && in.base == 0 {
			in.hold = old.hold
		}
		in.force = in.force || old.force
	} else {
		e.order = append(e.order, in.rec.ID)
	}
	e.pending[in.rec.ID] = in
	e.wmu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

func (e *Engine) next() *intent {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	for len(e.order) > 0 {
		id := e.order[0]
		e.order = e.order[1:]
		if in := e.pending[id]; in != nil {
			delete(e.pending, id)
			return in
		}
	}
	return nil
}

// requeue puts back an intent that could not be written, unless a newer
// one for the same id arrived meanwhile (which then carries its events).
func (e *Engine) requeue(in *intent) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if newer := e.pending[in.rec.ID]; newer != nil {
		newer.ev = append(in.ev, newer.ev...)
		if newer.hold == nil && newer.base == 0 {
			newer.hold = in.hold
		}
		return
	}
	e.pending[in.rec.ID] = in
	e.order = append(e.order, in.rec.ID)
}

// rebase moves a queued intent for id onto the revision just written.
func (e *Engine) rebase(id string, from, to uint64) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if in := e.pending[id]; in != nil && in.base == from {
		in.base = to
	}
}

func (e *Engine) writeLoop(ctx context.Context) {
	const first, most = 100 * time.Millisecond, 5 * time.Second
	backoff := first
	retry := make(chan struct{}, 1)
	sweep := make(chan struct{}, 1)
	tick := func(ch chan struct{}) func() {
		return func() {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	sweepT := e.clock.AfterFunc(time.Second, tick(sweep))
	var retryT Timer
	defer func() {
		sweepT.Stop()
		if retryT != nil {
			retryT.Stop()
		}
		e.failWaiters(context.Cause(ctx))
	}()
	for {
		select {
		case <-ctx.Done():
			e.drain(ctx)
			return
		case <-sweep:
			e.sweep(e.clock.Now())
			sweepT = e.clock.AfterFunc(time.Second, tick(sweep))
			continue
		case <-e.kick:
		case <-retry:
		}
		for {
			in := e.next()
			if in == nil {
				backoff = first
				break
			}
			err := e.write(ctx, in)
			if err != nil && ctx.Err() != nil {
				e.requeue(in) // shutting down: drained with a fresh deadline
				break
			}
			if errors.Is(err, ErrInvalidID) {
				// The store will never take it: dropped, locally too,
				// rather than retried for ever.
				e.notify(in, fmt.Errorf("write hold: %w", err))
				e.adoptGone(in)
				e.log.Error("hold store refused a hold id; dropping the hold", "err", err)
				continue
			}
			if err != nil {
				e.storeDown.Store(true)
				e.notify(in, fmt.Errorf("write hold %s: %w (kept locally, retrying)", in.rec.ID, err))
				in.done = nil
				e.requeue(in)
				e.log.Warn("hold store write failed; keeping the hold locally and retrying", "hold", in.rec.ID, "err", err, "in", backoff)
				retryT = e.clock.AfterFunc(backoff, tick(retry))
				backoff = min(backoff*2, most)
				break
			}
			e.storeDown.Store(false)
			e.notify(in, err)
		}
	}
}

// drain writes the queued transitions after Run's context ended, within
// DrainTimeout; what is left is logged (the local table dies with the
// process).
func (e *Engine) drain(parent context.Context) {
	if e.drainFor < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), e.drainFor)
	defer cancel()
	for {
		in := e.next()
		if in == nil {
			return
		}
		err := e.write(ctx, in)
		if errors.Is(err, ErrInvalidID) {
			e.notify(in, fmt.Errorf("write hold: %w", err)) // never storable: not left for the drain
			continue
		}
		if err != nil {
			e.requeue(in)
			e.wmu.Lock()
			left := len(e.pending)
			e.wmu.Unlock()
			e.log.Warn("hold writes not drained before shutdown", "left", left, "err", err)
			return
		}
		e.notify(in, nil)
	}
}

func (e *Engine) notify(in *intent, err error) {
	for _, d := range in.done {
		d <- err
	}
}

func (e *Engine) failWaiters(err error) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	e.stopped = fmt.Errorf("hold: engine stopped: %w", err)
	for _, in := range e.pending {
		for _, d := range in.done {
			d <- e.stopped
		}
		in.done = nil
	}
}

// write performs one intent. It returns nil when the intent is settled
// (written, or superseded by what the store holds, which is adopted) and
// an error when the store could not be reached (the intent is retried).
func (e *Engine) write(ctx context.Context, in *intent) error {
	for range 8 {
		var rev uint64
		var err error
		if in.base == 0 {
			rev, err = e.store.Create(ctx, in.rec, in.ttl)
		} else {
			rev, err = e.store.Update(ctx, in.rec, in.base, in.ttl)
		}
		switch {
		case err == nil:
			e.written(in, rev)
			return nil
		case errors.Is(err, ErrExists) || errors.Is(err, ErrConflict):
			cur, gerr := e.store.Get(ctx, in.rec.ID)
			switch {
			case errors.Is(gerr, ErrNotFound):
				if in.hold == nil && !in.force && in.rec.State == StateReleased {
					e.adoptGone(in)
					return nil
				}
				in.base = 0
				continue
			case gerr != nil:
				return gerr
			}
			switch {
			case in.force:
				in.base = cur.Revision
			case in.hold != nil && !live(cur):
				// a released (ramping) record failed again: escalate by CAS
				in.rec = e.newHold(*in.hold, e.clock.Now(), &cur)
				in.base = cur.Revision
			default:
				e.adopt(in, cur)
				return nil
			}
		default:
			return err
		}
	}
	return fmt.Errorf("hold %s: too many conflicting writes", in.rec.ID)
}

// written installs what this process wrote and publishes its events: the
// winner of each transition is the only one that emits it.
func (e *Engine) written(in *intent, rev uint64) {
	rec := in.rec
	rec.Revision = rev
	e.mu.Lock()
	cur := e.entries[rec.ID]
	switch {
	case cur != in.entry && e.underLeaseLocked(cur, rec):
	case cur == nil || cur == in.entry || (!cur.pending && cur.rec.Revision < rev):
		e.installLocked(e.newEntry(rec))
	case cur.pending && cur.rec.Revision == in.base:
		cur.rec.Revision = rev // a newer local change waits in the queue; it was rebased
	}
	e.mu.Unlock()
	e.rebase(rec.ID, in.base, rev)
	for _, ev := range in.ev {
		if e.emit != nil {
			e.emit.Emit(ev)
		}
	}
}

// adopt replaces the local entry of a lost write by the stored record.
func (e *Engine) adopt(in *intent, cur Record) {
	e.mu.Lock()
	if en := e.entries[cur.ID]; en == nil || en == in.entry || en.rec.Revision < cur.Revision {
		e.installLocked(e.newEntry(cur))
	}
	e.mu.Unlock()
}

// adoptGone drops the local entry of a write whose record the store no
// longer has (a release that found the record expired).
func (e *Engine) adoptGone(in *intent) {
	e.mu.Lock()
	if en := e.entries[in.rec.ID]; en == in.entry {
		e.removeLocked(in.rec.ID)
	}
	e.mu.Unlock()
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

// wait blocks until the intent's first write attempt answered, or ctx.
func wait(ctx context.Context, done chan error) error {
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
