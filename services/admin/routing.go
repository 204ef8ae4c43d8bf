package admin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/planlimit"
	"switchyard.dev/shared/routingdoc"
)

// routing is everything the admin service shows and checks that comes
// from the fleet's routing configuration (providers and keys, chains,
// clients and plans, trip rules, the classifier): built whole from one
// configuration and swapped whole by Apply. A request reads it once
// (Service.routing) and keeps that one to its end; nothing in it changes
// once built.
type routing struct {
	cfg     *config.Config
	version int // the routing configuration's version; 0: the file's
	// plans are the configured plans' limits, as the quota limiter
	// reads them.
	plans map[string]*planlimit.Limits
	// fingerprints of the keys' secrets, provider/key -> fingerprint, for
	// the hold records this instance writes (pins).
	fingerprints map[string]string
	// shown is GET /admin/config/routing's view of cfg (but the
	// instance's routing error and the caller's role), built once.
	shown routingView
}

func newRouting(cfg *config.Config, version int) *routing {
	rt := &routing{cfg: cfg, version: version, plans: make(map[string]*planlimit.Limits, len(cfg.Plans)),
		fingerprints: map[string]string{}}
	for name, p := range cfg.Plans {
		rt.plans[name] = planlimit.LimitsOf(name, p)
	}
	for _, p := range cfg.Providers {
		for _, k := range p.Keys {
			rt.fingerprints[p.Name+"/"+k.ID] = k.Value.Fingerprint()
		}
	}
	rt.shown = rt.view()
	return rt
}

// routing is the routing configuration in use.
func (s *Service) routing() *routing { return s.rt.Load() }

// RoutingVersion is the version of the routing configuration in use (0:
// the one of the file the service started with).
func (s *Service) RoutingVersion() int { return s.routing().version }

// Apply switches the admin service to a new routing configuration (a
// version of the fleet's routing document): the providers, keys, chains,
// clients, plans and trip rules it shows and checks come from cfg from
// now on, and its hold engine's resilience settings follow. A request
// that started keeps the configuration it read. A configuration whose
// resilience settings the hold engine refuses is refused and the one in
// use stays.
func (s *Service) Apply(cfg *config.Config, version int) error {
	if cfg == nil {
		return fmt.Errorf("admin: apply routing version %d: nil config", version)
	}
	pol, err := hold.PolicyFromConfig(cfg)
	if err != nil {
		return fmt.Errorf("admin: apply routing version %d: hold policy: %w", version, err)
	}
	rt := newRouting(cfg, version)
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	old := s.rt.Load()
	s.engine.SetPolicy(pol)
	s.rt.Store(rt)
	close(s.appliedCh) // wake the writes waiting for their version (waitApplied)
	s.appliedCh = make(chan struct{})
	if old != nil {
		s.log.Info("routing configuration applied", "version", version, "previous", old.version, "providers", len(cfg.Providers))
	}
	return nil
}

// applied returns a channel closed at the next Apply.
func (s *Service) applied() <-chan struct{} {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return s.appliedCh
}

// maxApplyWait bounds how long a configuration write waits for this
// instance to apply the version it wrote, so that its answer (and the
// reads that follow it) show the new configuration.
const maxApplyWait = 2 * time.Second

