package route

// A provider's keys and how one is chosen for a step: Key (its secret,
// fingerprint and hold key), the priority groups and their wheels, and Pick
// (by priority, then round robin, weighted, by the request's hash or least
// latency), asking the admitter about each key it considers.

import (
	"math/rand/v2"
	"sync/atomic"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/headroom"
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
	// Room is the key's headroom over all its models (nil: none known).
	Room   *headroom.Slot
	secret atomic.Pointer[config.Secret]
	prev   atomic.Pointer[config.Secret] // the secret before the last change (nil: none)
	gen    atomic.Uint64                 // bumped by every secret change
	index  int
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
	selectHeadroom // at random, weighted by the share of the key's windows left
)

type group struct {
	wheel []uint8 // key indices, repeated by weight for weighted selection
	next  atomic.Uint32
}

// Room is what headroom routing knows of a request (Request.Room; nil:
// headroom routing is off): what it needs of a key's windows and the time
// of the walk; and what Pick learnt: how many keys it skipped because a
// window could not fit the request, the earliest reset among the windows
// that refused (unix nanoseconds; 0: none known), and each refusal.
type Room struct {
	Need     headroom.Need
	Now      int64
	Skipped  int
	Reset    int64
	Refusals []Refusal
}

// Refusal is one key a walk skipped for its headroom: for the model of
// the step, until Reset (unix nanoseconds; 0: not stated).
type Refusal struct {
	Provider *Provider
	Key      *Key
	Model    string
	Reset    int64
}

// Fits reports whether a request of rm may be sent on k (and the model's
// slot on k, nil: none), and when not the reset that would let it.
func (rm *Room) Fits(k *Key, model *headroom.Slot) (bool, int64) {
	ok, reset := k.Room.Fits(rm.Need, rm.Now)
	if ok {
		ok, reset = model.Fits(rm.Need, rm.Now)
	}
	return ok, reset
}

// refused notes a key skipped because a window could not fit the request.
func (rm *Room) refused(p *Provider, k *Key, model string, reset int64) {
	rm.Skipped++
	rm.Refusals = append(rm.Refusals, Refusal{Provider: p, Key: k, Model: model, Reset: reset})
	if reset != 0 && (rm.Reset == 0 || reset < rm.Reset) {
		rm.Reset = reset
	}
}

// share is the share of k's windows (and the model's on k) left.
func (rm *Room) share(k *Key, model *headroom.Slot) float64 {
	return min(k.Room.Share(rm.Now), model.Share(rm.Now))
}

// Pick is Provider.Pick for the step's model, with its headroom on each
// key (Step.Rooms) read when the request has a Room.
func (st *Step) Pick(gate Admitter, tried uint64, req *Request) (*Key, hold.Admission) {
	return st.Provider.pickFor(st.Model, st.Rooms, gate, tried, req)
}

// Pick chooses a key of p for model: the first priority group first,
// then within it by the provider's selection (round robin, weighted, by the
// request's hash, least latency, headroom), skipping keys in tried, keys
// whose headroom cannot fit the request (req.Room) and keys the admitter
// denies. It returns nil when no key is left, and whether the key was
// admitted as the one probe of a due hold. req may be nil.
//
// Keys whose own health checks fail (see SetHealth) are tried only after
// every other key; the admitter still decides on each of them.
func (p *Provider) Pick(model string, gate Admitter, tried uint64, req *Request) (*Key, hold.Admission) {
	return p.pickFor(model, nil, gate, tried, req)
}

func (p *Provider) pickFor(model string, rooms []*headroom.Slot, gate Admitter, tried uint64, req *Request) (*Key, hold.Admission) {
	a := asker{p: p, gate: gate, model: model, rooms: rooms}
	if req != nil {
		a.room = req.Room
	}
	sick := p.sick.Load()
	if k, adm := a.pick(tried|sick, req); k != nil || sick&^tried == 0 {
		return k, adm
	}
	return a.pick(tried|^sick, req)
}

// asker is one Pick's questions about keys: their headroom (room, rooms),
// then the admitter's answer.
type asker struct {
	p        *Provider
	gate     Admitter
	model    string
	rooms    []*headroom.Slot
	room     *Room
	deferred *Key // the first key the ramp deferred
}

