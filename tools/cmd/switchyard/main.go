// Command switchyard is the all-in-one launcher: it runs the proxy, prober
// and admin services in one process, around an embedded NATS server when
// nats.url is empty, and (with -fakes) two bundled fake providers.
//
//	switchyard [-config configs/gateway.yaml] [-fakes]
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

	slaunch "switchyard.dev/shared/launch"

	"switchyard.dev/shared/config"
)

const defaultConfig = "configs/gateway.yaml"

// Addresses of the bundled fake providers started by -fakes; configs/demo.yaml
// points its providers at them.
const (
	fakeOpenAIAddr    = "127.0.0.1:9101"
	fakeAnthropicAddr = "127.0.0.1:9102"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, hup)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "switchyard:", err)
		os.Exit(1)
	}
}

// run parses the flags and launches everything; hangup (SIGHUP in main,
// nil in tests) asks for a reload of the key secrets.
func run(ctx context.Context, args, environ []string, stdout io.Writer, hangup <-chan os.Signal) error {
	fs := flag.NewFlagSet("switchyard", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: switchyard [-config configs/gateway.yaml] [-fakes]")
		fmt.Fprintln(fs.Output(), "Runs the proxy, prober and admin services in one process (embedded NATS when nats.url is empty).")
		fs.PrintDefaults()
	}
	path := fs.String("config", configDefault(environ), "configuration file (env "+config.EnvConfigPath+")")
	fakes := fs.Bool("fakes", false, "start the bundled fake providers fake-openai on "+fakeOpenAIAddr+" and fake-anthropic on "+fakeAnthropicAddr)
	health := fs.String("healthcheck", "", "check the service at this URL (its /healthz) and exit: 0 when it answers 200 (container health checks)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *health != "" {
		return slaunch.HealthCheck(ctx, slaunch.HealthURL(*health, environ))
	}
	opts := options{configPath: *path, hangup: hangup}
	if *fakes {
		opts.fakes = []fakeSpec{
			{name: "fake-openai", addr: fakeOpenAIAddr},
			{name: "fake-anthropic", addr: fakeAnthropicAddr},
		}
	}
	return launch(ctx, opts, environ, stdout)
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
