package hold

import (
	"container/heap"
	"sort"
	"sync/atomic"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
)

// entry is one record in the local table. Its fields are fixed once it is
// published; a change replaces the entry. The atomics carry the per-lease
// probe token and the "lease wanted" flag.
type entry struct {
	rec        Record
	until      int64 // unix ns
	leaseUntil int64
	rampFrom   int64
	rampUntil  int64
	rampStart  float64
	mine       bool // probing, and the lease is this instance's
	// pending: applied locally, not (yet) written to the store; rec.Revision
	// is the revision the pending write expects (0: create).
	pending bool
	// over is set on a local lease (taken while the store was
	// unavailable; no write is queued for it): the entry it stands over,
	// the stored record or a hold whose write is queued. It is put back
	// when the lease lapses; any record the store or this instance's
	// writer brings replaces the lease (the store speaks for the hold).
	over *entry

	token  atomic.Bool // the lease's one AdmitProbe was handed out
	wanted atomic.Bool // a lease request is queued
	// early: the queued lease request may lease a soft hold before it is
	// due (AdmitSoft: every target is held and a caller is waiting).
	early atomic.Bool
}

func live(r Record) bool { return r.State == StateHeld || r.State == StateProbing }

func (e *Engine) newEntry(rec Record) *entry {
	en := &entry{rec: rec, until: rec.Until.UnixNano()}
	if rec.Probe != nil {
		en.leaseUntil = rec.Probe.LeaseUntil.UnixNano()
		en.mine = rec.State == StateProbing && rec.Probe.Owner == e.inst
	}
	if rec.State == StateReleased {
		set := e.Policy().For(rec.Scope.Provider)
		en.rampUntil = rec.RampUntil.UnixNano()
		en.rampFrom = rec.RecordedAt.UnixNano()
		en.rampStart = set.RampStartShare
	}
	return en
}

// Admit answers whether a request may use the target (provider, keyID,
// model). It reads the lock-free snapshot only: no I/O, no allocation.
// Deny: a covering scope is held or its probe is out. Deferred: the
// target ramps back after a release and the ramp did not pick this request
// (the caller uses it only when nothing else admits). AdmitProbe: a covering hold is due and this instance
// holds its probe lease; handed out once per lease, the request makes one
// attempt without retry and is reported with probe=true.
func (e *Engine) Admit(provider, keyID, model string) Admission {
	if e.scopes.Load() == 0 {
		return Admit
	}
	pk := (*e.provs.Load())[provider]
	if pk == nil {
		return Admit
	}
	ents, ok := e.idx.Load().covering(pk, provider, keyID, model)
	if !ok {
		return Admit
	}
	now := e.clock.Now().UnixNano()
	probe, deferred := false, false
	for _, en := range ents {
		if en == nil {
			continue
		}
		switch e.verdict(en, now) {
		case Deny:
			return Deny
		case AdmitProbe:
			probe = true
		case Deferred:
			deferred = true
		}
	}
	if !probe {
		if deferred {
			return Deferred
		}
		return Admit
	}
	got := false
	for _, en := range ents {
		if en != nil && en.mine && en.rec.State == StateProbing && now < en.leaseUntil && en.token.CompareAndSwap(false, true) {
			got = true
		}
	}
	if got {
		return AdmitProbe
	}
	return Deny
}

func (e *Engine) verdict(en *entry, now int64) Admission {
	switch en.rec.State {
	case StateHeld:
		if now >= en.until {
			if en.rec.Pinned {
				e.wantProbe(en) // the lease loop ends the pin
				return Admit    // an operator drain is over at its until
			}
			if now >= en.until+e.callerGrace(en) {
				e.wantProbe(en)
			}
		}
		return Deny
	case StateProbing:
		switch {
		case now >= en.leaseUntil && now < en.until:
			return Deny // an early (soft) probe's lease lapsed: held until due
		case now >= en.leaseUntil:
			e.wantProbe(en)
			return Deny
		case en.mine && !en.token.Load():
			return AdmitProbe
		}
		return Deny
	case StateReleased:
		if now >= en.rampUntil || en.rampUntil <= en.rampFrom {
			return Admit
		}
		share := en.rampStart + (1-en.rampStart)*float64(now-en.rampFrom)/float64(en.rampUntil-en.rampFrom)
		if e.rnd() < share {
			return Admit
		}
		return Deferred
	}
	return Admit
}

