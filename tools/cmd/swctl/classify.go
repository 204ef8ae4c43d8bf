package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
)

// maxLine bounds one input line (a provider error body is small).
const maxLine = 4 << 20

// runClassify reads failures as JSON Lines and prints one classification
// per line; see package failure for both forms. A line that cannot be read
// prints {"error":"line N: ..."}; the command then goes on and exits 1 at
// the end.
func runClassify(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("classify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: swctl classify [-now RFC3339] [-trip-from-env] < failures.jsonl")
		fs.PrintDefaults()
	}
	nowFlag := fs.String("now", "", "clock for HTTP-date and reset waits (RFC 3339; default: the wall clock)")
	tripEnv := fs.Bool("trip-from-env", false, "apply global trip_on rules from SWITCHYARD_TRIP_<NAME>_{MATCH,CLASS,TTL}")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("classify: unexpected argument %q", fs.Arg(0))
	}
	c := failure.Classifier{}
	if *nowFlag != "" {
		t, err := time.Parse(time.RFC3339, *nowFlag)
		if err != nil {
			return fmt.Errorf("classify: -now: %w", err)
		}
		c.Now = func() time.Time { return t }
	}
	if *tripEnv {
		rules, err := failure.RulesFromEnv(os.Environ())
		if err != nil {
			return fmt.Errorf("classify: %w", err)
		}
		c.Global = rules
	}

	out := bufio.NewWriter(stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)

	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	failed := 0
	for n := 1; sc.Scan(); n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		in, err := failure.DecodeWire(line)
		var v any
		if err != nil {
			failed++
			v = failure.LineError(n, err)
		} else {
			// The provider type doubles as the rule-set name: swctl has no
			// configured provider names.
			v = c.Classify(in, in.Provider).WireFor(in, config.Defaults().Retry.Policy())
		}
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("classify: write: %w", err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("classify: read stdin: %w", err)
	}
	if failed > 0 {
		if err := out.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "swctl classify: %d line(s) could not be read\n", failed)
		return errSilent
	}
	return out.Flush()
}
