package route

// A provider's keys and how one is chosen for a step: Key (its secret,
// fingerprint and hold key), the priority groups and their wheels, and Pick
// (by priority, then round robin, weighted, by the request's hash or least
// latency), asking the admitter about each key it considers.

import (
	"sync/atomic"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
)

// Admitter answers "may a request use this target now?" from memory: the
// hold engine (hold.Engine) implements it, and the proxy asks it for every
// key it considers.
type Admitter interface {
	Admit(provider, keyID, model string) hold.Admission
}

// MaxKeys is the largest number of keys a provider may have: one request
// tracks the keys it tried in a 64-bit set.
const MaxKeys = 64

// Key is one credential of a provider as the proxy uses it.
type Key struct {
	ID       string
	Priority int
	Weight   int
	// Latency is the key's observed latency (all models).
	Latency *Latency
	secret  atomic.Pointer[config.Secret]
	prev    atomic.Pointer[config.Secret] // the secret before the last change (nil: none)
	gen     atomic.Uint64                 // bumped by every secret change
	index   int
}

// Secret returns the credential for the upstream request header.
func (k *Key) Secret() string { return k.secret.Load().Reveal() }

// AppendSecrets appends to dst what an upstream's answer must never echo
// to a caller: the key's current secret and the one before it (a request
// sent before a rotation is answered after it).
func (k *Key) AppendSecrets(dst []string) []string {
	dst = append(dst, k.Secret())
	if p := k.prev.Load(); p != nil {
		dst = append(dst, p.Reveal())
	}
	return dst
}

// Fingerprint is the fingerprint of the key's current secret.
func (k *Key) Fingerprint() string { return k.secret.Load().Fingerprint() }

// SetSecret replaces the key's secret (a rotation or a configuration
// reload); requests already sent keep the old one. It reports whether the
// secret changed.
func (k *Key) SetSecret(s config.Secret) bool {
	old := k.secret.Load()
	if old.Reveal() == s.Reveal() {
		return false
	}
	k.prev.Store(old)
	k.secret.Store(&s)
	k.gen.Add(1)
	return true
}

// Generation changes whenever the key's secret does: an attempt notes it
// when it sends, so that a refusal of a secret rotated away meanwhile is
// not held against the key's new secret.
func (k *Key) Generation() uint64 { return k.gen.Load() }

// KeylessID is the id of the one stand-in key of a provider configured
// without keys (vLLM, Ollama): what responses and metrics name.
const KeylessID = "none"

// HoldKey is the key id holds and reports name: "" for a keyless
// provider's stand-in, so that its holds are provider scopes, the same ids
// the prober's checks produce (hold.ScopeFor).
func (k *Key) HoldKey() string {
	if k.ID == KeylessID && k.secret.Load().Reveal() == "" {
		return ""
	}
	return k.ID
}

// Index is the key's position in its provider's Keys.
func (k *Key) Index() int { return k.index }

type keySelection uint8

const (
	selectRoundRobin keySelection = iota
	selectWeighted                // smooth weighted round robin
	selectHash                    // weighted, by the request's hash
	selectLeastLatency
)

type group struct {
	wheel []uint8 // key indices, repeated by weight for weighted selection
	next  atomic.Uint32
}

// Pick chooses a key of p for model: the first priority group first,
// then within it by the provider's selection (round robin, weighted, by the
// request's hash, least latency), skipping keys in tried and keys the
// admitter denies. It returns nil when no key is left, and whether the key
// was admitted as the one probe of a due hold. req may be nil.
//
// Keys whose own health checks fail (see SetHealth) are tried only after
// every other key; the admitter still decides on each of them.
func (p *Provider) Pick(model string, gate Admitter, tried uint64, req *Request) (*Key, hold.Admission) {
	sick := p.sick.Load()
	if k, a := p.pick(model, gate, tried|sick, req); k != nil || sick&^tried == 0 {
		return k, a
	}
	return p.pick(model, gate, tried|^sick, req)
}

// pick is Pick over the keys whose bit is not in skip. A key the ramp
// deferred is chosen when no other key admits.
func (p *Provider) pick(model string, gate Admitter, skip uint64, req *Request) (*Key, hold.Admission) {
	if p.selection == selectLeastLatency {
		return p.pickFastest(model, gate, skip)
	}
	var deferred *Key
	for _, g := range p.groups {
		n := uint32(len(g.wheel))
		var start uint32
		switch {
		case p.selection == selectHash && req != nil && req.KeyHashed:
			start = uint32(req.KeyHash % uint64(n))
		default:
			start = g.next.Add(1) - 1
		}
		for i := uint32(0); i < n; i++ {
			k := p.Keys[g.wheel[(start+i)%n]]
			if skip&(1<<uint(k.index)) != 0 {
				continue
			}
			if a, ok := p.ask(gate, k, model, &deferred); ok {
				return k, a
			}
		}
	}
	return lastResort(deferred)
}

// pickFastest is pick for least_latency selection: group by group, the
// keys in order of their latency (a key never measured first), the first
// the admitter admits; a key the ramp deferred only when none admits.
func (p *Provider) pickFastest(model string, gate Admitter, skip uint64) (*Key, hold.Admission) {
	var deferred *Key
	for _, g := range p.groups {
		for {
			best, bestMS := -1, 0.0
			for _, ki := range g.wheel {
				if skip&(1<<ki) != 0 {
					continue
				}
				if ms, _ := p.Keys[ki].Latency.MS(); best < 0 || ms < bestMS {
					best, bestMS = int(ki), ms
				}
			}
			if best < 0 {
				break
			}
			skip |= 1 << best
			k := p.Keys[best]
			if a, ok := p.ask(gate, k, model, &deferred); ok {
				return k, a
			}
		}
	}
	return lastResort(deferred)
}

// ask asks the gate about k: ok when k may be used now; a key the ramp
// deferred is noted in deferred (the first one).
func (p *Provider) ask(gate Admitter, k *Key, model string, deferred **Key) (hold.Admission, bool) {
	switch a := gate.Admit(p.Name, k.HoldKey(), model); a {
	case hold.Deny:
	case hold.Deferred:
		if *deferred == nil {
			*deferred = k
		}
	default:
		return a, true
	}
	return hold.Deny, false
}

// lastResort is a pick's answer when no key admitted: the key the ramp
// deferred, else none.
func lastResort(deferred *Key) (*Key, hold.Admission) {
	if deferred != nil {
		return deferred, hold.Admit
	}
	return nil, hold.Deny
}
