package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"switchyard.dev/services/admin"
	"switchyard.dev/services/prober"
	"switchyard.dev/services/proxy"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/logging"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/routingdoc"
	"switchyard.dev/tools/fakeprovider"
)

// defaultStoreDir is the embedded server's JetStream directory when
// nats.embedded.store_dir is empty.
const defaultStoreDir = "./data/nats"

// drainTimeout bounds the drain of each NATS connection at shutdown.
const drainTimeout = 5 * time.Second

// errNoProvider is returned when every configured provider was skipped.
var errNoProvider = errors.New("no provider is enabled: set OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY or OPENROUTER_API_KEY (see configs/gateway.yaml), or run `make demo`")

// options are the launcher's parsed flags.
type options struct {
	configPath string
	hangup     <-chan os.Signal // SIGHUP: reload key secrets
	fakes      []fakeSpec       // fake providers to start first
}

// fakeSpec is one bundled fake provider to start.
type fakeSpec struct {
	name string
	addr string
}

// launch runs everything until ctx is done, then stops it in reverse order:
// HTTP servers, NATS connections (drained), embedded NATS server, fakes.
func launch(ctx context.Context, opts options, environ []string, stdout io.Writer) error {
	cfg, err := config.Load(opts.configPath, environ)
	if err != nil {
		return err
	}
	log, err := logging.New(stdout, cfg.Log.Level, cfg.Log.Format)
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	if err := checkStart(cfg); err != nil {
		return err
	}

	for _, f := range opts.fakes {
		fp, err := startFake(f, cfg, log)
		if err != nil {
			return err
		}
		defer func() {
			if err := fp.Close(); err != nil {
				log.Warn("stop fake provider", "name", f.name, "err", err)
			}
		}()
	}

	ncfg := cfg.NATS
	var embedded *server.Server
	if ncfg.URL == "" {
		storeDir := cfg.NATS.Embedded.StoreDir
		if storeDir == "" {
			storeDir = defaultStoreDir
		}
		embedded, err = natsembed.Start(natsembed.Options{
			Listen:     cfg.NATS.Embedded.Listen,
			StoreDir:   storeDir,
			ServerName: "switchyard",
			Log:        log.With("component", "nats-server"),
		})
		if err != nil {
			return err
		}
		defer func() {
			natsembed.Stop(embedded)
			log.Info("embedded NATS server stopped")
		}()
		ncfg.URL = embedded.ClientURL()
		log.Info("embedded NATS server running", "url", ncfg.URL, "store_dir", storeDir,
			"try", "nats --server "+ncfg.URL+" kv ls")
	} else {
		log.Info("using NATS", "url", bus.Redact(ncfg.URL))
	}

	// One connection per service, as when they run on their own. Deferred
	// drains run after the HTTP servers have stopped.
	conns := map[string]*nats.Conn{}
	for _, name := range []string{"proxy", "prober", "admin"} {
		c := ncfg
		if c.Name == "" {
			c.Name = "switchyard-" + name
		} else {
			c.Name += "-" + name
		}
		nc, err := bus.Connect(ctx, c, log.With("service", name))
		if err != nil {
			return err
		}
		conns[name] = nc
		defer func() {
			if err := bus.Drain(nc, drainTimeout); err != nil {
				log.Warn("drain NATS connection", "service", name, "err", err)
			}
		}()
	}

	if embedded != nil {
		// Its own embedded server: this process is the whole fleet, and
		// its file is the routing configuration (an edit since the last
		// start is activated, as a new version).
		if err := syncRouting(ctx, conns["admin"], cfg, environ, log); err != nil {
			log.Warn("routing configuration not synced with the file", "err", err)
		}
	}

	px, err := proxy.New(cfg, proxy.Deps{Log: log.With("service", "proxy"), NATS: conns["proxy"], Environ: environ})
	if err != nil {
		return err
	}
	pr, err := prober.New(cfg, prober.Deps{Log: log.With("service", "prober"), NATS: conns["prober"], Environ: environ})
	if err != nil {
		return err
	}
	ad, err := admin.New(cfg, admin.Deps{Log: log.With("service", "admin"), NATS: conns["admin"], Environ: environ})
	if err != nil {
		return err
	}

	// Listen before serving, so that a busy port fails the start at once
	// and the URLs logged are the real ones.
	type service struct {
		name   string
		listen string
		serve  func(context.Context, net.Listener) error
		ln     net.Listener
	}
	services := []*service{
		{name: "proxy", listen: cfg.Proxy.Listen, serve: px.Serve},
		{name: "prober", listen: cfg.Prober.Listen, serve: pr.Serve},
		{name: "admin", listen: cfg.Admin.Listen, serve: ad.Serve},
	}
	for _, s := range services {
		ln, err := net.Listen("tcp", s.listen)
		if err != nil {
			for _, o := range services {
				if o.ln != nil {
					_ = o.ln.Close()
				}
			}
			return fmt.Errorf("%s: listen on %s (%s.listen): %w", s.name, s.listen, s.name, err)
		}
		s.ln = ln
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down")
		return nil
	})
	if opts.hangup != nil {
		g.Go(func() error {
			for {
				select {
				case <-gctx.Done():
					return nil
				case <-opts.hangup:
					reloadSecrets(gctx, opts, environ, cfg, px, pr, log)
				}
			}
		})
	}
	for _, s := range services {
		g.Go(func() error {
			if err := s.serve(gctx, s.ln); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			return nil
		})
	}
	urls := make([]any, 0, 2*len(services)+2)
	for _, s := range services {
		urls = append(urls, s.name, "http://"+s.ln.Addr().String())
	}
	urls = append(urls, "nats", bus.Redact(ncfg.URL))
	log.Info("switchyard is running; Ctrl-C stops it", urls...)

	if err := g.Wait(); err != nil {
		log.Error("stopping after an error", "err", err)
		return err
	}
	return nil
}

