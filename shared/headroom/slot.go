package headroom

import (
	"sync"
	"sync/atomic"
	"time"
)

// DefaultWindow is how long a stated window is taken to last when the
// provider states what is left but not when it resets (Azure sends only
// remaining counts): after it the reading is stale and the key is used
// again, so that a missing reset never keeps a key out for good.
const DefaultWindow = time.Minute

// Need is what one request takes from a key's windows: one request, and
// its estimated tokens (input: the prompt estimate; output: the output it
// allows, 0 when it states none).
type Need struct {
	Input, Output int64
}

// of is what the request takes from a window of kind k.
func (n Need) of(k Kind) int64 {
	switch k {
	case Requests:
		return 1
	case Tokens:
		return n.Input + n.Output
	case InputTokens:
		return n.Input
	case OutputTokens:
		return n.Output
	}
	return 0
}

// Slot is what is known of one key's windows (or one model's on a key):
// the latest reading, and what this process's requests in flight will
// take. Reads are atomic loads (the request path); writes take the slot's
// lock.
type Slot struct {
	mu  sync.Mutex
	win [NumKinds]slotWindow
	has atomic.Uint32 // bit 1<<Kind per window stated
	// since is what this process's requests in flight take: charged when
	// one is sent, given back when its answer comes, whatever readings
	// came meanwhile. A reading may have counted a request still in
	// flight (one sent before the answer that brought it): it is then
	// taken twice until its own answer, which only errs towards room
	// left unused, never towards a request the provider refuses.
	since [NumKinds]atomic.Int64
	dirty atomic.Bool // a reading of this process's not yet reported to the fleet
	// fleet and spread split a requests window's last units among the
	// processes spending the key (fleet.own); nil: alone.
	fleet  *fleet
	spread uint32
}

type slotWindow struct {
	limit, remaining, reset atomic.Int64
	at                      atomic.Int64 // unix nanoseconds of the reading
}

// Snapshot is one window as a slot holds it.
type Snapshot struct {
	Kind      Kind
	Limit     int64
	Remaining int64 // as stated, before what is in flight
	Own       int64 // of Remaining, this process's part (requests windows of a key several processes spend; else Remaining)
	InFlight  int64 // taken by this process's requests in flight
	Reset     int64 // unix nanoseconds
	At        int64 // unix nanoseconds of the reading
}

// Left is what the window has left at now (unix nanoseconds): its whole
// limit once its reset has passed, else what was stated less what is in
// flight (at most 0 below: a negative count says only that it is spent).
func (w Snapshot) Left(now int64) int64 {
	if w.Reset != 0 && now >= w.Reset && w.Limit > 0 {
		return w.Limit
	}
	return max(w.Remaining-w.InFlight, 0)
}

// Ratio is Left over the limit, within [0, 1]; false when the window
// states no limit.
func (w Snapshot) Ratio(now int64) (float64, bool) {
	if w.Limit <= 0 {
		return 0, false
	}
	return min(float64(w.Left(now))/float64(w.Limit), 1), true
}

// Known reports whether the slot holds any reading.
func (s *Slot) Known() bool { return s != nil && s.has.Load() != 0 }

// Windows appends the slot's windows to dst.
func (s *Slot) Windows(dst []Snapshot) []Snapshot {
	if s == nil {
		return dst
	}
	has := s.has.Load()
	for k := Kind(0); k < NumKinds; k++ {
		if has&(1<<k) == 0 {
			continue
		}
		w := &s.win[k]
		rem := w.remaining.Load()
		dst = append(dst, Snapshot{Kind: k, Limit: w.limit.Load(), Remaining: rem, Own: s.own(k, rem),
			InFlight: s.since[k].Load(), Reset: w.reset.Load(), At: w.at.Load()})
	}
	return dst
}

// Ticket is what a request charged to a slot (Charge), given back when its
// answer comes (Release).
type Ticket struct {
	slot *Slot
	need Need
}

// Charge notes a request sent on the slot: until its answer, the slot's
// remaining counts are taken to be less by what it needs. A nil slot
// charges nothing.
func (s *Slot) Charge(n Need) Ticket {
	if s == nil {
		return Ticket{}
	}
	for k := Kind(0); k < NumKinds; k++ {
		if v := n.of(k); v > 0 {
			s.since[k].Add(v)
		}
	}
	return Ticket{slot: s, need: n}
}

// Release gives back a charge (once: a second call does nothing). The
// answer's reading, if it states one, is observed after it: it counts the
// request.
func (t *Ticket) Release() {
	s := t.slot
	if s == nil {
		return
	}
	t.slot = nil
	for k := Kind(0); k < NumKinds; k++ {
		if v := t.need.of(k); v > 0 {
			s.since[k].Add(-v)
		}
	}
}