// callerGrace is how long after a hold's due time a proxy leaves its probe
// to the prober: for classes the prober settles with a cheap check (a
// breaker's trip: when what tripped it can be sent cheaply), on a proxy's
// engine. Probers, and classes only a caller's request can settle,
// probe at once.
func (e *Engine) callerGrace(en *entry) int64 {
	if e.source != SourceProxy || !en.rec.Class.Meaning().CheapCheck {
		return 0
	}
	if en.rec.Source == SourceBreaker && !en.rec.Tripped.Checkable() {
		return 0 // the prober settles a trip only by what tripped it
	}
	return int64(e.Policy().For(en.rec.Scope.Provider).CallerGrace)
}

// wantProbe asks the lease loop (once per entry) to take the probe lease.
func (e *Engine) wantProbe(en *entry) {
	if !en.wanted.CompareAndSwap(false, true) {
		return
	}
	select {
	case e.leaseReq <- en:
	default:
		en.wanted.Store(false)
	}
}

// AdmitSoft answers for the proxy's try_soft pass, when every target of a
// request is held: a target of a provider whose all_held_policy is
// try_soft, whose holds are all soft (a tripped breaker, a rate limit)
// and none of them waits a stated wait, takes one request at a time
// fleet-wide, as an early probe of those holds, at most once per
// EarlyProbeInterval. AdmitProbe: this instance holds the probe lease of every
// live hold covering the target and this request is the probe (one
// attempt, reported with probe=true: a success releases the holds).
// Deny with a nil channel: the provider fails fast, a hard hold or a
// stated wait covers the target, a probe of it is out somewhere in the
// fleet, its early-probe interval is not over, or this instance's last
// word on it is not written yet (a probe of it just failed here). Deny with a channel: the lease loop is
// asked to lease the holds now (a compare-and-set in the store, off the
// request path); the channel closes when it has tried, and the caller may
// wait for it (bounded) and ask again. Allocation free but for the lease
// request.
func (e *Engine) AdmitSoft(provider, keyID, model string) (Admission, <-chan struct{}) {
	ents, ok := e.covering(provider, keyID, model)
	if !ok {
		return Admit, nil
	}
	t := e.clock.Now()
	now := t.UnixNano()
	soft := e.Policy().For(provider).AllHeld != config.AllHeldFailFast
	round := *e.round.Load() // before asking: a lease tried from now on closes it
	need, held := false, false
	for _, en := range ents {
		if en == nil || !live(en.rec) {
			continue
		}
		held = true
		if !soft || !en.rec.Class.Meaning().Soft || en.rec.Pinned || en.pending {
			return Deny, nil // fail_fast; a hard hold; or one this instance just wrote (a probe just ended here)
		}
		if en.rec.State == StateProbing && now < en.leaseUntil {
			if !en.mine || en.token.Load() {
				return Deny, nil // a probe is out
			}
			continue
		}
		if now < en.until && !earlyProbeable(en.rec, t) {
			return Deny, nil // a stated wait, or the early-probe interval is not over
		}
		en.early.Store(true)
		e.wantProbe(en)
		need = true
	}
	switch {
	case !held:
		return e.Admit(provider, keyID, model), nil
	case need:
		return Deny, round
	}
	got := false
	for _, en := range ents {
		if en != nil && live(en.rec) && en.mine && en.token.CompareAndSwap(false, true) {
			got = true
		}
	}
	if got {
		return AdmitProbe, nil
	}
	return Deny, nil
}

// endRound closes the channel AdmitSoft handed out: the lease loop has
// tried a lease. Only the lease loop calls it.
func (e *Engine) endRound() {
	next := make(chan struct{})
	close(*e.round.Swap(&next))
}

