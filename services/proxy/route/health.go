package route

// Health makes a target less preferred, never more: a step whose provider
// is offline is tried after the healthy steps of the same model (in their
// declared order), and a key whose own checks fail is tried after the
// healthy keys of its provider. Admit (the hold engine) still has the last
// word on every key, so health never brings back a held target.
// SetHealth computes everything when health changes; Resolve and Pick read
// it through an atomic pointer, without allocating.

// healthState is one immutable application of the health view.
type healthState struct {
	// byName holds the step lists whose order health changed; names not
	// here keep the table's order.
	byName map[string][]Step
	// visible are the model ids GET /v1/models lists; nil: all of them.
	visible []ModelName
}

// SetHealth applies the health view: offline(provider) says a provider is
// out (unhealthy, or its circuit is open), keyUnhealthy(provider, key) that
// a key's own checks fail. It is called when health changes, not per
// request.
func (t *Table) SetHealth(offline func(provider string) bool, keyUnhealthy func(provider, keyID string) bool) {
	off := make(map[*Provider]bool, len(t.Providers))
	all := len(t.Providers) > 0
	for _, p := range t.Providers {
		off[p] = offline(p.Name)
		all = all && off[p]
		var sick uint64
		for _, k := range p.Keys {
			if keyUnhealthy(p.Name, k.ID) {
				sick |= 1 << uint(k.index)
			}
		}
		p.sick.Store(sick)
	}
	h := &healthState{byName: map[string][]Step{}}
	for name, steps := range t.byName {
		if re, changed := reorder(steps, off); changed {
			h.byName[name] = re
		}
	}
	if !all { // every provider failing: keep the last inventory
		for _, n := range t.Names {
			if !hidden(t.byName[n.ID], off) {
				h.visible = append(h.visible, n)
			}
		}
		if len(h.visible) == len(t.Names) {
			h.visible = nil
		}
	}
	if len(h.byName) == 0 && h.visible == nil {
		h = nil
	}
	t.health.Store(h)
}

// reorder moves the steps of offline providers after the others.
func reorder(steps []Step, off map[*Provider]bool) ([]Step, bool) {
	var good, bad []Step
	for _, s := range steps {
		if s.Provider != nil && off[s.Provider] {
			bad = append(bad, s)
		} else {
			good = append(good, s)
		}
	}
	if len(bad) == 0 || len(good) == 0 {
		return steps, false
	}
	moved := false
	for i := range good { // changed only if a bad step came before a good one
		if good[i].Provider != steps[i].Provider || good[i].Model != steps[i].Model {
			moved = true
			break
		}
	}
	if !moved {
		return steps, false
	}
	return append(good, bad...), true
}

// hidden reports whether a model id has usable steps and all of them are
// on offline providers.
func hidden(steps []Step, off map[*Provider]bool) bool {
	usable := 0
	for _, s := range steps {
		if !s.Usable() {
			continue
		}
		usable++
		if !off[s.Provider] {
			return false
		}
	}
	return usable > 0
}

// VisibleNames are the model ids GET /v1/models lists: Names without the
// models only offline providers serve (all of Names when every provider is
// offline, or none is).
func (t *Table) VisibleNames() []ModelName {
	if h := t.health.Load(); h != nil && h.visible != nil {
		return h.visible
	}
	return t.Names
}
