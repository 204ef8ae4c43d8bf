package hold

import (
	"container/heap"
	"time"
)

// deadline is a time (unix ns) at which an engine looks at a record again:
// for the sweep, a held pin's until (the pin ends) or a released record's
// rampUntil (it leaves the table); for Due, when a live record comes due.
// It names the record by id and the time it was pushed for (of): a record
// replaced or removed since, whose entry no longer has that time, makes
// the deadline stale. Stale deadlines are skipped when they come up and
// dropped when the heap is compacted; they keep no entry alive.
type deadline struct {
	at int64 // when to look
	of int64 // the entry's time it was pushed for (at, unless looked at again later)
	id string
}

// deadlines is a min-heap of deadlines by time: a sweep or a Due costs
// the deadlines that came up, not the records in the table.
type deadlines []deadline

var _ heap.Interface = (*deadlines)(nil)

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].at < d[j].at }
func (d deadlines) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlines) Push(x any)        { *d = append(*d, x.(deadline)) }
func (d *deadlines) Pop() any {
	old := *d
	x := old[len(old)-1]
	old[len(old)-1] = deadline{}
	*d = old[:len(old)-1]
	return x
}

// sweepAt is the time the sweep looks at en: a released record's ramp
// end, a held pin's until; ok is false for other records.
func sweepAt(en *entry) (int64, bool) {
	switch {
	case en.rec.State == StateReleased:
		return en.rampUntil, true
	case en.rec.Pinned && en.rec.State == StateHeld:
		return en.until, true
	}
	return 0, false
}

// dueAt is when a live entry may be probed: a held one at its until, a
// probing one when its lease lapses; ok is false for a released one.
func dueAt(en *entry) (int64, bool) {
	switch {
	case en.rec.State == StateHeld:
		return en.until, true
	case en.rec.State == StateProbing && en.rec.Probe == nil:
		return 0, true
	case en.rec.State == StateProbing:
		return en.leaseUntil, true
	}
	return 0, false
}

// scheduleLocked pushes en's deadlines (e.mu held): the sweep's, and
// Due's once Due has been asked.
func (e *Engine) scheduleLocked(en *entry) {
	if at, ok := sweepAt(en); ok {
		e.sweepQ = e.pushLocked(e.sweepQ, deadline{at: at, of: at, id: en.rec.ID}, sweepAt)
	}
	if e.dueQ != nil {
		if at, ok := dueAt(en); ok {
			e.dueQ = e.pushLocked(e.dueQ, deadline{at: at, of: at, id: en.rec.ID}, dueAt)
		}
	}
}

// currentLocked returns the entry d was pushed for, nil when it is stale.
func (e *Engine) currentLocked(d deadline, timeOf func(*entry) (int64, bool)) *entry {
	en := e.entries[d.id]
	if en == nil {
		return nil
	}
	if at, ok := timeOf(en); !ok || at != d.of {
		return nil
	}
	return en
}

// pushLocked pushes d onto q and compacts q when stale deadlines
// outnumber the table (pins replaced before their end, records changed
// again before they came due).
func (e *Engine) pushLocked(q deadlines, d deadline, timeOf func(*entry) (int64, bool)) deadlines {
	heap.Push(&q, d)
	if len(q) <= 2*len(e.entries)+1024 {
		return q
	}
	live := q[:0]
	for _, d := range q {
		if e.currentLocked(d, timeOf) != nil {
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
// from then on the engine keeps the live records' due times in a heap as
// they come, so a call costs the records that came due, not the table
// (engines whose process never asks keep no heap).
func (e *Engine) Due(now time.Time) []Record {
	n := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dueQ == nil {
		e.dueQ = make(deadlines, 0, len(e.entries))
		for id, en := range e.entries {
			if at, ok := dueAt(en); ok {
				e.dueQ = append(e.dueQ, deadline{at: at, of: at, id: id})
			}
		}
		heap.Init(&e.dueQ)
	}
	for len(e.dueQ) > 0 && e.dueQ[0].at <= n {
		d := heap.Pop(&e.dueQ).(deadline)
		if en := e.currentLocked(d, dueAt); en != nil {
			e.due[d.id] = en
		}
	}
	var out []Record
	for id, en := range e.due {
		if at, ok := dueAt(en); e.entries[id] != en || !ok || at > n {
			delete(e.due, id) // changed since: its successor has its own due time
			continue
		}
		out = append(out, en.rec)
	}
	return out
}
