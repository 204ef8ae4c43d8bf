// Package admin is Switchyard's operator service: the JSON API under
// /admin (holds, provider status and reset, credential rotation, the
// classifier, a live event stream), Prometheus metrics at /metrics and the
// dashboard at /. It talks to the rest of the fleet through NATS only: it
// runs its own hold engine bound to the switchyard_holds bucket (whose table
// follows the bucket, like every proxy's), writes rotated secrets to
// switchyard_credentials and reads the SWITCHYARD_EVENTS stream. See
// README.md for the API.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/credentials"
	"switchyard.dev/shared/fleet"
	"switchyard.dev/shared/headroom"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/planlimit"
	"switchyard.dev/shared/routingdoc"
	"switchyard.dev/shared/servicehttp"
	"switchyard.dev/shared/usage/rollup"
)

// ShutdownTimeout bounds the graceful shutdown of the HTTP server once the
// context of Run or Serve is done.
const ShutdownTimeout = 10 * time.Second

// DefaultHeartbeat is how often an idle event stream sends a comment line
// (which also notices clients that went away).
const DefaultHeartbeat = 15 * time.Second

// opTimeout bounds one NATS operation done for a request.
const opTimeout = 5 * time.Second

// Deps are the admin service's collaborators.
type Deps struct {
	Log  *slog.Logger
	NATS *nats.Conn // nil: the service runs but never reports ready; writes answer 503
	// Heartbeat of idle event streams; 0 means DefaultHeartbeat.
	Heartbeat time.Duration
	// UsageMaxScan bounds the records one usage report reads; 0 means
	// DefaultUsageMaxScan.
	UsageMaxScan int
	// Environ resolves the env: secrets of the fleet's routing documents
	// (the versions it applies, and the documents it validates before
	// writing them); nil means os.Environ().
	Environ []string
	// ExplainTimeout bounds the wait for a proxy's route explanation
	// (POST /admin/route/explain); 0 means DefaultExplainTimeout.
	ExplainTimeout time.Duration
	// NoUsageRecorder: this instance never records usage rollups (another
	// one does); its reports read the rollups all the same.
	NoUsageRecorder bool
	// BacklogEvery is how often the usage backlog is measured; 0 means
	// every 5 s.
	BacklogEvery time.Duration
	// LimitsNow is the clock of the plan limits' windows and periods
	// (planlimit.Options.Now: the sliding minute, the budget periods);
	// nil means time.Now. Tests pin it, as their stand-in proxies do.
	LimitsNow func() time.Time
}

// Service is one admin instance.
type Service struct {
	// cfg is the configuration the service started with: its process
	// settings (listen address, tokens, limits, credentials, metering)
	// hold for its life; its routing configuration is the file's, in use
	// until the fleet's active version applies (rt).
	cfg     *config.Config
	environ []string
	// rt is the routing configuration in use (routing.go): the file's at
	// start, then every version of the fleet's activated (Apply). routes
	// is the switchyard_config bucket, followed what /readyz says of it.
	rt        atomic.Pointer[routing]
	routes    *routingdoc.Store
	followed  *routingdoc.Tracker
	applyMu   sync.Mutex
	appliedCh chan struct{} // closed (and replaced) by each Apply

	log    *slog.Logger
	nc     *nats.Conn
	member *fleet.Member
	engine *hold.Engine
	auth   *authenticator
	box    *credentials.Box // nil: rotation is off
	met    *metrics
	hb     time.Duration
	// explainTimeout bounds the wait for a proxy's route explanation.
	explainTimeout time.Duration
	health         *health.View   // the prober's health records
	ready          *bus.Readiness // /readyz: NATS connected and JetStream answering for switchyard_holds
	usage          usageReader    // bounds of /admin/usage
	// rollupRes are the rollups' resolutions (metering.rollups); rec
	// records them while this instance holds the lease (nil: never).
	rollupRes []rollup.Resolution
	// rollupCache keeps the rollup values reports decoded.
	rollupCache *rollup.Cache
	rec         *recorder
	backlog     *backlogWatch
	// quota follows the fleet's plan consumption on switchyard_limits
	// (it admits nothing) and writes budget resets.
	quota *planlimit.Limiter

	rotMu   sync.Mutex
	rotated map[string]rotation // provider/key -> last rotation (no secret)
	// room is the fleet's headroom readings (followHeadroom).
	room *headroom.Book

	stop     chan struct{} // closed when the service shuts down: ends event streams
	stopOnce sync.Once
	streams  sync.WaitGroup
}

