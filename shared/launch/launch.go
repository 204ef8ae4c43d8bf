// Package launch is the common main of Switchyard's standalone services:
// flags, configuration, logger, NATS connection, signal handling, one exit.
// Each service's cmd/<service>/main.go is a call to Main.
package launch

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/logging"
)

// DefaultConfig is the configuration file used when neither -config nor
// SWITCHYARD_CONFIG names one.
const DefaultConfig = "configs/gateway.yaml"

// Service is what a service package builds: Run serves until ctx ends.
type Service interface {
	Run(ctx context.Context) error
}

// Spec describes one standalone service.
type Spec struct {
	// Name is the service's name (proxy, prober, admin): flag set, log
	// attribute, NATS connection name.
	Name string
	// Listen returns the address the service serves on, for the start line.
	Listen func(*config.Config) string
	// Build builds the service; environ is the process environment (the
	// service reads SWITCHYARD_* overlays and OTEL_* variables from it).
	Build func(cfg *config.Config, log *slog.Logger, nc *nats.Conn, environ []string) (Service, error)
	// Reload, when set, is called with the configuration re-read from its
	// file on SIGHUP (Hangup); it returns what it could not apply.
	Reload func(ctx context.Context, svc Service, cfg *config.Config) (warnings []string)
	// Hangup delivers reload requests; Main connects it to SIGHUP.
	Hangup <-chan os.Signal
	// Check, when set, is what the service checks of a loaded
	// configuration before it starts anything beyond config.Validate (its
	// routes build, say); -check runs it too.
	Check func(*config.Config) error
}

// Main runs the service until SIGINT or SIGTERM and exits once: 0 after a
// clean stop, 1 with the error on stderr otherwise.
func Main(spec Spec) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if spec.Reload != nil && spec.Hangup == nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		spec.Hangup = hup
	}
	err := Run(ctx, spec, os.Args[1:], os.Environ(), os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, spec.Name+":", err)
		os.Exit(1)
	}
}

// Run parses args (Flags), loads the configuration (environment from
// environ), builds the logger, connects to NATS (nats.url, default
// nats://127.0.0.1:4222; the service starts even while NATS is down), and
// runs the service until ctx ends. On the way out the NATS connection is
// drained after the service stopped.
func Run(ctx context.Context, spec Spec, args, environ []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(spec.Name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	var fl Flags
	fl.Register(fs, environ)
	if done, err := fl.Parse(ctx, fs, args, environ); done {
		return err
	}
	cfg, checked, err := fl.Load(environ, stdout, spec.Check)
	if checked || err != nil {
		return err
	}
	path := &fl.Config
	log, err := logging.New(stdout, cfg.Log.Level, cfg.Log.Format)
	if err != nil {
		return err
	}
	log = log.With("service", spec.Name)
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}

	ncfg := cfg.NATS
	if ncfg.URL == "" {
		ncfg.URL = nats.DefaultURL
		log.Warn("nats.url is not set; using " + nats.DefaultURL)
	}
	if ncfg.Name == "" {
		ncfg.Name = "switchyard-" + spec.Name
	}
	nc, err := bus.Connect(ctx, ncfg, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := bus.Drain(nc, 10*time.Second); err != nil {
			log.Warn("drain NATS", "err", err)
		}
	}()

	svc, err := spec.Build(cfg, log, nc, environ)
	if err != nil {
		return err
	}
	log.Info(spec.Name+" starting", "url", "http://"+spec.Listen(cfg), "nats", bus.Redact(ncfg.URL))
	if spec.Reload == nil || spec.Hangup == nil {
		return svc.Run(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	for {
		select {
		case err := <-done:
			return err
		case <-spec.Hangup:
			next, err := config.Load(*path, environ)
			if err != nil {
				log.Error("reload: configuration not applied", "err", err)
				continue
			}
			warnings := append(spec.Reload(ctx, svc, next), config.ReloadWarnings(cfg, next)...)
			for _, w := range warnings {
				log.Warn("reload: " + w)
			}
			log.Info("reload: configuration re-read", "file", *path, "not_applied", len(warnings))
		}
	}
}

// configDefault is $SWITCHYARD_CONFIG when set, else DefaultConfig.
func configDefault(environ []string) string {
	if v := getenv(environ, config.EnvConfigPath); v != "" {
		return v
	}
	return DefaultConfig
}

// getenv is the value of the variable key in environ ("KEY=value"
// entries; the last one wins, as with os.Getenv), "" when unset.
func getenv(environ []string, key string) string {
	prefix := key + "="
	for i := len(environ) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(environ[i], prefix); ok {
			return v
		}
	}
	return ""
}

// HealthCheck asks url (a service's /healthz) and reports an error unless
// it answers 200 within 3 s: the health check of a container image that
// has no shell or curl (`proxy -healthcheck http://127.0.0.1:8080/healthz`).
func HealthCheck(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %d", url, resp.StatusCode)
	}
	return nil
}

// HealthURL is a -healthcheck flag's URL: the flag's value, or for "-"
// $HEALTHCHECK_URL (the images set it to their service's port).
func HealthURL(flagValue string, environ []string) string {
	if flagValue != "-" {
		return flagValue
	}
	if v := getenv(environ, "HEALTHCHECK_URL"); v != "" {
		return v
	}
	return "http://127.0.0.1:8080/healthz"
}
