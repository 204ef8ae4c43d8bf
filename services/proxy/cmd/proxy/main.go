// Command proxy runs Switchyard's proxy service on its own, against the
// NATS server named by nats.url (the proxy serves without NATS too, from
// its local hold table).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/proxy"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/logging"
)

const defaultConfig = "configs/gateway.yaml"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args, environ []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stdout)
	path := fs.String("config", configDefault(environ), "configuration file (env "+config.EnvConfigPath+")")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}

	cfg, err := config.Load(*path, environ)
	if err != nil {
		return err
	}
	log, err := logging.New(stdout, cfg.Log.Level, cfg.Log.Format)
	if err != nil {
		return err
	}
	log = log.With("service", "proxy")
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}

	ncfg := cfg.NATS
	if ncfg.URL == "" {
		ncfg.URL = nats.DefaultURL
		log.Warn("nats.url is not set; using " + nats.DefaultURL)
	}
	if ncfg.Name == "" {
		ncfg.Name = "switchyard-proxy"
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

	svc, err := proxy.New(cfg, proxy.Deps{Log: log, NATS: nc})
	if err != nil {
		return err
	}
	log.Info("proxy starting", "url", "http://"+cfg.Proxy.Listen, "nats", bus.Redact(ncfg.URL))
	return svc.Run(ctx)
}

// configDefault is $SWITCHYARD_CONFIG when set, else configs/gateway.yaml.
func configDefault(environ []string) string {
	prefix := config.EnvConfigPath + "="
	for i := len(environ) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(environ[i], prefix); ok && v != "" {
			return v
		}
	}
	return defaultConfig
}