// pick is Pick over the keys whose bit is not in skip. A key the ramp
// deferred is chosen when no other key admits.
func (a *asker) pick(skip uint64, req *Request) (*Key, hold.Admission) {
	p := a.p
	a.deferred = nil
	switch p.selection {
	case selectLeastLatency:
		return a.pickFastest(skip)
	case selectHeadroom:
		if a.room != nil {
			return a.pickRoomiest(skip)
		}
	}
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
			if adm, ok := a.ask(k); ok {
				return k, adm
			}
		}
	}
	return a.lastResort()
}

// pickFastest is pick for least_latency selection: group by group, the
// keys in order of their latency (a key never measured first), the first
// the admitter admits; a key the ramp deferred only when none admits.
func (a *asker) pickFastest(skip uint64) (*Key, hold.Admission) {
	p := a.p
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
			if adm, ok := a.ask(p.Keys[best]); ok {
				return p.Keys[best], adm
			}
		}
	}
	return a.lastResort()
}

// pickRoomiest is pick for headroom selection: group by group, a key at
// random weighted by the share of its windows left (a key that states
// none counts as whole; a spent one is never drawn but still asked last,
// so that its refusal is noted), the first the admitter admits.
func (a *asker) pickRoomiest(skip uint64) (*Key, hold.Admission) {
	p := a.p
	for _, g := range p.groups {
		for {
			total, spent := 0.0, -1
			for _, ki := range g.wheel {
				if skip&(1<<ki) == 0 {
					if sh := a.room.share(p.Keys[ki], a.roomOf(int(ki))); sh > 0 {
						total += sh
					} else if spent < 0 {
						spent = int(ki)
					}
				}
			}
			pick := spent
			if total > 0 {
				x := rand.Float64() * total
				for _, ki := range g.wheel {
					if skip&(1<<ki) != 0 {
						continue
					}
					if sh := a.room.share(p.Keys[ki], a.roomOf(int(ki))); sh > 0 {
						pick = int(ki)
						if x -= sh; x < 0 {
							break
						}
					}
				}
			}
			if pick < 0 {
				break
			}
			skip |= 1 << pick
			if adm, ok := a.ask(p.Keys[pick]); ok {
				return p.Keys[pick], adm
			}
		}
	}
	return a.lastResort()
}

func (a *asker) roomOf(i int) *headroom.Slot { return slotAt(a.rooms, i) }

// ModelRoom is the headroom of the step's model on key k (nil: none kept).
func (st *Step) ModelRoom(k *Key) *headroom.Slot { return slotAt(st.Rooms, k.index) }

func slotAt(rooms []*headroom.Slot, i int) *headroom.Slot {
	if i < len(rooms) {
		return rooms[i]
	}
	return nil
}

// ask asks about k: ok when k may be used now. A key the admitter denies
// is held, whatever its headroom; a hold's one probe goes whatever the
// headroom says (it is what re-checks the key for the fleet, and a probe
// taken and not sent would keep it from the others); otherwise a key whose
// headroom cannot fit the request is skipped and noted (Room.Skipped). A
// key the ramp deferred is noted (the first one).
func (a *asker) ask(k *Key) (hold.Admission, bool) {
	fits, reset := true, int64(0)
	if a.room != nil {
		fits, reset = a.room.Fits(k, a.roomOf(k.index))
	}
	adm := a.gate.Admit(a.p.Name, k.HoldKey(), a.model)
	switch {
	case adm == hold.Deny:
		return hold.Deny, false
	case adm == hold.AdmitProbe:
		return adm, true
	case !fits:
		a.room.refused(a.p, k, a.model, reset)
		return hold.Deny, false
	case adm == hold.Deferred:
		if a.deferred == nil {
			a.deferred = k
		}
		return hold.Deny, false
	}
	return adm, true
}

// lastResort is a pick's answer when no key admitted: the key the ramp
// deferred, else none.
func (a *asker) lastResort() (*Key, hold.Admission) {
	if a.deferred != nil {
		return a.deferred, hold.Admit
	}
	return nil, hold.Deny
}
