package proxy

import (
	"context"
	"crypto/x509"
	"fmt"
	"sync/atomic"
	"time"

	"switchyard.dev/services/proxy/internal/clientkey"
	"switchyard.dev/services/proxy/internal/guard"
	"switchyard.dev/services/proxy/internal/passive"
	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/services/proxy/internal/upstream"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/planlimit"
	"switchyard.dev/shared/routingdoc"
	"switchyard.dev/shared/usage"
)

// routing is everything the proxy routes with that comes from the routing
// configuration (providers and keys, models, aliases, chains, clients and
// plans, trip rules, prices): built whole from one configuration and
// swapped whole when a new one is applied. A request keeps the routing it
// started with to its end, so a switch never changes a request midway.
type routing struct {
	cfg     *config.Config
	version int // the routing configuration's version; 0: the file
	table   *route.Table
	// clients are swapped whole when a reload (SIGHUP) changes them.
	clients    atomic.Pointer[clientkey.Keys]
	upstreams  []*upstream.Client // by provider index
	classifier *failure.Classifier
	passive    *passive.Counters // nil: passive reports off
	modelsBody [2][]byte         // by provider.Format of the caller
	plans      map[string]*planlimit.Limits
	prices     *usage.Table
	// budgets are the providers' budgets (nil: no provider has one).
	budgets      *providerBudgets
	latencyAlpha float64
	// guards are the routing's guardrails, compiled.
	guards *guard.Set
	// caches are the routes' cache policies (cache.go); anyCache: some
	// route, plan or client key sets one.
	caches   map[string]config.CachePolicy
	anyCache bool

	// active counts the requests that started on this routing and have
	// not finished; a retired routing closes its own connection pools
	// once it reaches 0.
	active atomic.Int64
}

// Check reports what New would refuse in cfg's routing (its routes do not
// build), starting nothing: the proxy's part of a -check.
func Check(cfg *config.Config) error {
	prices := usage.NewTable(usage.Defaults(), priceEntries(cfg.Prices))
	table, err := route.Build(cfg, route.Options{Prices: prices})
	if err != nil {
		return fmt.Errorf("proxy: build routes: %w", err)
	}
	if _, err := guard.Compile(cfg, table); err != nil {
		return fmt.Errorf("proxy: guardrails: %w", err)
	}
	return nil
}

// upstreamRootCAs are the CAs provider certificates are verified against
// (nil: the system's); tests set their own.
var upstreamRootCAs *x509.CertPool

// newRouting builds the routing of cfg. Connection pools of prev (the
// routing in use) are kept for providers whose connection settings did not
// change; secrets rotated through the admin API replace the configured
// ones, as they do on the routing in use.
func (s *Service) newRouting(cfg *config.Config, version int, prev *routing) (*routing, error) {
	prices := usage.NewTable(usage.Defaults(), priceEntries(cfg.Prices))
	table, err := route.Build(cfg, route.Options{Latency: s.latency, Prices: prices, Headroom: s.room})
	if err != nil {
		return nil, fmt.Errorf("build routes: %w", err)
	}
	rt := &routing{cfg: cfg, version: version, table: table,
		classifier: cfg.Classifier(), plans: map[string]*planlimit.Limits{}, prices: prices,
		budgets: newProviderBudgets(cfg, s.limits.lim), latencyAlpha: cfg.Routing.LatencyAlpha}
	rt.clients.Store(clientkey.New(cfg, table, cfg.ClientKeyRequired()))
	if rt.guards, err = guard.Compile(cfg, table); err != nil {
		return nil, fmt.Errorf("guardrails: %w", err)
	}
	rt.caches, rt.anyCache = routeCaches(cfg, table)
	if rt.latencyAlpha == 0 {
		rt.latencyAlpha = config.DefaultLatencyAlpha
	}
	for name, p := range cfg.Plans {
		rt.plans[name] = planlimit.LimitsOf(name, p)
	}
	for _, p := range cfg.Providers {
		o := upstream.Options{UserAgent: userAgent, RootCAs: upstreamRootCAs}
		o.Latency, o.TTFT = s.metrics.providerSeries(p.Name)
		rt.upstreams = append(rt.upstreams, upstream.Reuse(prev.upstreamOf(p.Name), s.cfg, p, o))
	}
	s.secrets.rotated.Range(func(k, v any) bool {
		id := k.(rotatedKey)
		if key := table.Key(id.provider, id.key); key != nil {
			key.SetSecret(v.(config.Secret))
		}
		return true
	})
	if s.passive.on {
		rt.passive = passive.New(table)
	}
	if snap := s.health.Load(); snap != nil {
		table.SetHealth(healthOf(snap), snap.KeyUnhealthy)
	}
	rt.modelsBody = s.modelLists(table.Names)
	return rt, nil
}

