// Package admin is Switchyard's operator service: it will serve the
// operator HTTP API, dashboard, event stream and metrics. For now it serves
// its health endpoints only (see README.md).
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/config"
)

// ShutdownTimeout bounds the graceful shutdown of the HTTP server once the
// context of Run or Serve is done.
const ShutdownTimeout = 10 * time.Second

// Deps are the admin service's collaborators.
type Deps struct {
	Log  *slog.Logger
	NATS *nats.Conn // nil: the service runs but never reports ready
}

// Service is one admin instance.
type Service struct {
	cfg *config.Config
	log *slog.Logger
	nc  *nats.Conn
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
	return &Service{cfg: cfg, log: log, nc: deps.NATS}, nil
}

// Run listens on admin.listen and serves until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Admin.Listen)
	if err != nil {
		return fmt.Errorf("admin: listen on %s: %w", s.cfg.Admin.Listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, then shuts down gracefully (at most
// ShutdownTimeout). It closes ln.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	app := s.newApp()
	errc := make(chan error, 1)
	go func() { errc <- app.Listener(ln) }()
	s.log.Info("admin serving", "addr", ln.Addr().String())

	select {
	case err := <-errc:
		return fmt.Errorf("admin: serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	err := app.ShutdownWithTimeout(ShutdownTimeout)
	// A shutdown that lands before fasthttp has registered ln does not
	// close it; closing it here makes a late Serve return at once.
	_ = ln.Close()
	if serveErr := <-errc; serveErr != nil && err == nil {
		err = serveErr
	}
	if err != nil {
		return fmt.Errorf("admin: shut down HTTP server: %w", err)
	}
	s.log.Info("admin stopped")
	return nil
}

func (s *Service) newApp() *fiber.App {
	app := fiber.New(fiber.Config{
		AppName:               "switchyard-admin",
		DisableStartupMessage: true,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           2 * time.Minute,
		ErrorHandler:          errorHandler,
	})
	app.Get("/healthz", s.healthz)
	app.Get("/readyz", s.readyz)
	return app
}

// healthz answers 200 while the process runs.
func (s *Service) healthz(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"status": "ok"})
}

// readyz answers 200 while the NATS connection is up, 503 otherwise.
func (s *Service) readyz(c *fiber.Ctx) error {
	if s.nc == nil || !s.nc.IsConnected() {
		return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"status": "not ready", "nats": "disconnected"})
	}
	return c.JSON(fiber.Map{"status": "ok", "nats": "connected"})
}

// errorHandler answers errors (unknown routes included) with a JSON body.
func errorHandler(c *fiber.Ctx, err error) error {
	code := fiber.StatusInternalServerError
	var fe *fiber.Error
	if errors.As(err, &fe) {
		code = fe.Code
	}
	return c.Status(code).JSON(fiber.Map{"error": fiber.Map{"message": err.Error(), "code": code}})
}
