package hold

import (
	"sort"
	"sync/atomic"
	"time"
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

	token  atomic.Bool // the lease's one AdmitProbe was handed out
	wanted atomic.Bool // a lease request is queued
}

func live(r Record) bool { return r.State == StateHeld || r.State == StateProbing }

func (e *Engine) newEntry(rec Record) *entry {
	en := &entry{rec: rec, until: rec.Until.UnixNano()}
	if rec.Probe != nil {
		en.leaseUntil = rec.Probe.LeaseUntil.UnixNano()
		en.mine = rec.State == StateProbing && rec.Probe.Owner == e.inst
	}
	if rec.State == StateReleased {
		set := e.pol.For(rec.Scope.Provider)
		en.rampUntil = rec.RampUntil.UnixNano()
		en.rampFrom = rec.RecordedAt.UnixNano()
		en.rampStart = set.RampStartShare
	}
	return en
}

// snapshot is the immutable, lock-free view Admit reads.
type snapshot struct {
	n     int
	provs map[string]*provIndex
}

type provIndex struct {
	hold   *entry
	models map[string]*entry
	keys   map[string]*keyIndex
}

type keyIndex struct {
	hold   *entry
	models map[string]*entry
}

// publishLocked rebuilds the snapshot from e.entries (e.mu held). Holds
// change rarely, so copy-on-write of the whole index is cheap enough and
// keeps readers free of locks.
func (e *Engine) publishLocked() {
	s := &snapshot{n: len(e.entries), provs: make(map[string]*provIndex)}
	for _, en := range e.entries {
		sc := en.rec.Scope
		p := s.provs[sc.Provider]
		if p == nil {
			p = &provIndex{}
			s.provs[sc.Provider] = p
		}
		if sc.Key == "" {
			if sc.Model == "" {
				p.hold = en
			} else {
				if p.models == nil {
					p.models = map[string]*entry{}
				}
				p.models[sc.Model] = en
			}
			continue
		}
		if p.keys == nil {
			p.keys = map[string]*keyIndex{}
		}
		k := p.keys[sc.Key]
		if k == nil {
			k = &keyIndex{}
			p.keys[sc.Key] = k
		}
		if sc.Model == "" {
			k.hold = en
		} else {
			if k.models == nil {
				k.models = map[string]*entry{}
			}
			k.models[sc.Model] = en
		}
	}
	e.snap.Store(s)
}

// covering returns the entries of the four scopes that cover a target.
func (s *snapshot) covering(provider, keyID, model string) (ents [4]*entry, any bool) {
	p := s.provs[provider]
	if p == nil {
		return ents, false
	}
	ents[0] = p.hold
	if model != "" {
		ents[1] = p.models[model]
	}
	if k := p.keys[keyID]; k != nil && keyID != "" {
		ents[2] = k.hold
		if model != "" {
			ents[3] = k.models[model]
		}
	}
	return ents, ents[0] != nil || ents[1] != nil || ents[2] != nil || ents[3] != nil
}

// Admit answers whether a request may use the target (provider, keyID,
// model). It reads the lock-free snapshot only: no I/O, no allocation.
// Deny: a covering scope is held, its probe is out, or the ramp did not
// pick this request. AdmitProbe: a covering hold is due and this instance
// holds its probe lease; handed out once per lease, the request makes one
// attempt without retry and is reported with probe=true.
func (e *Engine) Admit(provider, keyID, model string) Admission {
	s := e.snap.Load()
	if s.n == 0 {
		return Admit
	}
	ents, ok := s.covering(provider, keyID, model)
	if !ok {
		return Admit
	}
	now := e.clock.Now().UnixNano()
	probe := false
	for _, en := range ents {
		if en == nil {
			continue
		}
		switch e.verdict(en, now) {
		case Deny:
			return Deny
		case AdmitProbe:
			probe = true
		}
	}
	if !probe {
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
			e.wantProbe(en)
		}
		return Deny
	case StateProbing:
		switch {
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
		return Deny
	}
	return Admit
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

// Held reports whether every scope covering the target that holds it is
// soft (a tripped breaker or a rate limit), and whether any holds it. The
// proxy's try_soft all-held policy uses it. Allocation free.
func (e *Engine) Held(provider, keyID, model string) (held, soft bool) {
	s := e.snap.Load()
	if s.n == 0 {
		return false, false
	}
	ents, ok := s.covering(provider, keyID, model)
	if !ok {
		return false, false
	}
	soft = true
	for _, en := range ents {
		if en == nil || !live(en.rec) {
			continue
		}
		held = true
		if !Soft(en.rec.Class) {
			soft = false
		}
	}
	return held, held && soft
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

// install puts en in the table (e.mu held) and reacts to a breaker hold
// coming back.
func (e *Engine) installLocked(en *entry) {
	old := e.entries[en.rec.ID]
	e.entries[en.rec.ID] = en
	if old != nil && live(old.rec) && !live(en.rec) {
		e.breakerBack(en.rec.Scope, en.rec.Class)
	}
	e.publishLocked()
}

func (e *Engine) removeLocked(id string) {
	old := e.entries[id]
	if old == nil {
		return
	}
	delete(e.entries, id)
	if live(old.rec) {
		e.breakerBack(old.rec.Scope, old.rec.Class)
	}
	e.publishLocked()
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
	e.installLocked(e.newEntry(rec))
	if e.onApply != nil && !c.Initial && rec.RecordedBy != e.inst {
		e.onApply(rec)
	}
}

// sweep drops released entries whose ramp is over (the store
// expires them too; this keeps the table small when it cannot).
func (e *Engine) sweep(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := now.UnixNano()
	for id, en := range e.entries {
		if en.rec.State == StateReleased && n >= en.rampUntil {
			delete(e.entries, id)
		}
	}
	if len(e.entries) != e.snap.Load().n {
		e.publishLocked()
	}
}
