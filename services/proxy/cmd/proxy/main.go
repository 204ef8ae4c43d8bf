// Command proxy runs Switchyard's proxy service on its own, against the
// NATS server named by nats.url (the proxy serves without NATS too, from
// its local hold table).
package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/proxy"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/launch"
)

func main() {
	launch.Main(launch.Spec{
		Name:   "proxy",
		Listen: func(c *config.Config) string { return c.Proxy.Listen },
		Check:  proxy.Check,
		Build: func(cfg *config.Config, log *slog.Logger, nc *nats.Conn, environ []string) (launch.Service, error) {
			return proxy.New(cfg, proxy.Deps{Log: log, NATS: nc, Environ: environ})
		},
		// SIGHUP re-reads the file: changed key secrets apply at once and
		// release the key's holds.
		Reload: func(ctx context.Context, svc launch.Service, cfg *config.Config) []string {
			return svc.(*proxy.Service).ReloadSecrets(ctx, cfg)
		},
	})
}