// Holds returns a snapshot of every record in the local table (held,
// probing, released and ramping), sorted by id, for admin listings.
func (e *Engine) Holds() []Record {
	e.mu.Lock()
	out := make([]Record, 0, len(e.entries))
	for _, en := range e.entries {
		out = append(out, en.rec)
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Group is what HoldCounts counts records by.
type Group struct {
	Class failure.Class
	Kind  ScopeKind
	State State
}

// tallyLocked counts rec (d +1) or uncounts it (d -1) in its group.
func (e *Engine) tallyLocked(rec Record, d int) {
	g := Group{Class: rec.Class, Kind: rec.Scope.Kind, State: rec.State}
	if n := e.groups[g] + d; n > 0 {
		e.groups[g] = n
	} else {
		delete(e.groups, g)
	}
}

// HoldCounts returns how many records the local table has in each group
// (class, scope kind, state), for metrics: kept as records come and go,
// so the answer costs the number of groups, not of holds.
func (e *Engine) HoldCounts() map[Group]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[Group]int, len(e.groups))
	for g, n := range e.groups {
		out[g] = n
	}
	return out
}

// Hold returns the record id in the local table, if any: one map lookup,
// for the admin API's reads of one hold (a pin answers with its record)
// where Holds would copy and sort the whole table.
func (e *Engine) Hold(id string) (Record, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if en := e.entries[id]; en != nil {
		return en.rec, true
	}
	return Record{}, false
}

// installLocked puts en in the table (e.mu held) and reacts to a provider
// scope coming back (its breaker starts over). The cost is O(1): one map write, one bucket chain.
func (e *Engine) installLocked(en *entry) {
	id := en.rec.ID
	old := e.entries[id]
	e.entries[id] = en
	e.scheduleLocked(en)
	if r := en.rec; r.Class == failure.Transient && r.Scope.Key == "" && live(r) {
		e.trips[id] = en
	} else {
		delete(e.trips, id)
	}
	if old != nil && live(old.rec) && !live(en.rec) {
		e.breakerBack(en.rec.Scope)
	}
	if old != nil {
		e.countLocked(old.rec, -1)
		e.tallyLocked(old.rec, -1)
	}
	e.countLocked(en.rec, +1)
	e.tallyLocked(en.rec, +1)
	e.indexLocked(en.rec.Scope, en)
}

func (e *Engine) removeLocked(id string) {
	old := e.entries[id]
	if old == nil {
		return
	}
	delete(e.entries, id)
	delete(e.trips, id)
	e.countLocked(old.rec, -1)
	e.tallyLocked(old.rec, -1)
	if live(old.rec) {
		e.breakerBack(old.rec.Scope)
	}
	e.indexLocked(old.rec.Scope, nil)
}

// indexLocked publishes a scope's entry (nil: none) to Admit's index.
func (e *Engine) indexLocked(s Scope, en *entry) {
	x := e.idx.Load()
	d := x.put(s, en)
	if d != 0 {
		provs := *e.provs.Load()
		pk := provs[s.Provider]
		if pk == nil { // a new provider: copy the (small) map
			pk = &provKinds{hash: x.part(s.Provider)}
			next := make(map[string]*provKinds, len(provs)+1)
			for k, v := range provs {
				next[k] = v
			}
			next[s.Provider] = pk
			e.provs.Store(&next)
		}
		pk.add(s.Kind, d)
	}
	n := e.scopes.Add(int64(d))
	if n > 2*int64(len(x.buckets)) {
		e.idx.Store(x.grown())
	}
}

// covering returns the entries of the scopes covering a target (for the
// slower readers: AdmitSoft, HeldUntil, reportProbe).
func (e *Engine) covering(provider, keyID, model string) ([4]*entry, bool) {
	if e.scopes.Load() == 0 {
		return [4]*entry{}, false
	}
	pk := (*e.provs.Load())[provider]
	if pk == nil {
		return [4]*entry{}, false
	}
	return e.idx.Load().covering(pk, provider, keyID, model)
}

