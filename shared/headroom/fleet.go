package headroom

import (
	"hash/fnv"
	"slices"
	"sync/atomic"
	"time"
)

// FleetMemory is how long a process that reported readings of a provider
// counts as spending its keys: the requests a requests window has left are
// split among the processes that did within it (Slot.Fits). A process
// with answers coming reports every few tens of milliseconds; one idle
// for longer gives its part back to the others.
const FleetMemory = 5 * time.Second

// fleet is who spends a provider's keys as this process knows it: its
// size and this process's rank among them (sorted by instance id), packed
// so that the request path reads both in one load. A size of 0 or 1:
// alone.
type fleet struct{ packed atomic.Uint64 }

func (f *fleet) load() (size, rank int64) {
	if f == nil {
		return 0, 0
	}
	p := f.packed.Load()
	return int64(p >> 32), int64(p & 0xffffffff)
}

func (f *fleet) store(size, rank int) { f.packed.Store(uint64(size)<<32 | uint64(uint32(rank))) }

// own is the part of a requests window's remaining units this process may
// spend when size processes spend the key: the units are numbered from
// the last (0) up, and unit j is the process's of rank (spread+j) mod
// size. Every process reading the same remaining count claims different
// units, so two never spend the same last request at once; as readings
// arrive the count falls and each process's part with it. Alone, it is
// the whole count.
func (f *fleet) own(remaining int64, spread uint32) int64 {
	size, rank := f.load()
	if size <= 1 || remaining <= 0 {
		return remaining
	}
	first := (rank - int64(spread)%size + size) % size // the lowest unit of this process's
	if remaining <= first {
		return 0
	}
	return (remaining-first-1)/size + 1
}

// spreadOf is the slot's offset in the units' rotation, the same in every
// process: the last unit of each key falls to a different process.
func spreadOf(id slotID) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id.provider))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(id.key))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(id.model))
	return h.Sum32()
}

// fleetOf is provider's fleet (b.mu held).
func (b *Book) fleetOf(provider string) *fleet {
	f := b.fleets[provider]
	if f == nil {
		f = &fleet{}
		b.fleets[provider] = f
		b.rank(provider)
	}
	return f
}

// saw notes a report of provider from instance at now (b.mu held).
func (b *Book) saw(provider, instance string, now time.Time) {
	seen := b.seen[provider]
	if seen == nil {
		seen = map[string]time.Time{}
		b.seen[provider] = seen
	}
	_, known := seen[instance]
	seen[instance] = now
	if !known {
		b.rank(provider)
	}
}

// forget drops the processes that have not reported for FleetMemory
// (b.mu held).
func (b *Book) forget(now time.Time) {
	for provider, seen := range b.seen {
		n := len(seen)
		for inst, at := range seen {
			if now.Sub(at) > FleetMemory {
				delete(seen, inst)
			}
		}
		if len(seen) != n {
			b.rank(provider)
		}
	}
}

// setSelf records this process's instance id (b.mu held).
func (b *Book) setSelf(instance string) {
	if instance == b.self {
		return
	}
	b.self = instance
	for provider := range b.fleets {
		b.rank(provider)
	}
}

// rank recomputes provider's fleet: the processes seen lately and this
// one (b.mu held).
func (b *Book) rank(provider string) {
	f := b.fleets[provider]
	if f == nil {
		return
	}
	members := make([]string, 0, len(b.seen[provider])+1)
	for inst := range b.seen[provider] {
		if inst != b.self {
			members = append(members, inst)
		}
	}
	members = append(members, b.self)
	slices.Sort(members)
	f.store(len(members), slices.Index(members, b.self))
}

// Fleet is how many processes this one counts as spending provider's keys
// (itself among them) and its rank among them.
func (b *Book) Fleet(provider string) (size, rank int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, r := b.fleetOf(provider).load()
	return int(max(s, 1)), int(r)
}
