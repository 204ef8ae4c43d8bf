// Command swctl is Switchyard's operator CLI.
//
//	swctl classify < errors.jsonl   what would the gateway do with these errors?
//	swctl holds ls                  holds in the fleet (admin API)
//	swctl holds release ID          release a hold now
//	swctl providers status          providers, circuit states, keys and their holds
//	swctl events tail               follow hold/release/trip/probe/credential events
//	swctl usage                     requests, tokens, cost and latency by client, model, ...
//	swctl clients [CLIENT]          client keys: consumption against their plans' limits
//	swctl budget reset CLIENT       reset a client key's budgets, fleet-wide
//	swctl config show|history|diff  the fleet's routing configuration, its versions and their changes
//	swctl config preview|activate|import|rollback FILE|N   validate and activate routing documents
//	swctl config step CHAIN I on|off, config key PROVIDER ID --weight W --enabled false   small edits
//	swctl debug REQUEST_ID [--json]  one request's debug bundle: its route, every attempt, the outcome
//	swctl debug list [--outcome failed] [--provider P] [--since 1h] [--limit N]   the newest debug bundles
//	swctl route explain MODEL [--client ID] [--body FILE|-] [--header K=V]   how a proxy would route a request
//	swctl version                   the build's version and commit (also swctl -version)
//
// swctl VERB -h prints that verb's usage.
//
// The admin verbs talk to the admin service: -admin URL (env
// SWCTL_ADMIN_URL, default http://127.0.0.1:8081) and -token (env
// SWCTL_ADMIN_TOKEN); -json prints the API's JSON.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"switchyard.dev/shared/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, errSilent) {
			fmt.Fprintln(os.Stderr, "swctl:", err)
		}
		os.Exit(1)
	}
}

// errSilent makes swctl exit 1 without a message: the command already
// reported what went wrong on its output.
var errSilent = errors.New("failed")

// command is one swctl verb.
type command struct {
	name  string
	usage string
	run   func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{name: "classify", usage: "read JSON Lines failures on stdin, print one classification per line", run: runClassify},
		{name: "holds", usage: "ls [-provider P -key K -model M -class C -state S] | release ID", run: runHolds},
		{name: "providers", usage: "status: providers, circuit states, keys and holds", run: runProviders},
		{name: "events", usage: "tail [-kind K] [-provider P] [-since 10m] [-n N]: follow fleet events", run: runEvents},
		{name: "usage", usage: "[--from -24h] [--to T] [--by client,model] [--interval hour] [--client C] ...: usage sums", run: runUsage},
		{name: "clients", usage: "[CLIENT]: client keys, their plans and consumption against the limits", run: runClients},
		{name: "budget", usage: "reset CLIENT: the client key's day, week and month spend from 0 again (operator)", run: runBudget},
		{name: "cache", usage: "ls|get KEY|purge: the response cache's entries, by route, client key or key prefix (purge: operator)", run: runCache},
		{name: "config", usage: "show|history|diff|preview|activate|import|rollback|step|key: the fleet's routing configuration", run: runConfig},
		{name: "debug", usage: "REQUEST_ID | list [--outcome failed] [--provider P] [--since 1h] [--limit N]: a request's debug bundle as a timeline, or the newest bundles", run: runDebug},
		{name: "route", usage: "explain MODEL [--client ID] [--body FILE|-] [--header K=V] [--endpoint E]: how a proxy would route a request now", run: runRoute},
		{name: "version", usage: "the build's version and commit (also -version)", run: runVersion},
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		usage(stderr)
		if len(args) == 0 {
			return errors.New("no command given")
		}
		return nil
	}
	if args[0] == "-version" || args[0] == "--version" {
		return runVersion(ctx, args[1:], stdin, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			// VERB -h (and a sub-verb's -h): its usage, exit 0
			if err := c.run(ctx, args[1:], stdin, stdout, stderr); !errors.Is(err, flag.ErrHelp) {
				return err
			}
			return nil
		}
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// verbUsage prints a verb's use when its sub-verb is missing or unknown,
// and returns flag.ErrHelp when help was asked for (exit 0), else err.
func verbUsage(args []string, stderr io.Writer, use string, err error) error {
	fmt.Fprintln(stderr, use)
	if len(args) > 0 && isHelp(args[0]) {
		return flag.ErrHelp
	}
	return err
}

func runVersion(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		return verbUsage(args, stderr, "usage: swctl version", fmt.Errorf("version: unexpected argument %q", args[0]))
	}
	_, err := fmt.Fprintln(stdout, "swctl", buildinfo.Version())
	return err
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: swctl <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.usage)
	}
}
