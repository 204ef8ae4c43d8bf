// Command switchyard is the all-in-one launcher: it runs the proxy, prober
// and admin services in one process, around an embedded NATS server when
// nats.url is empty, and (with -fakes) two bundled fake providers.
//
//	switchyard [-config configs/gateway.yaml] [-fakes] [-check] [-version]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	slaunch "switchyard.dev/shared/launch"
)

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
		fmt.Fprintln(fs.Output(), "usage: switchyard [-config configs/gateway.yaml] [-fakes] [-check] [-version]")
		fmt.Fprintln(fs.Output(), "Runs the proxy, prober and admin services in one process (embedded NATS when nats.url is empty).")
		fs.PrintDefaults()
	}
	var fl slaunch.Flags
	fl.Register(fs, environ)
	fakes := fs.Bool("fakes", false, "start the bundled fake providers fake-openai on "+fakeOpenAIAddr+" and fake-anthropic on "+fakeAnthropicAddr)
	if done, err := fl.Parse(ctx, fs, args, environ); done {
		return err
	}
	if fl.Check {
		_, _, err := fl.Load(environ, stdout, checkStart)
		return err
	}
	opts := options{configPath: fl.Config, hangup: hangup}
	if *fakes {
		opts.fakes = []fakeSpec{
			{name: "fake-openai", addr: fakeOpenAIAddr},
			{name: "fake-anthropic", addr: fakeAnthropicAddr},
		}
	}
	return launch(ctx, opts, environ, stdout)
}