// upstreamOf is the upstream client of the provider named name, or nil.
func (rt *routing) upstreamOf(name string) *upstream.Client {
	if rt == nil {
		return nil
	}
	for _, p := range rt.table.Providers {
		if p.Name == name {
			return rt.upstreams[p.Index]
		}
	}
	return nil
}

// rotatedKey names a key whose secret was rotated through the admin API.
type rotatedKey struct{ provider, key string }

// Apply switches the proxy to a new routing configuration (a version of
// the fleet's routing document): requests that started keep the routing
// they started with, new ones use the new one, and nothing fails because
// of the switch. Connection pools of providers whose connection settings
// did not change are kept; those no longer used are closed once the last
// request on them ends. The hold engine's resilience settings follow. A
// configuration that does not build is refused and the routing in use
// stays.
func (s *Service) Apply(cfg *config.Config, version int) error {
	pol, err := hold.PolicyFromConfig(cfg)
	if err != nil {
		return fmt.Errorf("proxy: apply routing version %d: hold policy: %w", version, err)
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	old := s.rt.Load()
	rt, err := s.newRouting(cfg, version, old)
	if err != nil {
		return fmt.Errorf("proxy: apply routing version %d: %w", version, err)
	}
	s.engine.SetPolicy(pol)
	s.rt.Store(rt)
	s.log.Info("routing configuration applied", "version", version, "previous", old.version,
		"providers", len(rt.table.Providers), "models", len(rt.table.Names))
	s.retire(old)
	return nil
}

// retire hands the last passive counts of old to the reports and, once
// no request runs on old, lets go of its connection pools: a pool no
// routing uses any more (its provider is gone, or its connection settings
// changed) closes.
func (s *Service) retire(old *routing) {
	if old.passive != nil {
		s.passive.mu.Lock()
		s.passive.retired = append(s.passive.retired, old)
		s.passive.mu.Unlock()
	}
	s.life.retiring.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for old.active.Load() > 0 {
			select {
			case <-t.C:
			case <-s.baseCtx.Done():
			}
			if s.baseCtx.Err() != nil {
				break // shutting down: requests end as the pools close
			}
		}
		old.release()
	})
}

// release lets go of the routing's connection pools.
func (rt *routing) release() {
	for _, u := range rt.upstreams {
		u.Release()
	}
}

// setHealth applies the prober's health records to the routing in use
// and keeps them for the next one.
func (s *Service) setHealth(snap *health.Snapshot) {
	s.health.Store(snap)
	seedLatency(s.latency, snap)
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.rt.Load().table.SetHealth(healthOf(snap), snap.KeyUnhealthy)
}

// RoutingVersion is the version of the routing configuration in use (0:
// the file's).
func (s *Service) RoutingVersion() int { return s.rt.Load().version }

// followRouting keeps the proxy on the fleet's active routing
// configuration (switchyard_config): it imports the file's routing as the
// first version when the fleet has none, then applies each version
// activated (routingdoc.Follow).
func (s *Service) followRouting(ctx context.Context) {
	select {
	case <-s.member.Bound():
	case <-ctx.Done():
		s.versions.tracker.Stop()
		return
	}
	s.versions.store.Bind(s.member.Resources().Config)
	err := s.versions.tracker.Follow(ctx, s.versions.store, routingdoc.FollowOptions{
		Base: s.cfg, Environ: s.environ, Instance: s.member.Instance, Service: "proxy", Log: s.log.With("component", "routing"), Apply: s.applyVersion})
	if err != nil && ctx.Err() == nil {
		s.log.Error("routing configuration not followed", "err", err)
	}
}

func (s *Service) applyVersion(cfg *config.Config, v uint64) error { return s.Apply(cfg, int(v)) }
