// Package route turns a requested model name into an ordered list of
// provider targets, and chooses a key for each: highest priority first,
// round-robin or weighted among keys of equal priority, skipping what the
// hold engine says is held. Everything is computed when the configuration is
// loaded; a lookup is a map read and a few atomic adds, with no allocation.
package route

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/provider"
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
	secret   atomic.Pointer[config.Secret]
	gen      atomic.Uint64 // bumped by every secret change
	index    int
}

// Secret returns the credential for the upstream request header.
func (k *Key) Secret() string { return k.secret.Load().Reveal() }

// Fingerprint is the fingerprint of the key's current secret.
func (k *Key) Fingerprint() string { return k.secret.Load().Fingerprint() }

// SetSecret replaces the key's secret (a rotation or a configuration
// reload); requests already sent keep the old one. It reports whether the
// secret changed.
func (k *Key) SetSecret(s config.Secret) bool {
	if k.secret.Load().Reveal() == s.Reveal() {
		return false
	}
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

// Provider is one configured upstream with its keys.
type Provider struct {
	Name    string
	Adapter *provider.Adapter
	// Index is the provider's position in the configuration.
	Index int
	// Keys are ordered by priority, highest first.
	Keys   []*Key
	groups []*group
	// sick has the bit of each key whose own health checks fail (by
	// index): Pick tries them after the others.
	sick atomic.Uint64
}

type group struct {
	wheel []uint8 // key indices, repeated by weight for weighted selection
	next  atomic.Uint32
}

// Step is one target of a resolved model: a provider and the model on it.
type Step struct {
	Provider *Provider // nil when the step's provider is not configured (skipped)
	// Model is the model's name in the configuration; Upstream the name
	// sent to the provider.
	Model    string
	Upstream string
	Kind     string // chat or embedding
	Active   bool
}

// Usable reports whether the step takes traffic.
func (s *Step) Usable() bool { return s.Active && s.Provider != nil }

// Table resolves model names. It is immutable once built.
type Table struct {
	byName    map[string][]Step
	Providers []*Provider
	// Names are the model ids the gateway serves, for GET /v1/models, in a
	// stable order.
	Names []ModelName

	health atomic.Pointer[healthState] // nil: no health applied
}

// ModelName is one id listed by GET /v1/models.
type ModelName struct {
	ID      string
	OwnedBy string // provider name, or "switchyard" for chains and aliases
	Kind    string
}

// Build computes the table from a validated configuration.
func Build(cfg *config.Config) (*Table, error) {
	t := &Table{byName: map[string][]Step{}}
	byProvider := map[string]*Provider{}
	models := map[string]map[string]config.Model{}
	for i, pc := range cfg.Providers {
		p, err := newProvider(i, pc)
		if err != nil {
			return nil, err
		}
		t.Providers = append(t.Providers, p)
		byProvider[p.Name] = p
		models[p.Name] = map[string]config.Model{}
		for _, m := range pc.Models {
			models[p.Name][m.Name] = m
		}
	}
	stepFor := func(target string, active bool) (Step, error) {
		pname, mname, ok := strings.Cut(target, "/")
		if !ok {
			return Step{}, fmt.Errorf("target %q: want provider/model", target)
		}
		p := byProvider[pname]
		if p == nil {
			// A provider skipped at load (optional, no key set): the step
			// keeps its place and takes no traffic.
			return Step{Model: mname, Upstream: mname}, nil
		}
		m, ok := models[pname][mname]
		if !ok {
			return Step{}, fmt.Errorf("target %q: provider %s has no model %q", target, pname, mname)
		}
		return Step{Provider: p, Model: m.Name, Upstream: upstreamName(m), Kind: kindOf(m), Active: active}, nil
	}

	// provider/model, and plain model names in configuration order.
	var plain []string
	for i, pc := range cfg.Providers {
		p := t.Providers[i]
		for _, m := range pc.Models {
			st := Step{Provider: p, Model: m.Name, Upstream: upstreamName(m), Kind: kindOf(m), Active: true}
			id := p.Name + "/" + m.Name
			t.byName[id] = []Step{st}
			t.Names = append(t.Names, ModelName{ID: id, OwnedBy: p.Name, Kind: st.Kind})
			if _, seen := t.byName[m.Name]; !seen {
				plain = append(plain, m.Name)
			}
			t.byName[m.Name] = append(t.byName[m.Name], st)
		}
	}
	for _, name := range plain {
		steps := t.byName[name]
		t.Names = append(t.Names, ModelName{ID: name, OwnedBy: steps[0].Provider.Name, Kind: steps[0].Kind})
	}

	// Chains: "chain:<name>", and the bare name when nothing else has it.
	chainNames := sortedKeys(cfg.Chains)
	for _, name := range chainNames {
		var steps []Step
		for i, sc := range cfg.Chains[name].Steps {
			st, err := stepFor(sc.Target, sc.IsActive())
			if err != nil {
				return nil, fmt.Errorf("chains.%s.steps[%d]: %w", name, i, err)
			}
			steps = append(steps, st)
		}
		t.byName["chain:"+name] = steps
		t.Names = append(t.Names, ModelName{ID: "chain:" + name, OwnedBy: "switchyard", Kind: chainKind(steps)})
	}

	// Aliases point at a chain or a provider/model (or another name).
	for _, alias := range sortedKeys(cfg.Aliases) {
		target := cfg.Aliases[alias]
		steps, ok := t.byName[target]
		if !ok {
			if !strings.HasPrefix(target, "chain:") && strings.Contains(target, "/") {
				st, err := stepFor(target, true)
				if err != nil {
					return nil, fmt.Errorf("aliases.%s: %w", alias, err)
				}
				steps = []Step{st}
			} else {
				return nil, fmt.Errorf("aliases.%s: unknown target %q", alias, target)
			}
		}
		t.byName[alias] = steps
		t.Names = append(t.Names, ModelName{ID: alias, OwnedBy: "switchyard", Kind: chainKind(steps)})
	}
	for _, name := range chainNames {
		if _, taken := t.byName[name]; !taken {
			t.byName[name] = t.byName["chain:"+name]
		}
	}
	return t, nil
}

// Key returns a provider's key by id (nil when there is none).
func (t *Table) Key(provider, keyID string) *Key {
	for _, p := range t.Providers {
		if p.Name != provider {
			continue
		}
		for _, k := range p.Keys {
			if k.ID == keyID {
				return k
			}
		}
	}
	return nil
}

// Resolve returns the steps for a requested model name, in order.
func (t *Table) Resolve(name string) ([]Step, bool) {
	if h := t.health.Load(); h != nil {
		if steps, ok := h.byName[name]; ok {
			return steps, true
		}
	}
	steps, ok := t.byName[name]
	return steps, ok
}

// ResolveBytes is Resolve for a name still in the request body; it does not
// allocate.
func (t *Table) ResolveBytes(name []byte) ([]Step, bool) {
	if h := t.health.Load(); h != nil {
		if steps, ok := h.byName[string(name)]; ok {
			return steps, true
		}
	}
	steps, ok := t.byName[string(name)]
	return steps, ok
}

// Pick chooses a key of p for model: the highest priority group first,
// rotating (by weight) within it, skipping keys in tried and keys the
// admitter denies. It returns nil when no key is left, and whether the key
// was admitted as the one probe of a due hold.
//
// Keys whose own health checks fail (see SetHealth) are tried only after
// every other key; the admitter still decides on each of them.
func (p *Provider) Pick(model string, gate Admitter, tried uint64) (*Key, hold.Admission) {
	sick := p.sick.Load()
	if k, a := p.pick(model, gate, tried|sick); k != nil || sick&^tried == 0 {
		return k, a
	}
	return p.pick(model, gate, tried|^sick)
}

// pick is Pick over the keys whose bit is not in skip. A key the ramp
// deferred is chosen when no other key admits.
func (p *Provider) pick(model string, gate Admitter, skip uint64) (*Key, hold.Admission) {
	var deferred *Key
	for _, g := range p.groups {
		n := uint32(len(g.wheel))
		start := g.next.Add(1) - 1
		for i := uint32(0); i < n; i++ {
			k := p.Keys[g.wheel[(start+i)%n]]
			if skip&(1<<uint(k.index)) != 0 {
				continue
			}
			switch a := gate.Admit(p.Name, k.HoldKey(), model); a {
			case hold.Deny:
			case hold.Deferred:
				if deferred == nil {
					deferred = k
				}
			default:
				return k, a
			}
		}
	}
	if deferred != nil {
		return deferred, hold.Admit
	}
	return nil, hold.Deny
}

func newProvider(index int, pc config.Provider) (*Provider, error) {
	if len(pc.Keys) > MaxKeys {
		return nil, fmt.Errorf("providers[%s].keys: %d keys, at most %d", pc.Name, len(pc.Keys), MaxKeys)
	}
	p := &Provider{
		Name:    pc.Name,
		Index:   index,
		Adapter: provider.New(pc.Type, pc.BaseURL, pc.APIVersion, pc.Headers),
	}
	keys := pc.Keys
	if len(keys) == 0 { // keyless servers (vLLM, Ollama)
		keys = []config.Key{{ID: KeylessID, Weight: 1}}
	}
	for _, kc := range keys {
		if !kc.IsEnabled() {
			continue // switched off: never picked (a provider with none is never usable)
		}
		w := kc.Weight
		if w < 1 {
			w = 1
		}
		k := &Key{ID: kc.ID, Priority: kc.Priority, Weight: w}
		secret := kc.Value
		k.secret.Store(&secret)
		p.Keys = append(p.Keys, k)
	}
	sort.SliceStable(p.Keys, func(i, j int) bool { return p.Keys[i].Priority > p.Keys[j].Priority })
	weighted := pc.Selection == "weighted"
	for i := 0; i < len(p.Keys); {
		j := i
		for j < len(p.Keys) && p.Keys[j].Priority == p.Keys[i].Priority {
			j++
		}
		p.groups = append(p.groups, newGroup(p.Keys[i:j], i, weighted))
		i = j
	}
	for i, k := range p.Keys {
		k.index = i
	}
	return p, nil
}

// newGroup builds the selection wheel of keys[first:first+len(keys)].
// Weighted wheels interleave keys (smooth weighted round-robin) so that a
// heavy key does not take a burst of consecutive requests.
func newGroup(keys []*Key, first int, weighted bool) *group {
	g := &group{}
	if !weighted {
		for i := range keys {
			g.wheel = append(g.wheel, uint8(first+i))
		}
		return g
	}
	weights := make([]int, len(keys))
	total, d := 0, 0
	for i, k := range keys {
		weights[i] = k.Weight
		total += k.Weight
	}
	if total > maxWheel { // keep the wheel small; proportions stay close
		total = 0
		for i := range weights {
			weights[i] = max(1, weights[i]*maxWheel/sum(keys))
			total += weights[i]
		}
	}
	for _, w := range weights {
		d = gcd(d, w)
	}
	total /= d
	current := make([]int, len(keys))
	for n := 0; n < total; n++ {
		best := 0
		for i := range keys {
			current[i] += weights[i]
			if current[i] > current[best] {
				best = i
			}
		}
		current[best] -= total * d
		g.wheel = append(g.wheel, uint8(first+best))
	}
	return g
}

const maxWheel = 1024

func sum(keys []*Key) int {
	s := 0
	for _, k := range keys {
		s += k.Weight
	}
	return s
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func upstreamName(m config.Model) string {
	if m.Upstream != "" {
		return m.Upstream
	}
	return m.Name
}

func kindOf(m config.Model) string {
	if m.Kind == "" {
		return "chat"
	}
	return m.Kind
}

func chainKind(steps []Step) string {
	for _, s := range steps {
		if s.Kind != "" {
			return s.Kind
		}
	}
	return "chat"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
