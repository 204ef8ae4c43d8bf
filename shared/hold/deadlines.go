package hold

import (
	"container/heap"
	"time"
)

// deadline is a time (unix ns) at which the sweep looks at an entry
// again: a held pin's until (the pin ends), a released record's
// rampUntil (it leaves the table).
type deadline struct {
	at int64
	en *entry
}

// deadlines is a min-heap of deadlines by time. An entry replaced or
// removed since its deadline was pushed is stale: skipped when it comes
// up, and dropped when the heap is compacted. A sweep costs the deadlines
// that came up, not the records in the table.
type deadlines []deadline

var _ heap.Interface = (*deadlines)(nil)

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].at < d[j].at }
func (d deadlines) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlines) Push(x any)        { *d = append(*d, x.(deadline)) }
func (d *deadlines) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

// scheduleLocked pushes en's deadlines (e.mu held): for the sweep, a
// released record's ramp end or a held pin's until; for Due, once it has
// been asked, when a held record comes due or a probe's lease lapses.
func (e *Engine) scheduleLocked(en *entry) {
	switch {
	case en.rec.State == StateReleased:
		e.sweepQ = e.pushLocked(e.sweepQ, deadline{at: en.rampUntil, en: en})
	case en.rec.Pinned && en.rec.State == StateHeld:
		e.sweepQ = e.pushLocked(e.sweepQ, deadline{at: en.until, en: en})
	}
	if e.dueQ != nil && live(en.rec) {
		e.dueQ = e.pushLocked(e.dueQ, deadline{at: dueAt(en), en: en})
	}
}

// dueAt is when a live entry may be probed: a held one at its until, a
// probing one when its lease lapses.
func dueAt(en *entry) int64 {
	if en.rec.State == StateProbing {
		if en.rec.Probe == nil {
			return 0
		}
		return en.leaseUntil
	}
	return en.until
}

// pushLocked pushes d onto q and compacts q when stale deadlines
// outnumber the table (pins replaced before their end, records changed
// again before they came due).
func (e *Engine) pushLocked(q deadlines, d deadline) deadlines {
	heap.Push(&q, d)
	if len(q) <= 2*len(e.entries)+1024 {
		return q
	}
	live := q[:0]
	for _, d := range q {
		if e.entries[d.en.rec.ID] == d.en {
			live = append(live, d)
		}
	}
	clear(q[len(live):])
	heap.Init(&live)
	return live
}

// Due returns the live records that may be probed at now (held ones past
// their until, probing ones whose lease lapsed), for the prober's settle
// loop, which asks every second. The first call looks at the whole table;
// from then on the engine keeps the live records' due times in a heap, so
// a call costs the records that came due, not the table.
func (e *Engine) Due(now time.Time) []Record {
	n := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dueQ == nil {
		e.dueQ = deadlines{}
		e.due = map[string]*entry{}
		for _, en := range e.entries {
			if live(en.rec) {
				e.dueQ = append(e.dueQ, deadline{at: dueAt(en), en: en})
			}
		}
		heap.Init(&e.dueQ)
	}
	for len(e.dueQ) > 0 && e.dueQ[0].at <= n {
		d := heap.Pop(&e.dueQ).(deadline)
		if e.entries[d.en.rec.ID] == d.en {
			e.due[d.en.rec.ID] = d.en
		}
	}
	var out []Record
	for id, en := range e.due {
		if e.entries[id] != en || !live(en.rec) || dueAt(en) > n {
			delete(e.due, id) // changed since: its successor has its own due time
			continue
		}
		out = append(out, en.rec)
	}
	return out
}
