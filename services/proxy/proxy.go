// Package proxy is Switchyard's data plane: an OpenAI- and
// Anthropic-compatible HTTP API that forwards each request to a provider
// target, failing over across keys and chain steps.
package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/config"
)

// Deps are the proxy's collaborators.
type Deps struct {
	Log  *slog.Logger
	NATS *nats.Conn // may be nil: the proxy never needs NATS to serve
}

// Service is one proxy instance.
type Service struct {
	cfg *config.Config
	log *slog.Logger
}

// New builds a proxy from a validated configuration.
func New(cfg *config.Config, deps Deps) (*Service, error) {
	if cfg == nil {
		return nil, errors.New("proxy: nil config")
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, log: log}, nil
}

// Run listens on proxy.listen and serves until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Proxy.Listen)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, then shuts down gracefully.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	<-ctx.Done()
	return ln.Close()
}