// waitApplied waits until this instance routes with version (or a later
// one), could not apply it, or maxApplyWait passed; it reports whether
// the version (or a later one) is in use.
func (s *Service) waitApplied(ctx context.Context, version uint64) bool {
	t := time.NewTimer(maxApplyWait)
	defer t.Stop()
	for {
		ch := s.applied()
		if uint64(s.RoutingVersion()) >= version {
			return true
		}
		if f := s.followed.Failure(); f != nil && f.Version >= version {
			return false
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// fingerprint is the fingerprint of a key's secret (for the hold records
// this instance writes, its pins): its last rotation's, as the proxies
// send it, else the configured one in the routing in use.
func (s *Service) fingerprint(provider, keyID string) string {
	s.rotMu.Lock()
	r, ok := s.rotated[provider+"/"+keyID]
	s.rotMu.Unlock()
	if ok {
		return r.Fingerprint // the secret the proxies send since its rotation
	}
	return s.routing().fingerprints[provider+"/"+keyID]
}

// followRouting keeps the service on the fleet's active routing
// configuration (switchyard_config) until ctx ends: it imports the file's
// routing as the first version when the fleet has none, then applies each
// version activated (routingdoc.Follow), as every proxy and the prober
// do.
func (s *Service) followRouting(ctx context.Context) {
	select {
	case <-s.member.Bound():
	case <-ctx.Done():
		s.followed.Stop()
		return
	}
	s.routes.Bind(s.member.Resources().Config)
	err := s.followed.Follow(ctx, s.routes, routingdoc.FollowOptions{
		Base: s.cfg, Environ: s.environ, Instance: s.member.Instance, Service: "admin", Log: s.log.With("component", "routing"),
		Apply: func(cfg *config.Config, v uint64) error { return s.Apply(cfg, int(v)) },
	})
	if err != nil && ctx.Err() == nil {
		s.log.Error("routing configuration not followed", "err", err)
	}
}

// validateDocument loads doc over the service's own configuration, as
// every service will when the version is active: the store's validation
// (routingdoc.WithValidate) and the preview's.
func (s *Service) validateDocument(doc []byte, name string) (*config.Config, error) {
	cfg, err := config.LoadOverlay(s.cfg, s.environ, doc, name)
	if err != nil {
		return nil, err
	}
	// The hold policy every service builds from it (ladders and breakers
	// after defaults and global values): a version that no service could
	// apply never becomes active.
	if _, err := hold.PolicyFromConfig(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// routingView is GET /admin/config/routing: the parts of the routing
// configuration in use that the dashboard's Configuration page edits,
// from the version this instance applies (with defaults filled in).
type routingView struct {
	// Version is the version in use (0: the file's); RoutingError the
	// last version this instance could not apply.
	Version      int                 `json:"version"`
	RoutingError *routingdoc.Failure `json:"routing_error,omitempty"`
	Chains       []chainView         `json:"chains"`
	Providers    []providerConfig    `json:"providers"`
	// TripOn are the global trip_on rules, by name.
	TripOn []tripRuleView `json:"trip_on"`
	// Role is the role of the token that asked (the dashboard shows its
	// switches and forms to operators).
	Role string `json:"role"`
}

type chainView struct {
	Name  string     `json:"name"`
	Steps []stepView `json:"steps"`
}

type stepView struct {
	Index  int    `json:"index"`
	Target string `json:"target"`
	// Active is the step's flag; Unavailable: its provider is an optional
	// one skipped for want of secrets (the step takes no traffic either
	// way).
	Active      bool `json:"active"`
	Unavailable bool `json:"unavailable"`
}

type providerConfig struct {
	Name string          `json:"name"`
	Type string          `json:"type"`
	Keys []keyConfigView `json:"keys"`
	// TripOn are the provider's own trip_on rules when TripOnSource is
	// "provider" (they replace the global ones), else the global ones.
	TripOn       []tripRuleView `json:"trip_on"`
	TripOnSource string         `json:"trip_on_source"`
}

type keyConfigView struct {
	ID       string `json:"id"`
	Priority int    `json:"priority"`
	Weight   int    `json:"weight"`
	// Enabled false: the key stays configured but takes no traffic and is
	// not checked.
	Enabled bool `json:"enabled"`
}

// tripRuleView is a trip_on rule as configured.
type tripRuleView struct {
	Name  string `json:"name"`
	Match string `json:"match"`
	Class string `json:"class"`
	TTL   string `json:"ttl,omitempty"`
}

func tripRuleViews(rules map[string]config.TripRule) []tripRuleView {
	out := make([]tripRuleView, 0, len(rules))
	for _, name := range slices.Sorted(maps.Keys(rules)) {
		r := rules[name]
		v := tripRuleView{Name: name, Match: r.Match, Class: r.Class}
		if r.TTL > 0 {
			v.TTL = shortDuration(r.TTL)
		}
		out = append(out, v)
	}
	return out
}

// shortDuration writes d without its zero tails: 2h, 1h30m, 90s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// view builds the routing view of rt.
func (rt *routing) view() routingView {
	cfg := rt.cfg
	v := routingView{Version: rt.version, Chains: []chainView{}, Providers: []providerConfig{}, TripOn: tripRuleViews(cfg.TripOn)}
	for _, name := range slices.Sorted(maps.Keys(cfg.Chains)) {
		cv := chainView{Name: name, Steps: []stepView{}}
		for i, st := range cfg.Chains[name].Steps {
			cv.Steps = append(cv.Steps, stepView{Index: i, Target: st.Target, Active: st.Active == nil || *st.Active, Unavailable: st.Unavailable})
		}
		v.Chains = append(v.Chains, cv)
	}
	for _, p := range cfg.Providers {
		pc := providerConfig{Name: p.Name, Type: p.Type, Keys: []keyConfigView{}, TripOn: v.TripOn, TripOnSource: "global"}
		if p.TripOn != nil || p.TripRules != nil {
			pc.TripOn, pc.TripOnSource = tripRuleViews(p.TripOn), "provider"
		}
		for _, k := range p.Keys {
			pc.Keys = append(pc.Keys, keyConfigView{ID: k.ID, Priority: k.Priority, Weight: k.Weight, Enabled: k.IsEnabled()})
		}
		v.Providers = append(v.Providers, pc)
	}
	return v
}

// routingInUse: GET /admin/config/routing
func (s *Service) routingInUse(c *fiber.Ctx) error {
	v := s.routing().shown // a copy; its slices are not written
	v.RoutingError = s.followed.Failure()
	v.Role = tokenRole(c)
	return c.JSON(v)
}