// applyChange applies one change seen by the store watcher.
func (e *Engine) applyChange(c Change) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cur := e.entries[c.ID]
	if c.Deleted {
		if cur == nil || cur.pending || cur.rec.Revision > c.Revision {
			return
		}
		e.removeLocked(c.ID)
		return
	}
	if cur != nil {
		if c.Revision <= cur.rec.Revision {
			return
		}
		if cur.pending && live(cur.rec) && !live(c.Record) {
			return // our new hold wins over a stored release; the writer escalates by CAS
		}
	}
	rec := c.Record
	rec.Revision = c.Revision
	if e.underLeaseLocked(cur, rec) {
		return
	}
	e.installLocked(e.newEntry(rec))
	if e.onApply != nil && !c.Initial && rec.RecordedBy != e.inst {
		e.onApply(rec)
	}
}

// sweep drops released entries whose ramp is over (the store expires them
// too; this keeps the table small when it cannot) and ends pins whose time
// is over. It visits the deadlines that came up only (sweepQ): a pin whose
// write is still pending is looked at again a second later.
func (e *Engine) sweep(now time.Time) {
	n := now.UnixNano()
	var over []*entry
	var again []deadline
	e.mu.Lock()
	for len(e.sweepQ) > 0 && e.sweepQ[0].at <= n {
		d := heap.Pop(&e.sweepQ).(deadline)
		e.swept++
		en := e.currentLocked(d, sweepAt)
		switch {
		case en == nil:
			// replaced or removed since: its successor has its own deadline
		case en.rec.State == StateReleased:
			e.removeLocked(d.id)
		case en.pending:
			d.at = n + int64(time.Second)
			again = append(again, d)
		default:
			over = append(over, en)
		}
	}
	for _, d := range again {
		heap.Push(&e.sweepQ, d)
	}
	e.mu.Unlock()
	for _, en := range over {
		e.endPin(en)
	}
}

// ProbeLeaseLeft is how long the probe this instance handed out for the
// target (Admit or AdmitSoft answered AdmitProbe) may still run: until the
// earliest end of the leases it holds on the covering holds (negative
// when one has lapsed). ok is false when no probe of the target is out
// here. The proxy ends a probe attempt there: a probe that outlived its
// lease could meet a second one (another instance may take the lapsed
// lease), and its own answer would be thrown away.
func (e *Engine) ProbeLeaseLeft(provider, keyID, model string) (left time.Duration, ok bool) {
	ents, any := e.covering(provider, keyID, model)
	if !any {
		return 0, false
	}
	var end int64
	for _, en := range ents {
		if en == nil || !en.mine || en.rec.State != StateProbing || !en.token.Load() {
			continue
		}
		if !ok || en.leaseUntil < end {
			end, ok = en.leaseUntil, true
		}
	}
	if !ok {
		return 0, false
	}
	return time.Duration(end - e.clock.Now().UnixNano()), true
}

// HeldUntil is when the target's holds next let a request through: the
// latest due time among the live holds covering it (a probe or the ramp
// decide after that), where a hold the try_soft pass may probe early
// counts from its next early probe instead. ok is false when nothing
// holds it. The proxy uses it for the Retry-After of a 503 when every
// target is held.
func (e *Engine) HeldUntil(provider, keyID, model string) (until time.Time, ok bool) {
	ents, any := e.covering(provider, keyID, model)
	if !any {
		return time.Time{}, false
	}
	soft := e.Policy().For(provider).AllHeld != config.AllHeldFailFast
	for _, en := range ents {
		if en == nil || !live(en.rec) {
			continue
		}
		r := &en.rec
		u := r.Until
		if r.State == StateProbing && r.Probe != nil {
			u = r.Probe.LeaseUntil
		}
		if soft && r.Class.Meaning().Soft && !r.Pinned && !r.WaitStated && r.EarlyProbeAfter.Before(u) {
			u = r.EarlyProbeAfter
		}
		if !ok || u.After(until) {
			until, ok = u, true
		}
	}
	return until, ok
}
