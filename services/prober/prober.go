// Package prober is Switchyard's active checker. It checks every provider
// on its configured path (providers[].health_check; by default the type's
// models endpoint), records the results as health records in
// switchyard_health with health events, feeds the results to the hold
// engine like caller traffic (a provider whose checks keep failing is held
// through its circuit breaker; a refused key is held), settles due holds
// with cheap checks (one probe per hold fleet-wide through the engine's
// probe lease), and discovers each provider's models. Replicas share the
// work through leases in switchyard_leases. See README.md.
package prober

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/fleet"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/routingdoc"
	"switchyard.dev/shared/servicehttp"
)

// ShutdownTimeout bounds the graceful shutdown of the HTTP server once the
// context of Run or Serve is done.
const ShutdownTimeout = 10 * time.Second

// Deps are the prober's collaborators.
type Deps struct {
	Log  *slog.Logger
	NATS *nats.Conn // nil: the service serves HTTP but checks nothing and never reports ready
	// Environ resolves the env: secrets of the fleet's routing versions
	// (the environment the configuration was loaded with); nil:
	// os.Environ().
	Environ []string
}

// Service is one prober instance.
type Service struct {
	cfg     config.Prober // with defaults for zero values
	limits  config.Limits // the listener's timeouts and connection cap
	log     *slog.Logger
	nc      *nats.Conn
	member  *fleet.Member
	engine  *hold.Engine
	inst    string
	client  *http.Client
	met     *metrics
	view    *health.View
	passive *passiveWindow
	store   atomic.Pointer[health.Store]
	// rt is the routing in use (routing.go): built from the file at start,
	// replaced whole by Apply (applyMu serialises Apply).
	rt      atomic.Pointer[routing]
	applyMu sync.Mutex
	units   *unitSet       // the check units, once runChecks starts them
	ready   *bus.Readiness // /readyz: NATS connected and JetStream answering for switchyard_holds
	credKey []byte         // credentials.encryption_key (nil: rotation off)
	secrets secrets        // rotated or reloaded secrets
	// trips are the breaker holds this replica's own checks tripped, by
	// hold id, with the hold's Since and rung: a passing check releases such a hold
	// at once (releaseProviderHold). The record's last writer does not say
	// who tripped it (a probe's result rewrites it).
	trips sync.Map // hold id -> tripMark
	// base is the configuration the prober started with (file and
	// environment); the fleet's routing versions apply over it. routes is
	// the switchyard_config bucket, followed what /readyz says of it.
	base     *config.Config
	routes   *routingdoc.Store
	followed *routingdoc.Tracker
	environ  []string
}

// New builds a prober from a validated configuration.
func New(cfg *config.Config, deps Deps) (*Service, error) {
	if cfg == nil {
		return nil, errors.New("prober: nil config")
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rt, _, err := newRouting(cfg, withDefaults(cfg.Prober), 0)
	if err != nil {
		return nil, fmt.Errorf("prober: %w", err)
	}
	var s *Service
	m, err := fleet.New(cfg, fleet.Options{Service: "prober", NATS: deps.NATS, Log: log,
		Fingerprint: func(provider, keyID string) string { return s.fingerprint(provider, keyID) }})
	if err != nil {
		return nil, fmt.Errorf("prober: %w", err)
	}
	s = &Service{
		cfg:     withDefaults(cfg.Prober),
		limits:  cfg.Limits,
		credKey: cfg.Credentials.Key,
		log:     log,
		nc:      deps.NATS,
		member:  m,
		engine:  m.Engine,
		inst:    m.Instance,
		met:     newMetrics(m.Engine, deps.NATS),
		view:    health.NewView(nil),
		ready:   bus.NewReadiness(deps.NATS, m.Resources, bus.ReadinessOptions{}),
		client: &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second,
			ForceAttemptHTTP2:   true,
		}},
	}
	s.rt.Store(rt)
	s.secrets.file.NoteAll(cfg)
	s.base = cfg
	s.followed = routingdoc.NewTracker()
	s.environ = deps.Environ
	s.routes = routingdoc.NewUnbound(deps.NATS, log.With("component", "routing"))
	s.units = newUnitSet(s)
	s.passive = newPassiveWindow(s.cfg.PassiveWindow, func(provider string) bool { return s.routing().targets[provider] != nil })
	return s, nil
}

// withDefaults fills zero prober settings with the defaults (a
// configuration built in code rather than loaded).
func withDefaults(p config.Prober) config.Prober {
	d := config.Defaults().Prober
	set := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&p.CheckInterval, d.CheckInterval)
	set(&p.CheckTimeout, d.CheckTimeout)
	set(&p.RecheckInterval, d.RecheckInterval)
	set(&p.LeaseTTL, d.LeaseTTL)
	set(&p.SettleInterval, d.SettleInterval)
	set(&p.DiscoveryInterval, d.DiscoveryInterval)
	set(&p.DiscoveryRetry, d.DiscoveryRetry)
	set(&p.PassiveWindow, d.PassiveWindow)
	if p.UnhealthyAfter < 1 {
		p.UnhealthyAfter = d.UnhealthyAfter
	}
	if p.PassiveDegradedRatio <= 0 || p.PassiveDegradedRatio > 1 {
		p.PassiveDegradedRatio = d.PassiveDegradedRatio
	}
	if p.Listen == "" {
		p.Listen = d.Listen
	}
	return p
}

// Instance is the prober's instance id (recorded_by, checked_by, lease
// owner).
func (s *Service) Instance() string { return s.inst }

// Engine is the prober's hold engine.
func (s *Service) Engine() *hold.Engine { return s.engine }

func (s *Service) healthStore() *health.Store { return s.store.Load() }

