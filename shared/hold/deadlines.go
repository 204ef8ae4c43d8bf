package hold

import "container/heap"

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

// scheduleLocked pushes en's deadline, if it has one (e.mu held), and
// compacts the heap when stale deadlines outnumber the table (pins
// replaced before their end, records released again while ramping).
func (e *Engine) scheduleLocked(en *entry) {
	switch {
	case en.rec.State == StateReleased:
		heap.Push(&e.sweepQ, deadline{at: en.rampUntil, en: en})
	case en.rec.Pinned && en.rec.State == StateHeld:
		heap.Push(&e.sweepQ, deadline{at: en.until, en: en})
	default:
		return
	}
	if len(e.sweepQ) > 2*len(e.entries)+1024 {
		live := e.sweepQ[:0]
		for _, d := range e.sweepQ {
			if e.entries[d.en.rec.ID] == d.en {
				live = append(live, d)
			}
		}
		clear(e.sweepQ[len(live):])
		e.sweepQ = live
		heap.Init(&e.sweepQ)
	}
}
