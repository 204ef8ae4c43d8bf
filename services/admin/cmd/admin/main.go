// Command admin runs Switchyard's admin service on its own, against the
// NATS server named by nats.url.
package main

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/admin"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/launch"
)

var spec = launch.Spec{
	Name:   "admin",
	Listen: func(c *config.Config) string { return c.Admin.Listen },
	Build: func(cfg *config.Config, log *slog.Logger, nc *nats.Conn, environ []string) (launch.Service, error) {
		return admin.New(cfg, admin.Deps{Log: log, NATS: nc, Environ: environ})
	},
}

func main() { launch.Main(spec) }
