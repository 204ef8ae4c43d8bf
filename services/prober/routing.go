package prober

import (
	"errors"
	"fmt"
	"net/url"
	"slices"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
)

// routing is everything the prober takes from the routing configuration
// (providers with their keys, models and checks; trip rules): built whole
// from one configuration and swapped whole by Apply. The check units, the
// settle loop, the passive reports and the HTTP handlers read it through
// Service.routing; nothing in it changes once built.
type routing struct {
	version    int // the routing configuration's version; 0: the file
	targets    map[string]*target
	order      []*target // as configured
	classifier *failure.Classifier
}

// newRouting builds the routing of cfg, with the checks' defaults from pc
// (the process's prober settings: the prober section is not part of the
// routing configuration). It refuses what the prober could not check: providers without a name or named twice, unknown types, keys
// without an id or listed twice, a check URL that is not http(s), and
// resilience settings the hold engine refuses.
func newRouting(cfg *config.Config, pc config.Prober, version int) (*routing, hold.Policy, error) {
	if cfg == nil {
		return nil, hold.Policy{}, errors.New("nil config")
	}
	pol, err := hold.PolicyFromConfig(cfg)
	if err != nil {
		return nil, hold.Policy{}, fmt.Errorf("hold policy: %w", err)
	}
	var errs []error
	for i, p := range cfg.Providers {
		at := fmt.Sprintf("providers[%d]", i)
		switch {
		case p.Name == "":
			errs = append(errs, fmt.Errorf("%s: no name", at))
		case slices.ContainsFunc(cfg.Providers[:i], func(o config.Provider) bool { return o.Name == p.Name }):
			errs = append(errs, fmt.Errorf("%s: %q is configured twice", at, p.Name))
		}
		if !slices.Contains(config.ProviderTypes, p.Type) {
			errs = append(errs, fmt.Errorf("%s (%s): unknown type %q", at, p.Name, p.Type))
		}
		for j, k := range p.Keys {
			switch {
			case k.ID == "":
				errs = append(errs, fmt.Errorf("%s.keys[%d] (%s): no id", at, j, p.Name))
			case slices.ContainsFunc(p.Keys[:j], func(o config.Key) bool { return o.ID == k.ID }):
				errs = append(errs, fmt.Errorf("%s.keys[%d] (%s): id %q is used twice", at, j, p.Name, k.ID))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, hold.Policy{}, err
	}
	rt := &routing{version: version, targets: map[string]*target{}, classifier: cfg.Classifier()}
	for _, t := range buildTargets(cfg, pc) {
		if t.spec.enabled {
			if u, err := url.Parse(t.spec.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("provider %s: health check URL %q is not an http(s) URL", t.name, t.spec.url))
			}
		}
		rt.targets[t.name] = t
		rt.order = append(rt.order, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, hold.Policy{}, err
	}
	return rt, pol, nil
}

// unitIDs are the check units of the routing: one per provider, or one per
// key with health_check.per_key.
func (rt *routing) unitIDs() []unitID {
	var out []unitID
	for _, t := range rt.order {
		if !t.spec.perKey {
			out = append(out, unitID{provider: t.name})
			continue
		}
		for _, k := range t.keys {
			out = append(out, unitID{provider: t.name, keyID: k.ID})
		}
	}
	return out
}

// unit returns the target of a unit of the routing, and whether the unit
// discovers the provider's models (the provider's unit, or its first key's
// with per_key; only for types with a models endpoint, and only when
// discovery is on: health_check.discovery). ok is false when the routing
// has no such unit.
func (rt *routing) unit(id unitID) (t *target, discover, ok bool) {
	t = rt.targets[id.provider]
	if t == nil || t.spec.perKey != (id.keyID != "") {
		return nil, false, false
	}
	if id.keyID != "" {
		if _, ok := t.keyByID(id.keyID); !ok {
			return nil, false, false
		}
	}
	first := id.keyID == "" || t.keys[0].ID == id.keyID
	return t, first && t.spec.discover && config.DefaultHealthPath(t.typ) != "", true
}

// writes reports whether the routing's units write the health record of
// provider and keyID ("": the provider record, which a per-key provider's
// units write as the aggregate of its keys).
func (rt *routing) writes(provider, keyID string) bool {
	t := rt.targets[provider]
	if t == nil {
		return false
	}
	if keyID == "" {
		return true
	}
	_, ok := t.keyByID(keyID)
	return ok && t.spec.perKey
}

// routing is the routing in use.
func (s *Service) routing() *routing { return s.rt.Load() }

// RoutingVersion is the version of the routing configuration in use (0:
// the one of the file the prober started with).
func (s *Service) RoutingVersion() int { return s.routing().version }

// Apply switches the prober to a new routing configuration (a version of
// the fleet's routing document): targets, check specs, trip rules and the
// providers whose passive reports count are rebuilt from cfg and swapped
// whole, and the hold engine's resilience settings follow. Check units
// whose target and check are unchanged keep running undisturbed (same
// schedule, lease and state); units of providers and keys cfg no longer
// has stop, delete the health records no unit writes any more and release
// their leases; new units start (once the fleet's tables have loaded).
// Secrets rotated through the admin API or reloaded from the file keep
// applying. A configuration that does not build is refused and the one in
// use stays.
func (s *Service) Apply(cfg *config.Config, version int) error {
	rt, pol, err := newRouting(cfg, s.cfg, version)
	if err != nil {
		return fmt.Errorf("prober: apply routing version %d: %w", version, err)
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	old := s.rt.Load()
	s.engine.SetPolicy(pol)
	s.rt.Store(rt)
	s.passive.prune()
	s.units.reconcile()
	s.log.Info("routing configuration applied", "version", version, "previous", old.version, "providers", len(rt.order))
	return nil
}
