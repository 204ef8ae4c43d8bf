package headroom

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Book keeps a process's slots by provider, key and model, so that they
// outlive a routing configuration (tables built from successive versions
// share them), and tells waiters when a reading changes one.
type Book struct {
	mu    sync.Mutex
	slots map[slotID]*Slot
	// changed is closed (and replaced) when a reading changes a slot:
	// requests waiting for headroom look again.
	changed atomic.Pointer[chan struct{}]
	armed   atomic.Bool // Changed handed changed out since the last change
	// low is signalled when an own reading leaves a window nearly spent
	// (Low): the reporter sends it to the fleet at once rather than at
	// its next tick, since another proxy acting on the reading before
	// would spend the last requests twice.
	low chan struct{}
	// fresh is signalled when an own reading changes a slot (Fresh): the
	// reporter sleeps until there is something to report.
	fresh chan struct{}

	// who else spends each provider's keys (fleet.go)
	self   string
	fleets map[string]*fleet
	seen   map[string]map[string]time.Time // provider -> instance -> last report
}

type slotID struct{ provider, key, model string }

// NewBook returns an empty book.
func NewBook() *Book {
	b := &Book{slots: map[slotID]*Slot{}, low: make(chan struct{}, 1), fresh: make(chan struct{}, 1),
		fleets: map[string]*fleet{}, seen: map[string]map[string]time.Time{}}
	ch := make(chan struct{})
	b.changed.Store(&ch)
	return b
}

// Key is the slot of a key's windows over all its models.
func (b *Book) Key(provider, key string) *Slot { return b.slot(slotID{provider, key, ""}) }

// Model is the slot of one model's windows on a key.
func (b *Book) Model(provider, key, model string) *Slot {
	return b.slot(slotID{provider, key, model})
}

func (b *Book) slot(id slotID) *Slot {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.slots[id]
	if s == nil {
		s = &Slot{fleet: b.fleetOf(id.provider), spread: spreadOf(id)}
		b.slots[id] = s
	}
	return s
}

// Changed is closed when a reading next changes a slot.
func (b *Book) Changed() <-chan struct{} {
	for {
		b.armed.Store(true)
		ch := *b.changed.Load()
		if b.armed.Load() {
			return ch // a change from now on closes ch (or a later one)
		}
	}
}

// notify closes the channel Changed handed out, when it handed one out
// since the last change: a book nobody waits on allocates nothing per
// reading.
func (b *Book) notify() {
	if !b.armed.CompareAndSwap(true, false) {
		return
	}
	ch := make(chan struct{})
	close(*b.changed.Swap(&ch))
}

// Observe folds a reading of this process's own answer into s (at: when
// it arrived). It reports whether the slot changed.
func (b *Book) Observe(s *Slot, r *Reading, at time.Time) bool {
	if s == nil || !r.Known() {
		return false
	}
	if !s.apply(r, at.UnixNano(), true) {
		return false
	}
	b.notify()
	signal(b.fresh)
	if s.nearlySpent() {
		signal(b.low)
	}
	return true
}

// signal signals ch (a buffer of one) unless it is signalled already.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Low is signalled (once per wait: a buffer of one) when a reading of this
// process's own answers leaves a window nearly spent: at most a tenth of
// its limit left (two requests or tokens when it states no limit). The
// reporter reports at once then.
func (b *Book) Low() <-chan struct{} { return b.low }

// Fresh is signalled (once per wait: a buffer of one) when a reading of
// this process's own answers changes a slot: there is something to report
// (TakeReports). A fleet report does not signal it.
func (b *Book) Fresh() <-chan struct{} { return b.fresh }

// Entry is one slot's windows, by provider, key and model ("": the key's
// windows over all its models).
type Entry struct {
	Provider, Key, Model string
	Windows              []Snapshot
}

// Entries lists every slot that holds a reading, sorted by provider, key
// and model.
func (b *Book) Entries() []Entry {
	b.mu.Lock()
	out := make([]Entry, 0, len(b.slots))
	for id, s := range b.slots {
		if s.Known() {
			out = append(out, Entry{Provider: id.provider, Key: id.key, Model: id.model, Windows: s.Windows(nil)})
		}
	}
	b.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, c := out[i], out[j]
		if a.Provider != c.Provider {
			return a.Provider < c.Provider
		}
		if a.Key != c.Key {
			return a.Key < c.Key
		}
		return a.Model < c.Model
	})
	return out
}

// TakeReports builds one report per provider of the readings this
// process's answers brought since the last call (empty: none), for the
// fleet.
func (b *Book) TakeReports(instance string, now time.Time) []Report {
	b.mu.Lock()
	b.setSelf(instance)
	b.forget(now)
	byProvider := map[string]*Report{}
	for id, s := range b.slots {
		if !s.dirty.Swap(false) {
			continue
		}
		rep := byProvider[id.provider]
		if rep == nil {
			rep = &Report{Version: ReportVersion, Provider: id.provider, Instance: instance, At: now.UTC()}
			byProvider[id.provider] = rep
		}
		rs := ReportSlot{Key: id.key, Model: id.model}
		for _, w := range s.Windows(nil) {
			rs.Windows = append(rs.Windows, wireWindow(w))
		}
		rep.Slots = append(rep.Slots, rs)
	}
	b.mu.Unlock()
	out := make([]Report, 0, len(byProvider))
	for _, rep := range byProvider {
		sort.Slice(rep.Slots, func(i, j int) bool {
			if rep.Slots[i].Key != rep.Slots[j].Key {
				return rep.Slots[i].Key < rep.Slots[j].Key
			}
			return rep.Slots[i].Model < rep.Slots[j].Model
		})
		out = append(out, *rep)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Provider < out[j].Provider })
	return out
}

// Apply folds another process's report in. A report of this instance's
// own (instance) is ignored. It reports how many slots changed. The
// reporter counts as spending the provider's keys for FleetMemory.
func (b *Book) Apply(rep *Report, instance string) int {
	if rep.Version != ReportVersion || rep.Instance == instance {
		return 0
	}
	b.mu.Lock()
	b.setSelf(instance)
	b.saw(rep.Provider, rep.Instance, time.Now())
	b.mu.Unlock()
	n := 0
	for _, rs := range rep.Slots {
		var r Reading
		var at int64
		for _, w := range rs.Windows {
			k, ok := ParseKind(w.Kind)
			if !ok {
				continue
			}
			r.Windows[k] = Window{Limit: w.Limit, Remaining: w.Remaining, Reset: w.Reset.UnixNano()}
			r.Has |= 1 << k
			at = max(at, w.At.UnixNano())
		}
		if r.Has == 0 {
			continue
		}
		if b.slot(slotID{rep.Provider, rs.Key, rs.Model}).apply(&r, at, false) {
			n++
		}
	}
	if n > 0 {
		b.notify()
	}
	return n
}
