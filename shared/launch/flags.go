package launch

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"switchyard.dev/shared/buildinfo"
	"switchyard.dev/shared/config"
)

// Flags are the flags every Switchyard server binary takes (the three
// services and the all-in-one launcher): -config, -check, -healthcheck,
// -version.
type Flags struct {
	Config  string // the configuration file
	Check   bool   // validate the configuration and exit
	Health  string // a URL to health-check and exit
	Version bool   // print the build's version and exit
}

// Register defines the flags on fs; -config defaults to
// $SWITCHYARD_CONFIG, else DefaultConfig.
func (f *Flags) Register(fs *flag.FlagSet, environ []string) {
	fs.StringVar(&f.Config, "config", configDefault(environ), "configuration file (env "+config.EnvConfigPath+")")
	fs.BoolVar(&f.Check, "check", false, "validate the configuration file (as at start: the same messages and exit status) and exit, starting nothing (for CI pipelines)")
	fs.StringVar(&f.Health, "healthcheck", "", "check the service at this URL (its /healthz; - for $HEALTHCHECK_URL) and exit: 0 when it answers 200 (for container health checks in images without a shell)")
	fs.BoolVar(&f.Version, "version", false, "print the build's version and commit and exit")
}

// Parse parses args into fs (whose flags include f's) and runs what ends
// the command before anything starts: -h, -version, -healthcheck. done
// says the command is over (with err as its result).
func (f *Flags) Parse(ctx context.Context, fs *flag.FlagSet, args, environ []string) (done bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return true, err
	}
	if fs.NArg() > 0 {
		return true, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	switch {
	case f.Version:
		_, err := fmt.Fprintln(fs.Output(), fs.Name(), buildinfo.Version())
		return true, err
	case f.Health != "":
		return true, HealthCheck(ctx, HealthURL(f.Health, environ))
	}
	return false, nil
}

// Load loads the configuration file (environment from environ) and runs
// check on it (nil: none), the checks the command makes at start before
// it starts anything. With -check it then reports the result and the
// command is over (done): the configuration's warnings on out, then
// "FILE: valid" or the error start would return.
func (f *Flags) Load(environ []string, out io.Writer, check func(*config.Config) error) (cfg *config.Config, done bool, err error) {
	cfg, err = config.Load(f.Config, environ)
	if err == nil && check != nil {
		err = check(cfg)
	}
	if !f.Check {
		return cfg, false, err
	}
	if cfg != nil {
		for _, w := range cfg.Warnings {
			fmt.Fprintln(out, "warning:", w)
		}
	}
	if err == nil {
		_, err = fmt.Fprintf(out, "%s: valid\n", f.Config)
	}
	return cfg, true, err
}
