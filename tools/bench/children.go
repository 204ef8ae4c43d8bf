package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/logging"
	"switchyard.dev/tools/fakeprovider"
)

// This file holds the helper processes the bench starts by re-executing
// itself: the floor (always), and the proxy and the upstream when they are
// not built from their own main packages (-proxy=harness, -upstream=harness).

// serveFloor runs the floor: the least a fiber gateway does per request
// (bare: the same handler on a bare fasthttp.Server, no fiber).
// It forwards the body to upstream (base URL with /v1) with a pooled
// fasthttp client, sets one upstream key, and copies status, content type
// and body back; an event stream is relayed read by read with a flush
// after each. No routing, no parsing, no retries.
func serveFloor(ctx context.Context, listen, upstream, key, cpuprofile string, bare bool) error {
	h := floorHandler(upstream, key)
	stop, err := startCPUProfile(cpuprofile)
	if err != nil {
		return err
	}
	if bare {
		return errors.Join(serveFastHTTP(ctx, &fasthttp.Server{Handler: h, ReadBufferSize: 16 << 10}, listen), stop())
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ReadBufferSize: 16 << 10})
	app.Post("/v1/*", func(c *fiber.Ctx) error {
		h(c.Context())
		return nil
	})
	return errors.Join(serveApp(ctx, app, listen), stop())
}

// floorHandler is the floor's request handler.
func floorHandler(upstream, key string) fasthttp.RequestHandler {
	client := &fasthttp.Client{
		StreamResponseBody:       true,
		MaxConnsPerHost:          4096,
		MaxIdleConnDuration:      90 * time.Second,
		ReadTimeout:              60 * time.Second,
		WriteTimeout:             60 * time.Second,
		NoDefaultUserAgentHeader: true,
	}
	auth := "Bearer " + key
	bufs := sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}
	return func(c *fasthttp.RequestCtx) {
		path := c.Path()
		if !c.IsPost() || !bytes.HasPrefix(path, []byte("/v1/")) {
			c.Error("floor: not found", fasthttp.StatusNotFound)
			return
		}
		req := fasthttp.AcquireRequest()
		req.SetRequestURI(upstream + string(path[len("/v1"):]))
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentTypeBytes(c.Request.Header.ContentType())
		req.Header.Set(fasthttp.HeaderAuthorization, auth)
		req.SetBody(c.PostBody())
		resp := fasthttp.AcquireResponse()
		err := client.Do(req, resp)
		fasthttp.ReleaseRequest(req)
		if err != nil {
			fasthttp.ReleaseResponse(resp)
			c.Error("floor: upstream: "+err.Error(), fasthttp.StatusBadGateway)
			return
		}
		c.SetStatusCode(resp.StatusCode())
		ct := resp.Header.ContentType()
		c.Response.Header.SetContentTypeBytes(ct)
		if !bytes.HasPrefix(ct, []byte("text/event-stream")) {
			c.Response.SetBody(resp.Body())
			fasthttp.ReleaseResponse(resp)
			return
		}
		c.SetBodyStreamWriter(func(w *bufio.Writer) {
			bp := bufs.Get().(*[]byte)
			defer func() {
				bufs.Put(bp)
				_ = resp.CloseBodyStream()
				fasthttp.ReleaseResponse(resp)
			}()
			body := resp.BodyStream()
			for {
				n, err := body.Read(*bp)
				if n > 0 {
					if _, werr := w.Write((*bp)[:n]); werr != nil {
						return
					}
					if w.Flush() != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// serveFastHTTP serves srv on listen until ctx ends.
func serveFastHTTP(ctx context.Context, srv *fasthttp.Server, listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("floor: listen on %s: %w", listen, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.ShutdownWithContext(sctx)
}

// serveFloorNetHTTP is the floor with net/http's client (the one
// Switchyard's proxy uses) instead of fasthttp's: the difference between
// the two floors is what the client alone costs.
func serveFloorNetHTTP(ctx context.Context, listen, upstream, key string) error {
	tr := &http.Transport{
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		ReadBufferSize:      32 << 10,
		WriteBufferSize:     32 << 10,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	auth := "Bearer " + key
	bufs := sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ReadBufferSize: 16 << 10})
	app.Post("/v1/*", func(c *fiber.Ctx) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, upstream+c.Path()[len("/v1"):], bytes.NewReader(c.Body()))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", string(c.Request().Header.ContentType()))
		req.Header.Set("Authorization", auth)
		resp, err := client.Do(req)
		if err != nil {
			return c.Status(fiber.StatusBadGateway).SendString("floor: upstream: " + err.Error())
		}
		c.Status(resp.StatusCode)
		ct := resp.Header.Get("Content-Type")
		c.Response().Header.SetContentType(ct)
		if !strings.HasPrefix(ct, "text/event-stream") {
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return c.Status(fiber.StatusBadGateway).SendString("floor: upstream: " + err.Error())
			}
			c.Response().SetBodyRaw(b)
			return nil
		}
		c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
			bp := bufs.Get().(*[]byte)
			defer func() {
				bufs.Put(bp)
				resp.Body.Close()
			}()
			for {
				n, err := resp.Body.Read(*bp)
				if n > 0 {
					if _, werr := w.Write((*bp)[:n]); werr != nil {
						return
					}
					if w.Flush() != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		return nil
	})
	return serveApp(ctx, app, listen)
}

// serveApp serves app on listen until ctx ends.
func serveApp(ctx context.Context, app *fiber.App, listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("floor: listen on %s: %w", listen, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- app.Listener(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	err = app.ShutdownWithTimeout(5 * time.Second)
	<-errc
	return err
}

// serveProxyHarness runs Switchyard's proxy package the way its main does
// (config.Load, logging.New, proxy.New, Serve), without NATS, optionally
// under a CPU profile written to cpuprofile when ctx ends.
func serveProxyHarness(ctx context.Context, cfgPath, cpuprofile string) error {
	cfg, err := config.Load(cfgPath, os.Environ())
	if err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, cfg.Log.Level, cfg.Log.Format)
	if err != nil {
		return fmt.Errorf("proxy harness: build logger: %w", err)
	}
	svc, err := proxy.New(cfg, proxy.Deps{Log: log, Environ: os.Environ()})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Proxy.Listen)
	if err != nil {
		return fmt.Errorf("proxy harness: listen on %s: %w", cfg.Proxy.Listen, err)
	}
	stop, err := startCPUProfile(cpuprofile)
	if err != nil {
		ln.Close()
		return err
	}
	err = svc.Serve(ctx, ln)
	return errors.Join(err, stop())
}

// startCPUProfile profiles the process into path ("" does nothing); the
// returned function stops and writes the profile.
func startCPUProfile(path string) (func() error, error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("start cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// serveUpstreamHarness runs the fake provider in this process, as
// tools/cmd/fakeprovider would with the same options.
func serveUpstreamHarness(ctx context.Context, opts fakeprovider.Options) error {
	opts.Log = slog.New(slog.DiscardHandler)
	s, err := fakeprovider.Start(opts)
	if err != nil {
		return err
	}
	<-ctx.Done()
	s.Close()
	return nil
}
