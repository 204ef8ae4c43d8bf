package route

// Health makes a target less preferred, never more: the hold engine (Admit)
// has the last word on every key, so health never brings back a held
// target. SetHealth records each provider's health on the table (read by
// the cursor: a virtual model skips offline providers while a healthy
// alternative can serve, health_aware orders by it, fail_closed rejects
// unknown health) and the keys whose own checks fail (tried after the
// healthy keys of their provider). It is called when health changes, not
// per request; readers use atomics, without allocating.

// SetHealth applies the health view: health(provider) is a provider's
// health, keyUnhealthy(provider, key) says a key's own checks fail.
func (t *Table) SetHealth(health func(provider string) Health, keyUnhealthy func(provider, keyID string) bool) {
	all := len(t.Providers) > 0
	for _, p := range t.Providers {
		h := health(p.Name)
		p.health.Store(uint32(h))
		all = all && h == HealthOffline
		var sick uint64
		for _, k := range p.Keys {
			if keyUnhealthy(p.Name, k.ID) {
				sick |= 1 << uint(k.index)
			}
		}
		p.sick.Store(sick)
	}
	if all { // every provider failing: keep the last inventory
		t.visible.Store(nil)
		return
	}
	var visible []ModelName
	for _, n := range t.Names {
		if !hidden(t.byName[n.ID].Steps) {
			visible = append(visible, n)
		}
	}
	if len(visible) == len(t.Names) {
		t.visible.Store(nil)
		return
	}
	t.visible.Store(&visible)
}

// hidden reports whether a model id has usable steps and all of them are
// on offline providers.
func hidden(steps []Step) bool {
	usable := 0
	for _, s := range steps {
		if !s.Usable() {
			continue
		}
		usable++
		if s.Provider.Health() != HealthOffline {
			return false
		}
	}
	return usable > 0
}

// VisibleNames are the model ids GET /v1/models lists: Names without the
// models only offline providers serve (all of Names when every provider is
// offline, or none is).
func (t *Table) VisibleNames() []ModelName {
	if v := t.visible.Load(); v != nil {
		return *v
	}
	return t.Names
}

// KeyUnhealthy reports whether k's own checks fail (it is tried after the
// provider's other keys).
func (p *Provider) KeyUnhealthy(k *Key) bool { return p.sick.Load()&(1<<uint(k.index)) != 0 }