// Run listens on prober.listen and serves until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("prober: listen on %s: %w", s.cfg.Listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve runs the checks and serves HTTP on ln until ctx is done, then
// shuts down gracefully (HTTP at most ShutdownTimeout, then the checks,
// whose leases are released for another replica). It closes ln.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	app := s.newApp()
	errc := make(chan error, 1)
	go func() { errc <- app.Listener(ln) }()
	s.log.Info("prober serving", "addr", ln.Addr().String(), "instance", s.inst,
		"providers", len(s.routing().order), "routing_version", s.RoutingVersion())

	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	if s.nc != nil {
		// Before the fleet member binds the buckets: once they are bound,
		// the server has the subscription too (one connection, in order).
		in, err := s.subscribePassive()
		if err != nil {
			s.log.Error("passive reports off", "err", err)
		} else {
			wg.Go(func() { s.runPassive(work, in) })
		}
	}
	wg.Go(func() {
		if err := s.member.Run(work); err != nil {
			s.log.Error("hold engine stopped", "err", err)
		}
	})
	if s.nc != nil {
		wg.Go(func() { s.ready.Run(work) })
		wg.Go(func() { s.runChecks(work) })
	}

	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	err := app.ShutdownWithTimeout(ShutdownTimeout)
	// A shutdown that lands before fasthttp has registered ln does not
	// close it; closing it here makes a late Serve return at once.
	_ = ln.Close()
	if serveErr == nil {
		serveErr = <-errc
	} else {
		serveErr = fmt.Errorf("prober: serve on %s: %w", ln.Addr(), serveErr)
	}
	stopWork()
	wg.Wait()
	s.client.CloseIdleConnections()
	if serveErr != nil {
		return serveErr
	}
	if err != nil {
		return fmt.Errorf("prober: shut down HTTP server: %w", err)
	}
	s.log.Info("prober stopped")
	return nil
}

// runChecks waits for the fleet's buckets, runs the health view, waits
// for it and the hold table to load, then runs one goroutine per check unit
// of the routing in use (units.go; Apply adds and stops units later) and
// the settle loop until ctx ends.
func (s *Service) runChecks(ctx context.Context) {
	select {
	case <-s.member.Bound():
	case <-ctx.Done():
		return
	}
	res := s.member.Resources()
	s.store.Store(health.NewStore(res.Health))
	js, err := jetstream.New(s.nc)
	if err != nil {
		s.log.Error("prober: JetStream context", "err", err)
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = s.view.Run(ctx, res.Health, s.nc, s.log) })
	secretsLoaded := make(chan struct{})
	var once sync.Once
	wg.Go(func() { s.runCredentials(ctx, func() { once.Do(func() { close(secretsLoaded) }) }) })
	// the fleet's routing configuration: the file's as version 1 when the
	// fleet has none, then every version activated (routingdoc.Follow)
	s.routes.Bind(res.Config)
	wg.Go(func() {
		err := s.followed.Follow(ctx, s.routes, routingdoc.FollowOptions{Base: s.base, Environ: s.environ, Instance: s.inst, Service: "prober",
			Log:   s.log.With("component", "routing"),
			Apply: func(cfg *config.Config, v uint64) error { return s.Apply(cfg, int(v)) }})
		if err != nil && ctx.Err() == nil {
			s.log.Error("routing configuration not followed", "err", err)
		}
	})
	// Schedules start from what the fleet recorded, checks skip the keys it
	// holds and send the secrets the proxies send: the tables and the
	// rotated secrets load first.
	for _, synced := range []<-chan struct{}{s.view.Synced(), s.member.Synced(), secretsLoaded, s.followed.Loaded()} {
		select {
		case <-synced:
		case <-ctx.Done():
			return
		}
	}
	s.units.start(ctx, js, res.Leases)
	defer s.units.wait() // before wg.Wait: the units end with ctx
	wg.Go(func() { s.settleLoop(ctx) })
}

func (s *Service) newApp() *fiber.App {
	app := fiber.New(fiber.Config{
		AppName:               "switchyard-prober",
		DisableStartupMessage: true,
		ReadTimeout:           s.limits.ReadTimeout,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           s.limits.IdleTimeout,
		Concurrency:           s.limits.MaxConnections,
		ErrorHandler:          errorHandler,
	})
	app.Get("/healthz", servicehttp.Healthz)
	app.Get("/readyz", s.readiness().Handler())
	app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(s.met.reg, promhttp.HandlerOpts{})))
	app.Get("/v1/health", s.listHealth)
	return app
}

// readiness is /readyz: 200 while NATS is connected and JetStream
// answers for the switchyard_holds bucket (its stream has a leader) and
// the fleet's routing configuration has loaded (the prober checks nothing
// before it knows the fleet's version), 503 with the reason otherwise;
// with the version of the routing configuration in use (routing_version,
// 0 for the file's) and the last version it could not apply
// (routing_error), as the proxy and the admin service report them. It
// reads the result of a background probe: it never waits on NATS.
func (s *Service) readiness() servicehttp.Readiness {
	return servicehttp.Readiness{Base: servicehttp.NATS(s.ready), Version: s.RoutingVersion, Routing: s.followed, WaitRouting: true}
}

// listHealth answers the health records as the prober sees them.
func (s *Service) listHealth(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"records": s.view.Snapshot().Records()})
}

// errorHandler answers errors (unknown routes included) with a JSON body.
func errorHandler(c *fiber.Ctx, err error) error {
	code := servicehttp.ErrorStatus(err)
	return c.Status(code).JSON(fiber.Map{"error": fiber.Map{"message": err.Error(), "code": code}})
}
