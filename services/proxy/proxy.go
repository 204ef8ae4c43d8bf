// Package proxy is Switchyard's data plane: an OpenAI- and
// Anthropic-compatible HTTP API that forwards each request to a provider
// target, failing over across keys and chain steps.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"switchyard.dev/services/proxy/internal/cache"
	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/telemetry"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/fleet"
	"switchyard.dev/shared/headroom"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/metrics"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/routingdoc"
	"switchyard.dev/shared/servicehttp"
)

const userAgent = "switchyard/0.1"

// Deps are the proxy's collaborators.
type Deps struct {
	Log *slog.Logger
	// NATS may be nil: the proxy never needs NATS to serve. Its hold
	// engine then keeps holds in memory.
	NATS *nats.Conn
	// Environ resolves the env: secrets of the fleet's routing versions
	// (the environment the configuration was loaded with); nil:
	// os.Environ().
	Environ []string
}

// Service is one proxy instance.
type Service struct {
	cfg    *config.Config // the process's settings (the routing part: rt.cfg)
	log    *slog.Logger
	member *fleet.Member // the hold engine and the fleet's buckets
	engine *hold.Engine  // member.Engine

	// rt is the routing in use (routing.go): built from the file at start,
	// replaced whole by Apply.
	rt      atomic.Pointer[routing]
	applyMu sync.Mutex // one Apply (or health update) at a time
	secrets secretBook
	// health is the prober's last health records, for each new routing.
	health  atomic.Pointer[health.Snapshot]
	passive passiveReports
	// versions is the fleet's routing configuration (switchyard_config).
	versions fleetVersions
	environ  []string
	life     lifecycle
	callers  *callerWatch
	metrics  *proxyMetrics
	meter    *meter
	limits   *planLimits
	bundles  *bundler
	tracer   *telemetry.Tracer // nil: no trace export
	// latency keeps the targets' and keys' latency averages across
	// routing versions; room what their rate-limit headers say is left.
	latency *route.LatencyBook
	room    *headroom.Book
	started time.Time
	baseCtx context.Context
	stop    context.CancelFunc
	app     *fiber.App
	cache   *cache.Store // the response cache's memory and bucket (cache.go)
}

// secretBook is what the proxy keeps of its keys' secrets across routings.
type secretBook struct {
	// rotated holds the secrets rotated through the admin API, by key, so
	// that each new routing starts with them.
	rotated sync.Map // rotatedKey -> config.Secret
	// file are the keys' secrets as the file last gave them: a reload
	// changes a key only when the file's secret did.
	file config.FileSecrets
	// fileClients are the client keys as the file last gave them (under
	// applyMu): a reload tells a change in the file from the fleet
	// version's own keys.
	fileClients []config.ClientKey
	// loaded is closed once the rotated secrets have loaded (at once when
	// rotation is off).
	loaded chan struct{}
	once   sync.Once
}

// passiveReports: passive reports are published (on: NATS, and
// proxy.passive_report_interval > 0); retired are the routings replaced
// whose passive counts are still to publish: each is flushed with every
// report until no request runs on it any more.
type passiveReports struct {
	on      bool
	mu      sync.Mutex
	retired []*routing
}

// fleetVersions is the fleet's routing configuration (switchyard_config):
// tracker says whether its active version is known and one this proxy
// could not apply.
type fleetVersions struct {
	store   *routingdoc.Store
	tracker *routingdoc.Tracker
}

// lifecycle is the service's requests in flight and its shutdown state.
type lifecycle struct {
	inFlight atomic.Int64
	closing  atomic.Bool    // set when the upstream pools close
	draining atomic.Bool    // set when shutdown starts: /readyz answers 503
	retiring sync.WaitGroup // routings waiting to close their pools
}