// Fits reports whether a request needing n can be sent on the slot at now
// (unix nanoseconds) without exceeding a window, and if not, when the
// window that refuses it resets (0: not known). A window whose reset has
// passed is whole again; a request larger than a whole window fits (the
// provider's to refuse: waiting would not help). Of a requests window, a
// process counts only its own part when others spend the key too
// (fleet.own: they cannot see its requests in flight, nor it theirs);
// token windows are not split (a part would refuse large requests a
// window could take).
func (s *Slot) Fits(n Need, now int64) (bool, int64) {
	if s == nil {
		return true, 0
	}
	has := s.has.Load()
	if has == 0 {
		return true, 0
	}
	for k := Kind(0); k < NumKinds; k++ {
		if has&(1<<k) == 0 {
			continue
		}
		need := n.of(k)
		if need <= 0 {
			continue
		}
		w := &s.win[k]
		reset := w.reset.Load()
		if reset != 0 && now >= reset {
			continue
		}
		if lim := w.limit.Load(); lim > 0 && need > lim {
			continue
		}
		left := s.own(k, w.remaining.Load()) - s.since[k].Load()
		if left < need {
			return false, reset
		}
	}
	return true, 0
}

// own is the part of a window's remaining count this process may spend.
func (s *Slot) own(k Kind, remaining int64) int64 {
	if k != Requests {
		return remaining
	}
	return s.fleet.own(remaining, s.spread)
}

// Share is the smallest share of a window left (remaining less in flight,
// over its limit) among the windows the slot states with a limit: 1 when
// it knows none, 0 when one is spent.
func (s *Slot) Share(now int64) float64 {
	share := 1.0
	if s == nil {
		return share
	}
	has := s.has.Load()
	for k := Kind(0); k < NumKinds; k++ {
		if has&(1<<k) == 0 {
			continue
		}
		w := &s.win[k]
		lim := w.limit.Load()
		if r := w.reset.Load(); lim <= 0 || (r != 0 && now >= r) {
			continue
		}
		left := float64(w.remaining.Load()-s.since[k].Load()) / float64(lim)
		share = min(share, max(left, 0))
	}
	return share
}

// nearlySpent reports whether a window of the slot has at most a tenth of
// its limit left (at most 2 without a limit), as last stated.
func (s *Slot) nearlySpent() bool {
	has := s.has.Load()
	for k := Kind(0); k < NumKinds; k++ {
		if has&(1<<k) == 0 {
			continue
		}
		w := &s.win[k]
		if w.remaining.Load() <= max(w.limit.Load()/10, 2) {
			return true
		}
	}
	return false
}

// apply folds a reading taken at (unix nanoseconds) in, window by window:
// a window replaces the slot's when the slot's has reset by then, when it
// is of a later window (a reset later by over a second), or when it is of
// the same window with less left (answers of one window arrive out of
// order; the least left is the latest). It reports whether any window
// changed. own says the reading is of this process's own answer: the
// fleet is to hear of it.
func (s *Slot) apply(r *Reading, at int64, own bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for k := Kind(0); k < NumKinds; k++ {
		if !r.Stated(k) {
			continue
		}
		in := r.Windows[k]
		if in.Reset == 0 {
			in.Reset = at + int64(DefaultWindow)
		}
		w := &s.win[k]
		cur := w.reset.Load()
		stated := s.has.Load()&(1<<k) != 0
		switch {
		case !stated, at >= cur, in.Reset > cur+int64(time.Second):
		case in.Reset >= cur-int64(time.Second) && in.Remaining < w.remaining.Load():
		default:
			continue
		}
		w.limit.Store(in.Limit)
		w.remaining.Store(in.Remaining)
		w.reset.Store(in.Reset)
		w.at.Store(at)
		s.has.Or(1 << k)
		changed = true
	}
	if r.RetryAfter > 0 && r.Has&(1<<Requests) == 0 {
		// A wait with no window stated (a 429 with Retry-After only):
		// no request until it passes.
		w := &s.win[Requests]
		until := at + int64(r.RetryAfter)
		if s.has.Load()&(1<<Requests) == 0 || until > w.reset.Load() || w.remaining.Load() > 0 {
			w.remaining.Store(0)
			w.reset.Store(until)
			w.at.Store(at)
			s.has.Or(1 << Requests)
			changed = true
		}
	}
	if changed && own {
		s.dirty.Store(true)
	}
	return changed
}
