// Command fakeprovider runs a scriptable fake LLM provider: it speaks the
// OpenAI, Azure OpenAI, Anthropic and Gemini (OpenAI-compatible) wire
// formats and is scripted through a YAML config and its /_fake/ control
// endpoint. See tools/fakeprovider/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"switchyard.dev/shared/buildinfo"
	"switchyard.dev/shared/launch"

	"switchyard.dev/tools/fakeprovider"
)

// shutdownGrace bounds how long calls in flight may take to finish on stop.
const shutdownGrace = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := run(ctx, os.Args[1:], os.Stdout, log)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		log.Error("fakeprovider", "err", err)
		os.Exit(1)
	}
}

// run parses args, starts the fake provider, prints its URL to stdout and
// serves until ctx ends.
func run(ctx context.Context, args []string, stdout io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("fakeprovider", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9101", "listen address (overrides the config's addr)")
	config := fs.String("config", "", "YAML file with options and rules")
	name := fs.String("name", "", "label used in logs and ids (overrides the config)")
	latency := fs.Duration("latency", 0, "default first-byte latency (overrides the config)")
	chunkDelay := fs.Duration("chunk-delay", 0, "default delay between stream chunks (overrides the config)")
	chunks := fs.Int("chunks", 0, "default stream chunk count (overrides the config; 0 = 5)")
	keys := fs.String("keys", "", "comma-separated accepted keys (overrides the config; empty = any)")
	health := fs.String("healthcheck", "", "check a running fake at this URL (- for $HEALTHCHECK_URL) and exit: 0 when it answers 200 (container health checks)")
	version := fs.Bool("version", false, "print the build's version and commit and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *version {
		_, err := fmt.Fprintln(stdout, "fakeprovider", buildinfo.Version())
		return err
	}
	if *health != "" {
		return launch.HealthCheck(ctx, launch.HealthURL(*health, os.Environ()))
	}

	var opts fakeprovider.Options
	if *config != "" {
		var err error
		if opts, err = fakeprovider.LoadOptions(*config); err != nil {
			return err
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["listen"] || opts.Addr == "" {
		opts.Addr = *listen
	}
	if set["name"] {
		opts.Name = *name
	}
	if set["latency"] {
		opts.Latency = *latency
	}
	if set["chunk-delay"] {
		opts.ChunkDelay = *chunkDelay
	}
	if set["chunks"] {
		opts.Chunks = *chunks
	}
	if set["keys"] {
		opts.Keys = nil
		for k := range strings.SplitSeq(*keys, ",") {
			if k = strings.TrimSpace(k); k != "" {
				opts.Keys = append(opts.Keys, k)
			}
		}
	}
	opts.Log = log

	s, err := fakeprovider.Start(opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fakeprovider %s listening on %s\n", opts.Name, s.URL())

	<-ctx.Done()
	log.Info("stopping", "grace", shutdownGrace)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