// New builds a proxy from a validated configuration.
func New(cfg *config.Config, deps Deps) (*Service, error) {
	if cfg == nil {
		return nil, errors.New("proxy: nil config")
	}
	s := &Service{
		cfg:     cfg,
		log:     deps.Log,
		started: time.Now(),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	m, err := fleet.New(cfg, fleet.Options{Service: "proxy", NATS: deps.NATS, Log: s.log,
		Fingerprint: s.fingerprint, OnApply: s.holdApplied})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	s.member, s.engine = m, m.Engine
	s.passive.on = deps.NATS != nil && cfg.Proxy.PassiveReportInterval > 0
	s.latency = route.NewLatencyBook()
	s.room = headroom.NewBook()
	if s.limits, err = newPlanLimits(cfg, m.Instance, deps.NATS, s.log, m.Emit); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	s.metrics = newProxyMetrics(s) // before the routing: its upstreams keep their series
	if deps.NATS != nil {
		s.metrics.reg.MustRegister(metrics.NewNATSUp("proxy", deps.NATS))
	}
	rt, err := s.newRouting(cfg, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	s.rt.Store(rt)
	s.secrets.file.NoteAll(cfg)
	s.secrets.fileClients = slices.Clone(cfg.Clients)
	s.baseCtx, s.stop = context.WithCancel(context.Background())
	s.callers = newCallerWatch()
	s.secrets.loaded = make(chan struct{})
	s.versions.tracker = routingdoc.NewTracker()
	s.environ = deps.Environ
	s.versions.store = routingdoc.NewUnbound(deps.NATS, s.log.With("component", "routing"))
	s.meter = newMeter(cfg, s.metrics.reg, deps.NATS, s.log)
	cc := config.CacheOf(cfg.Cache)
	s.cache = cache.NewStore(cc.MemoryBytes, cc.MaxEntryBytes, cc.LookupTimeout, s.log.With("component", "cache"))
	s.metrics.cacheMemory(s.cache.Memory())
	if s.tracer, err = telemetry.New(cfg.Telemetry, deps.Environ, m.Instance, s.log.With("component", "otel")); err != nil {
		return nil, fmt.Errorf("proxy: telemetry: %w", err)
	}
	var export func(*debug.Bundle)
	if s.tracer != nil {
		s.tracer.ProviderType = s.providerType
		export = s.tracer.Export
	}
	s.bundles = newBundler(cfg, s.metrics.reg, deps.NATS, m.Instance, s.engine, export, s.log)
	s.app = s.newApp()
	return s, nil
}

func (s *Service) newApp() *fiber.App {
	app := fiber.New(fiber.Config{
		DisableStartupMessage: true,
		BodyLimit:             s.cfg.Limits.MaxBodyBytes,
		ReadBufferSize:        16 << 10,
		ReadTimeout:           s.cfg.Limits.ReadTimeout, // headers and body: slow senders are cut
		IdleTimeout:           s.cfg.Limits.IdleTimeout,
		// A caller that stops reading an answer is cut (a relay replaces
		// this bound with its own, per write: timeouts.stream_idle).
		WriteTimeout: s.cfg.Proxy.WriteTimeout,
		Concurrency:  s.cfg.Limits.MaxConnections,
		ErrorHandler: s.errorHandler,
	})
	app.Use(func(c *fiber.Ctx) error { // every response carries a request id
		setRequestID(c, s.formatOf(c))
		return c.Next()
	})
	for _, ep := range endpoints {
		app.Post(ep.path, s.handle(ep))
	}
	app.Get("/v1/models", s.listModels)
	app.Get("/v1/models/*", s.getModel) // the rest of the path: names may hold a slash
	app.Get("/metrics", s.metrics.handler())
	app.Get("/healthz", servicehttp.Healthz)
	app.Get("/readyz", servicehttp.Readiness{Base: s.readiness, Version: s.RoutingVersion, Routing: s.versions.tracker}.Handler())
	// Any other path of a named provider: passed through (registered after
	// every route of the gateway's own, which fiber tries first).
	app.All(epPassthrough.path, s.handle(epPassthrough))
	app.Use(func(c *fiber.Ctx) error {
		return sendError(c, s.formatOf(c), gwerror.NotFound,
			fmt.Sprintf("no route for %s %s", c.Method(), c.Path()))
	})
	return app
}

// errorHandler renders errors fiber raises before a handler runs (an
// oversize body, a malformed request) in the endpoint's format.
func (s *Service) errorHandler(c *fiber.Ctx, err error) error {
	status := servicehttp.ErrorStatus(err)
	f := s.formatOf(c)
	if len(c.Response().Header.Peek(headerRequestID)) == 0 {
		setRequestID(c, f)
	}
	switch status {
	case fiber.StatusRequestEntityTooLarge:
		return sendError(c, f, gwerror.RequestTooLarge,
			fmt.Sprintf("the request body is larger than the limit of %d bytes", s.cfg.Limits.MaxBodyBytes))
	case fiber.StatusMethodNotAllowed, fiber.StatusNotFound:
		return sendErrorStatus(c, f, status, gwerror.NotFound, fmt.Sprintf("no route for %s %s", c.Method(), c.Path()))
	}
	if status >= 500 {
		s.log.Error("request error", "err", err, "path", c.Path())
		return sendErrorStatus(c, f, status, gwerror.GatewayError, "internal gateway error")
	}
	return sendErrorStatus(c, f, status, gwerror.InvalidRequest, err.Error())
}

// formatOf is the wire format a caller speaks, for answers made before
// (or without) an endpoint's handler: Anthropic's when it sends
// anthropic-version, on /v1/messages and /v1/messages/count_tokens, and
// on a passthrough path of an Anthropic-format provider; OpenAI's
// otherwise. Paths compare as fiber routes them: in any case, with or
// without a trailing slash (a provider's name as the passthrough matches
// it: exactly).
func (s *Service) formatOf(c *fiber.Ctx) provider.Format {
	if c.Get("Anthropic-Version") != "" {
		return provider.FormatAnthropic
	}
	path := c.Path()
	if trimmed := strings.TrimSuffix(path, "/"); strings.EqualFold(trimmed, epMessages.path) || strings.EqualFold(trimmed, epCountTokens.path) {
		return provider.FormatAnthropic
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if p := s.rt.Load().table.Provider(name); p != nil && p.Adapter.Format() == provider.FormatAnthropic {
		return provider.FormatAnthropic
	}
	return provider.FormatOpenAI
}

// Handler is the proxy's fiber app, for tests and embedding.
func (s *Service) Handler() *fiber.App { return s.app }

// Run listens on proxy.listen and serves until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Proxy.Listen)
	if err != nil {
		return fmt.Errorf("proxy: listen on %s: %w", s.cfg.Proxy.Listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, then shuts down gracefully: /readyz
// answers 503 while it keeps serving for proxy.shutdown_delay, then it
// stops accepting, lets requests in flight finish (up to
// proxy.shutdown_timeout), closes the upstream connection pools (which
// cuts the streams still relayed) and waits a little for those requests to
// be recorded before its hold engine, metering and bundles stop. A
// shutdown that had to cut requests is logged, not returned as an error.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	s.log.Info("proxy listening", "addr", ln.Addr().String(), "providers", len(s.rt.Load().table.Providers))
	var wg sync.WaitGroup
	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	// The limiter stops first: its last report may claim a budget's
	// exhaustion, whose event the hold engine's emitter still publishes.
	limitsCtx, stopLimits := context.WithCancel(engineCtx)
	limitsDone := make(chan struct{})
	wg.Go(func() { s.callers.run(engineCtx) })
	wg.Go(func() { s.bundles.run(engineCtx) })
	wg.Go(func() {
		defer close(limitsDone)
		s.limits.run(limitsCtx, s.member, s.log)
	})
	wg.Go(func() {
		if err := s.member.Run(engineCtx); err != nil {
			s.log.Error("hold engine stopped", "err", err)
		}
	})
	if s.member.Conn() != nil { // the fleet's buckets: health and rotated secrets
		wg.Go(func() { s.runHealth(engineCtx) })
		wg.Go(func() { s.runCredentials(engineCtx) })
		wg.Go(func() { s.followRouting(engineCtx) })
		if s.passive.on {
			wg.Go(func() { s.runPassive(engineCtx) })
		}
		wg.Go(func() { s.runLatency(engineCtx) })
		wg.Go(func() { s.runHeadroom(engineCtx) })
		wg.Go(func() { s.runExplain(engineCtx) })
		if s.meter.pub != nil {
			wg.Go(func() { s.meter.pub.Run(engineCtx, s.member.Bound()) })
		}
		wg.Go(func() { s.runCache(engineCtx) })
	}
	s.awaitFleet(ctx)
	errc := make(chan error, 1)
	go func() { errc <- s.app.Listener(ln) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		s.life.draining.Store(true)
		if d := s.cfg.Proxy.ShutdownDelay; d > 0 {
			s.log.Info("proxy draining: /readyz answers 503, still serving", "for", d)
			time.Sleep(d)
		}
		if serr := s.app.ShutdownWithTimeout(s.cfg.Proxy.ShutdownTimeout); serr != nil {
			s.log.Warn("requests still in flight at the end of proxy.shutdown_timeout: cut",
				"requests", s.life.inFlight.Load(), "shutdown_timeout", s.cfg.Proxy.ShutdownTimeout)
		}
		// If the context ended before fiber started serving, Shutdown had
		// nothing to stop: closing the listener ends Listener for sure.
		_ = ln.Close()
		<-errc
	}
	s.close() // cuts the upstream reads of streams still relayed
	// The requests cut end now: their usage, holds, spend and bundles are
	// queued before the engine stops (a caller that reads nothing is cut
	// by its write deadline, timeouts.stream_idle).
	if !s.waitIdle(cutGrace) {
		s.log.Warn("requests still running after the shutdown's cut: their records may be lost", "requests", s.life.inFlight.Load())
	}
	stopLimits()
	<-limitsDone
	stopEngine() // after the last request: its holds are queued before this
	wg.Wait()    // the bundle worker has handed the last bundles to the tracer
	tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if terr := s.tracer.Shutdown(tctx); terr != nil {
		s.log.Warn("traces not all exported at shutdown", "err", terr)
	}
	return err
}

// cutGrace bounds the wait, at shutdown, for requests cut by the closing of
// the upstream pools to end.
const cutGrace = 5 * time.Second

// waitIdle waits up to d for no request to be in flight.
func (s *Service) waitIdle(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for s.life.inFlight.Load() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// providerType is a provider's type by name (gen_ai.system of traces), ""
// when the routing in use has no such provider.
func (s *Service) providerType(name string) string {
	for _, p := range s.rt.Load().table.Providers {
		if p.Name == name {
			return p.Adapter.Type()
		}
	}
	return ""
}

// readiness is the proxy's part of /readyz (servicehttp.Readiness adds
// routing_version and routing_error: a version it could not apply leaves
// it ready, routing with the version before): 503 while shutting down (a
// load balancer stops sending new requests while those in flight
// finish), 503 once the NATS connection is closed for good (nats.go gives
// up on a connection the server refused a protocol line of, or one out of
// reconnect attempts: the proxy would serve from a hold table no longer
// fed by, nor feeding, the fleet's), 200 otherwise, including while NATS
// reconnects (holds apply locally meanwhile). Before the fleet's holds
// have loaded the proxy does not accept connections at all (awaitFleet),
// so it does not wait for the routing configuration here.
func (s *Service) readiness() (int, map[string]any) {
	if s.life.draining.Load() {
		return fiber.StatusServiceUnavailable, fiber.Map{"status": "draining"}
	}
	if nc := s.member.Conn(); nc != nil && nc.IsClosed() {
		body := fiber.Map{"status": "nats_closed"}
		if err := nc.LastError(); err != nil {
			body["error"] = err.Error()
		}
		return fiber.StatusServiceUnavailable, body
	}
	return fiber.StatusOK, fiber.Map{"status": "ready", "providers": len(s.rt.Load().table.Providers)}
}

// awaitFleet waits, before the proxy accepts connections, until its hold
// table has the fleet's holds and the rotated secrets have loaded (up to
// proxy.startup_wait): a new proxy never sends a request to a key the
// fleet holds because its table was still empty. Without NATS there is
// nothing to wait for. Connections that arrive meanwhile wait in the
// listener's backlog.
func (s *Service) awaitFleet(ctx context.Context) {
	if s.member.Conn() == nil {
		return
	}
	if s.cfg.Proxy.StartupWait <= 0 {
		s.log.Warn("proxy.startup_wait is 0: serving before the fleet's holds and secrets have loaded")
		return
	}
	start := time.Now()
	t := time.NewTimer(s.cfg.Proxy.StartupWait)
	defer t.Stop()
	for _, ch := range []<-chan struct{}{s.member.Synced(), s.secrets.loaded, s.versions.tracker.Loaded()} {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-t.C:
			s.log.Warn("the fleet's holds, rotated secrets or routing configuration did not load in time: serving from the configuration until they do",
				"waited", s.cfg.Proxy.StartupWait)
			return
		}
	}
	s.log.Info("fleet holds, secrets and routing configuration loaded", "in", time.Since(start), "routing_version", s.RoutingVersion())
}

func (s *Service) close() {
	s.life.closing.Store(true)
	s.stop()
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.life.retiring.Wait()
	s.rt.Load().release()
}
