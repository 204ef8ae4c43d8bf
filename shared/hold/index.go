package hold

import (
	"sync/atomic"
)

// index is the lock-free view of the local table that Admit reads: a hash
// table keyed by scope whose buckets hold immutable chains. A change
// replaces one bucket's chain (copy-on-write of a chain of about one node)
// under the engine lock, so its cost does not grow with the number of
// holds; readers load a bucket pointer and never lock or allocate. The
// table grows (rehashes into four times the buckets) when it holds twice
// as many scopes as buckets: an amortised O(1) per change.
type index struct {
	seed    uint64
	mask    uint64
	buckets []atomic.Pointer[node]
}

// node is one scope's entry in a bucket chain. Nodes are never modified
// once published.
type node struct {
	hash                 uint64
	provider, key, model string
	en                   *entry
	next                 *node
}

const minBuckets = 1 << 10

func newIndex(seed uint64, buckets int) *index {
	return &index{seed: seed, mask: uint64(buckets - 1), buckets: make([]atomic.Pointer[node], buckets)}
}

// scopeHash hashes a scope from the hashes of its parts (0 for an absent
// key or model), so that Admit hashes each string once for all four
// scopes it looks up.
func scopeHash(hp, hk, hm uint64) uint64 {
	h := hp ^ (hk<<21 | hk>>43) ^ (hm<<42 | hm>>22)
	// murmur3's 64-bit finaliser
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// part hashes one name (FNV-1a from a per-process random seed, inlined:
// names are short, and a call to a general hash costs more than the
// bytes). The names come from the configuration and from records other
// instances wrote, not from callers.
func (x *index) part(s string) uint64 {
	if s == "" {
		return 0
	}
	h := x.seed
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001b3
	}
	return h | 1 // never 0, which stands for "absent"
}

func (x *index) hashScope(s Scope) uint64 {
	return scopeHash(x.part(s.Provider), x.part(s.Key), x.part(s.Model))
}

// get returns the entry of the scope (provider, key, model) with hash h.
func (x *index) get(h uint64, provider, key, model string) *entry {
	for n := x.buckets[h&x.mask].Load(); n != nil; n = n.next {
		if n.hash == h && n.provider == provider && n.key == key && n.model == model {
			return n.en
		}
	}
	return nil
}

// put sets the scope's entry (en nil removes it) and reports how the
// number of scopes changed (+1, 0, -1). Callers hold the engine lock.
func (x *index) put(s Scope, en *entry) int {
	h := x.hashScope(s)
	b := &x.buckets[h&x.mask]
	head := b.Load()
	var buf [8]*node
	kept := buf[:0]
	found := false
	for n := head; n != nil; n = n.next {
		if n.hash == h && n.provider == s.Provider && n.key == s.Key && n.model == s.Model {
			found = true
			continue
		}
		kept = append(kept, n)
	}
	if !found && en == nil {
		return 0
	}
	var chain *node
	if en != nil {
		chain = &node{hash: h, provider: s.Provider, key: s.Key, model: s.Model, en: en}
	}
	for i := len(kept) - 1; i >= 0; i-- {
		n := *kept[i]
		n.next = chain
		chain = &n
	}
	b.Store(chain)
	switch {
	case found && en == nil:
		return -1
	case !found:
		return 1
	}
	return 0
}

// grown returns a table with four times the buckets holding the same
// nodes (copied: published nodes are immutable).
func (x *index) grown() *index {
	y := newIndex(x.seed, 4*len(x.buckets))
	for i := range x.buckets {
		for n := x.buckets[i].Load(); n != nil; n = n.next {
			c := *n
			b := &y.buckets[c.hash&y.mask]
			c.next = b.Load()
			b.Store(&c)
		}
	}
	return y
}

// covering returns the entries of the four scopes that cover a target:
// provider, provider+model, key, key+model. kinds says which kinds of
// scope the provider has at all (provKinds), so only those are looked up.
func (x *index) covering(pk *provKinds, provider, keyID, model string) (ents [4]*entry, any bool) {
	kinds := uint8(pk.bits.Load())
	hp := pk.hash
	var hk, hm uint64
	if model != "" && kinds&(kindBit(ScopeProviderModel)|kindBit(ScopeKeyModel)) != 0 {
		hm = x.part(model)
	}
	if keyID != "" && kinds&(kindBit(ScopeKey)|kindBit(ScopeKeyModel)) != 0 {
		hk = x.part(keyID)
	}
	if kinds&kindBit(ScopeProvider) != 0 {
		ents[0] = x.get(scopeHash(hp, 0, 0), provider, "", "")
	}
	if hm != 0 && kinds&kindBit(ScopeProviderModel) != 0 {
		ents[1] = x.get(scopeHash(hp, 0, hm), provider, "", model)
	}
	if hk != 0 {
		if kinds&kindBit(ScopeKey) != 0 {
			ents[2] = x.get(scopeHash(hp, hk, 0), provider, keyID, "")
		}
		if hm != 0 && kinds&kindBit(ScopeKeyModel) != 0 {
			ents[3] = x.get(scopeHash(hp, hk, hm), provider, keyID, model)
		}
	}
	return ents, ents[0] != nil || ents[1] != nil || ents[2] != nil || ents[3] != nil
}

// provKinds counts the scopes of one provider in the index, by kind, so
// that Admit looks up only kinds the provider has (a provider with no
// hold costs one map read), and keeps the provider name's hash.
type provKinds struct {
	hash uint64        // index.part(provider)
	n    [4]int64      // scopes by kind (written under the engine lock)
	bits atomic.Uint32 // bit kindIndex(k) set when n[k] > 0
}

func kindIndex(k ScopeKind) int {
	switch k {
	case ScopeProvider:
		return 0
	case ScopeProviderModel:
		return 1
	case ScopeKey:
		return 2
	}
	return 3
}

func kindBit(k ScopeKind) uint8 { return 1 << kindIndex(k) }

// add counts d scopes of kind k (engine lock held).
func (p *provKinds) add(k ScopeKind, d int) {
	p.n[kindIndex(k)] += int64(d)
	var b uint32
	for i, n := range p.n {
		if n > 0 {
			b |= 1 << i
		}
	}
	p.bits.Store(b)
}