// reloadSecrets re-reads the configuration file (SIGHUP) and applies its
// key secrets to the proxy and the prober (and the client keys to the proxy): a changed
// secret is used at once and the key's holds are released. Other changes need a restart;
// they are logged.
func reloadSecrets(ctx context.Context, opts options, environ []string, cfg *config.Config, px *proxy.Service, pr *prober.Service, log *slog.Logger) {
	next, err := config.Load(opts.configPath, environ)
	if err != nil {
		log.Error("reload: configuration not applied", "err", err)
		return
	}
	warnings := px.ReloadSecrets(ctx, next)
	for _, w := range pr.ReloadSecrets(ctx, next) {
		log.Warn("reload (prober): " + w)
	}
	warnings = append(warnings, config.ReloadWarnings(cfg, next)...)
	for _, w := range warnings {
		log.Warn("reload: " + w)
	}
	log.Info("reload: configuration re-read", "file", opts.configPath, "not_applied", len(warnings))
}

// checkStart is what the launcher checks of a loaded configuration before
// it starts anything (and all -check does beyond loading it): a provider
// to serve, routes that build.
func checkStart(cfg *config.Config) error {
	if len(cfg.Providers) == 0 {
		if len(cfg.Skipped) > 0 {
			return errNoProvider // the warnings name each skipped provider
		}
		return fmt.Errorf("no provider is configured in %s: add one under providers (see configs/gateway.yaml), or run `make demo`", cfg.File)
	}
	return proxy.Check(cfg)
}

// startFake starts one bundled fake provider, listing the models the
// configured provider of the same name declares.
func startFake(f fakeSpec, cfg *config.Config, log *slog.Logger) (*fakeprovider.Server, error) {
	opts := fakeprovider.Options{
		Name: f.name,
		Addr: f.addr,
		Log:  log,
	}
	for _, p := range cfg.Providers {
		if p.Name != f.name {
			continue
		}
		for _, m := range p.Models {
			name := m.Upstream
			if name == "" {
				name = m.Name
			}
			opts.Models = append(opts.Models, name)
		}
	}
	return fakeprovider.Start(opts) // logs "fake provider listening" with its URL
}

// syncRouting activates the routing part of cfg's file as a new version of
// the fleet's routing configuration when it differs from the active one
// (the all-in-one launcher with its own embedded NATS server: the file is
// the fleet's). With no version active the services import it themselves.
func syncRouting(ctx context.Context, nc *nats.Conn, cfg *config.Config, environ []string, log *slog.Logger) error {
	if cfg.File == "" {
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := bus.WaitForJetStream(sctx, js); err != nil {
		return err
	}
	res, err := bus.Setup(sctx, js, bus.SetupOptionsFrom(cfg))
	if err != nil {
		return err
	}
	store := routingdoc.New(nc, res.Config, log.With("component", "routing"))
	active, err := store.Active(sctx)
	if errors.Is(err, routingdoc.ErrNoActive) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur, err := config.LoadOverlay(cfg, environ, []byte(active.Document), "the active version"); err == nil && config.SameRouting(cur, cfg) {
		return nil
	}
	doc, err := config.ExtractDocument(cfg.File)
	if err != nil {
		return err
	}
	// The active version differs from the file: an operator's edit since
	// (swctl, the dashboard) unless the file itself changed since it was
	// last taken (imported, or activated here).
	if last, err := lastFromFile(sctx, store); err != nil {
		return err
	} else if last != nil && last.SHA256 == routingdoc.Sum(doc) {
		log.Info("routing configuration kept: the file did not change since its version was taken; the active version is an edit since",
			"version", active.Version, "file_version", last.Version, "file", cfg.File)
		return nil
	}
	v, err := store.Activate(sctx, doc, routingdoc.Meta{By: fileActivator, Comment: "the file " + cfg.File + " changed since the last start"}, active.ActiveRevision)
	if err != nil {
		return err
	}
	log.Info("routing configuration of the file activated", "version", v.Version, "replaces", active.Version, "file", cfg.File)
	return nil
}

// fileActivator is the author of the versions syncRouting activates.
const fileActivator = "switchyard"

// lastFromFile is the newest version taken from the file: imported at the
// first start, or activated by syncRouting since (nil when there is none).
func lastFromFile(ctx context.Context, store *routingdoc.Store) (*routingdoc.Version, error) {
	versions, err := store.List(ctx) // newest first
	if err != nil {
		return nil, err
	}
	for i, v := range versions {
		if v.Source == routingdoc.SourceImport || v.Source == routingdoc.SourceActivate && v.By == fileActivator {
			return &versions[i], nil
		}
	}
	return nil, nil
}
