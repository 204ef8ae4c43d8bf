// Command prober runs Switchyard's prober service on its own, against the
// NATS server named by nats.url.
package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/prober"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/launch"
)

func main() {
	launch.Main(launch.Spec{
		Name:   "prober",
		Listen: func(c *config.Config) string { return c.Prober.Listen },
		Build: func(cfg *config.Config, log *slog.Logger, nc *nats.Conn, environ []string) (launch.Service, error) {
			return prober.New(cfg, prober.Deps{Log: log, NATS: nc, Environ: environ})
		},
		// SIGHUP re-reads the file: changed key secrets apply to checks and
		// probes at once; other changes are logged and need a restart.
		Reload: func(ctx context.Context, svc launch.Service, cfg *config.Config) []string {
			return svc.(*prober.Service).ReloadSecrets(ctx, cfg)
		},
	})
}