// New builds an admin service from a validated configuration.
func New(cfg *config.Config, deps Deps) (*Service, error) {
	if cfg == nil {
		return nil, errors.New("admin: nil config")
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{
		cfg: cfg, environ: deps.Environ, log: log, nc: deps.NATS,
		auth:           newAuthenticator(cfg.Admin.Tokens),
		hb:             deps.Heartbeat,
		explainTimeout: deps.ExplainTimeout,
		rotated:        map[string]rotation{},
		stop:           make(chan struct{}),
		health:         health.NewView(nil),
		usage:          newUsageReader(deps.UsageMaxScan),
		appliedCh:      make(chan struct{}),
		followed:       routingdoc.NewTracker(),
		room:           headroom.NewBook(),
	}
	if s.environ == nil {
		s.environ = os.Environ()
	}
	s.rt.Store(newRouting(cfg, 0))
	m, err := fleet.New(cfg, fleet.Options{Service: "admin", NATS: deps.NATS, Log: log, Fingerprint: s.fingerprint})
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	s.member, s.engine = m, m.Engine
	s.ready = bus.NewReadiness(deps.NATS, m.Resources, bus.ReadinessOptions{})
	s.routes = routingdoc.NewUnbound(deps.NATS, log.With("component", "routing"),
		routingdoc.WithValidate(func(doc []byte, name string) error {
			_, err := s.validateDocument(doc, name)
			return err
		}))
	s.quota, err = planlimit.New(planlimit.Options{Instance: m.Instance, Conn: deps.NATS,
		Interval: cfg.Metering.LimitsInterval, Log: log, Now: deps.LimitsNow})
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if s.hb <= 0 {
		s.hb = DefaultHeartbeat
	}
	if s.explainTimeout <= 0 {
		s.explainTimeout = DefaultExplainTimeout
	}
	if len(cfg.Credentials.Key) > 0 {
		if s.box, err = credentials.NewBox(cfg.Credentials.Key); err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
	}
	r := cfg.Metering.Rollups
	s.rollupRes = rollup.Resolutions(r.Minute, r.Hour, r.Day)
	s.rollupCache = rollup.NewCache(0)
	if r.FlushInterval <= 0 {
		r.FlushInterval = time.Second
	}
	if r.Lease <= 0 {
		r.Lease = 10 * time.Second
	}
	if !deps.NoUsageRecorder && deps.NATS != nil {
		store, err := newUsageStore(cfg.Metering.Store)
		if err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
		s.rec = &recorder{log: log.With("component", "usage-recorder"), inst: m.Instance, nc: deps.NATS,
			flush: r.FlushInterval, leaseTTL: r.Lease, res: s.rollupRes, resources: m.Resources, store: store}
	}
	s.backlog = &backlogWatch{s: s, every: deps.BacklogEvery}
	if s.backlog.every <= 0 {
		s.backlog.every = backlogEvery
	}
	s.met = newMetrics(s)
	return s, nil
}

// Run listens on admin.listen and serves until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin: listen on %s: %w", s.cfg.Admin.Listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve runs the hold engine and serves on ln until ctx is done, then shuts
// down gracefully (at most ShutdownTimeout): event streams end, the HTTP
// server stops, then the engine. It closes ln.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	bg, cancelBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.member.Run(bg); err != nil {
			s.log.Error("admin: hold engine", "err", err)
		}
	})
	if s.nc != nil {
		wg.Go(func() { s.ready.Run(bg) })
		wg.Go(func() { s.watchRotations(bg) })
		wg.Go(func() { s.watchHealth(bg) })
		wg.Go(func() { s.met.followEvents(bg, s.nc) })
		wg.Go(func() { s.runLimits(bg) })
		wg.Go(func() { s.followRouting(bg) })
		wg.Go(func() { s.followHeadroom(bg) })
		if s.rec != nil {
			wg.Go(func() { s.rec.Run(bg) })
		}
		wg.Go(func() { s.backlog.run(bg) })
		wg.Go(func() { s.warmRollups(bg) })
	} else {
		s.followed.Stop() // no fleet: the file's routing configuration
	}
	defer func() {
		cancelBG()
		wg.Wait()
	}()

	app := s.newApp()
	errc := make(chan error, 1)
	go func() { errc <- app.Listener(ln) }()
	s.log.Info("admin serving", "addr", ln.Addr().String(), "tokens", len(s.cfg.Admin.Tokens), "rotation", s.box != nil)

	select {
	case err := <-errc:
		s.shutdownStreams()
		return fmt.Errorf("admin: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.shutdownStreams()
	err := app.ShutdownWithTimeout(ShutdownTimeout)
	// A shutdown that lands before fasthttp has registered ln does not
	// close it; closing it here makes a late Serve return at once.
	_ = ln.Close()
	if serveErr := <-errc; serveErr != nil && err == nil {
		err = serveErr
	}
	s.streams.Wait()
	if err != nil {
		return fmt.Errorf("admin: shut down HTTP server: %w", err)
	}
	s.log.Info("admin stopped")
	return nil
}

func (s *Service) shutdownStreams() { s.stopOnce.Do(func() { close(s.stop) }) }

func (s *Service) newApp() *fiber.App {
	app := fiber.New(fiber.Config{
		AppName:               "switchyard-admin",
		DisableStartupMessage: true,
		ReadTimeout:           s.cfg.Limits.ReadTimeout,
		Concurrency:           s.cfg.Limits.MaxConnections,
		// No write timeout: it would cut event streams. Idle connections
		// are closed after IdleTimeout; streams send heartbeats.
		IdleTimeout:  s.cfg.Limits.IdleTimeout,
		BodyLimit:    1 << 20,
		ErrorHandler: errorHandler,
	})
	app.Use(s.met.middleware)
	app.Get("/healthz", servicehttp.Healthz)
	app.Get("/readyz", s.readiness().Handler())
	app.Get("/metrics", s.met.handler())
	app.Get("/", s.dashboard)
	app.Get("/assets/:file", s.asset)
	app.Get("/admin/openapi.json", s.openapi)

	read := s.auth.require(config.RoleRead)
	op := s.auth.require(config.RoleOperator)
	api := app.Group("/admin")
	api.Get("/holds", read, s.listHolds)
	api.Post("/holds", op, s.pinHold)
	api.Get("/holds/:id", read, s.getHold)
	api.Delete("/holds/:id", op, s.releaseHold)
	api.Get("/providers/status", read, s.providersStatus)
	api.Post("/providers/:name/reset", op, s.resetProvider)
	api.Put("/providers/:name/keys/:id", op, s.rotateKey)
	api.Get("/events", read, s.events)
	api.Post("/classify", read, s.classify)
	api.Post("/route/explain", read, s.explainRoute)
	api.Get("/usage", read, s.usageReport)
	api.Get("/requests", read, s.listRequests)
	api.Get("/requests/:id", read, s.getRequest)
	api.Get("/clients", read, s.listClients)
	api.Get("/clients/:id", read, s.getClient)
	api.Post("/clients/:id/budget/reset", op, s.resetBudget)
	api.Get("/plans", read, s.listPlans)
	api.Get("/cache", read, s.listCache)
	api.Get("/cache/entries/:key", read, s.getCacheEntry)
	api.Delete("/cache", op, s.purgeCache)
	api.Get("/config", read, s.getConfig)
	api.Get("/config/routing", read, s.routingInUse)
	api.Get("/config/versions", read, s.listVersions)
	api.Get("/config/instances", read, s.getInstances)
	api.Get("/config/versions/:n", read, s.getVersion)
	api.Get("/config/diff", read, s.diffVersions)
	api.Post("/config/preview", op, s.preview)
	api.Post("/config/activate", op, s.activate)
	api.Post("/config/rollback", op, s.rollback)
	api.Post("/config/chains/:chain/steps/:i", op, s.setStep)
	api.Patch("/config/providers/:name/keys/:id", op, s.setKeyFields)
	api.Post("/config/providers/:name/keys", op, s.addKey)
	api.Put("/config/providers/:name/trip_on", op, s.setTripRules)
	api.Use(func(c *fiber.Ctx) error {
		return apiError(c, fiber.StatusNotFound, "not_found", "no route "+c.Method()+" "+c.Path())
	})
	return app
}

// natsUp reports whether the fleet is reachable: connected, and the
// buckets bound.
func (s *Service) natsUp() bool {
	return s.nc != nil && s.nc.IsConnected() && s.member.Resources() != nil
}

// readiness is /readyz: 200 while NATS is connected and JetStream answers
// for the switchyard_holds bucket (its stream has a leader) and the
// fleet's routing configuration has loaded, 503 with the reason
// otherwise; with the version of the routing configuration in use
// (routing_version, 0 for the file's) and the last version this instance
// could not apply (routing_error), as the proxy and the prober report
// them; and the usage backlog (usage_backlog), with status "degraded" and
// the reason (still 200) while it alerts. It reads the results of
// background probes: it never waits on NATS.
func (s *Service) readiness() servicehttp.Readiness {
	return servicehttp.Readiness{
		Base: servicehttp.NATS(s.ready), Version: s.RoutingVersion,
		Routing: s.followed, WaitRouting: true,
		Amend: func(status int, out map[string]any) int {
			if st := s.backlog.state.Load(); st != nil {
				out["usage_backlog"] = st
				if st.Alert && status == fiber.StatusOK {
					// still serving: the API answers, reports say what they
					// cover; but records are about to be lost
					out["status"], out["reason"] = "degraded", st.reason()
				}
			}
			return status
		},
	}
}
