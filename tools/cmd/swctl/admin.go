package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"switchyard.dev/services/admin/adminapi"
)

// Environment variables of the admin verbs.
const (
	envAdminURL   = "SWCTL_ADMIN_URL"
	envAdminToken = "SWCTL_ADMIN_TOKEN"
	defaultAdmin  = "http://127.0.0.1:8081"
)

// adminFlags are the flags every admin verb takes.
type adminFlags struct {
	url, token string
	json       bool
}

func (a *adminFlags) register(fs *flag.FlagSet) {
	u := os.Getenv(envAdminURL)
	if u == "" {
		u = defaultAdmin
	}
	fs.StringVar(&a.url, "admin", u, "admin service URL (env "+envAdminURL+")")
	fs.StringVar(&a.token, "token", "", "admin bearer token (default: env "+envAdminToken+")")
	fs.BoolVar(&a.json, "json", false, "print the API's JSON instead of a table")
}

func (a *adminFlags) bearer() string {
	if a.token != "" {
		return a.token
	}
	return os.Getenv(envAdminToken)
}

// adminFlagSet is the flag set of an admin verb, its admin flags
// registered. use is printed before the defaults on a usage error and
// for -h (empty: "usage: swctl <name> [flags]").
func adminFlagSet(name, use string, stderr io.Writer) (*flag.FlagSet, *adminFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if use == "" {
		use = "usage: swctl " + name + " [flags]"
	}
	fs.Usage = func() {
		fmt.Fprintln(stderr, use)
		fs.PrintDefaults()
	}
	a := &adminFlags{}
	a.register(fs)
	return fs, a
}

// queryFlag is a flag that sets a query parameter of the verb's request.
type queryFlag struct{ name, param, help string }

// queryFlags registers the flags on fs; each sets its parameter (its
// name when param is empty) in the values returned.
func queryFlags(fs *flag.FlagSet, flags []queryFlag) url.Values {
	q := url.Values{}
	for _, f := range flags {
		param := f.param
		if param == "" {
			param = f.name
		}
		fs.Func(f.name, f.help, func(v string) error { q.Set(param, v); return nil })
	}
	return q
}

// withQuery is path with q as its query, when q has any value.
func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// parseInterleaved parses flags that may come before or after the
// positional arguments ("holds release ID --json").
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// apiError is an error answer of the admin API with its status.
type apiError struct {
	Status int
	adminapi.ErrorDetail
}

func (e *apiError) Error() string {
	if len(e.Errors) > 0 {
		return fmt.Sprintf("admin API: %d %s: the document is not a valid routing configuration:\n  %s",
			e.Status, e.Code, strings.Join(e.Errors, "\n  "))
	}
	return fmt.Sprintf("admin API: %d %s: %s", e.Status, e.Code, e.Message)
}

// call sends one request to the admin API and returns the body of a 2xx
// answer.
func (a *adminFlags) call(ctx context.Context, method, path string, body io.Reader) ([]byte, error) {
	return a.callAs(ctx, method, path, "application/json", body)
}

// fetch sends one request and decodes its answer into v, or, with
// --json, prints the answer as it came (then v is left alone and done is
// true). what names the command in a decoding error.
func (a *adminFlags) fetch(ctx context.Context, stdout io.Writer, what, method, path string, v any) (done bool, err error) {
	b, err := a.call(ctx, method, path, nil)
	if err != nil {
		return false, err
	}
	if a.json {
		_, err := stdout.Write(b)
		return true, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%s: decode: %w", what, err)
	}
	return false, nil
}

// callAs is call with a body of content type ct.
func (a *adminFlags) callAs(ctx context.Context, method, path, ct string, body io.Reader) ([]byte, error) {
	resp, err := a.openAs(ctx, method, path, ct, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func (a *adminFlags) open(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	return a.openAs(ctx, method, path, "application/json", body)
}

func (a *adminFlags) openAs(ctx context.Context, method, path, ct string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(a.url, "/")+path, body)
	if err != nil {
		return nil, err
	}
	if t := a.bearer(); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	if body != nil {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var eb adminapi.ErrorAnswer
		ae := &apiError{Status: resp.StatusCode}
		if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
			ae.ErrorDetail = eb.Error
		} else {
			ae.Code, ae.Message = http.StatusText(resp.StatusCode), strings.TrimSpace(string(b))
		}
		return nil, ae
	}
	return resp, nil
}

func left(ms int64) string {
	if ms <= 0 {
		return "due"
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runHolds(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	const use = "usage: swctl holds ls [flags] | swctl holds release ID [flags]"
	if len(args) == 0 {
		return verbUsage(args, stderr, use, errors.New("holds: want ls or release"))
	}
	switch args[0] {
	case "ls", "list":
		return holdsList(ctx, args[1:], stdout, stderr)
	case "release", "rm":
		return holdsRelease(ctx, args[1:], stdout, stderr)
	}
	return verbUsage(args, stderr, use, fmt.Errorf("holds: unknown verb %q (want ls or release)", args[0]))
}

func holdsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := adminFlagSet("holds ls", "", stderr)
	var filters []queryFlag
	for _, f := range []string{"provider", "key", "model", "class", "state"} {
		filters = append(filters, queryFlag{name: f, help: "filter by " + f})
	}
	q := queryFlags(fs, filters)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("holds ls: unexpected argument %q", pos[0])
	}
	path := withQuery("/admin/holds", q)
	var res adminapi.HoldList
	if done, err := a.fetch(ctx, stdout, "holds ls", "GET", path, &res); done || err != nil {
		return err
	}
	if !res.NATS {
		fmt.Fprintln(stderr, "warning: the admin service does not reach NATS; the list may be stale")
	}
	if len(res.Holds) == 0 {
		fmt.Fprintln(stdout, "no holds")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPROVIDER\tKEY\tMODEL\tCLASS\tSTATE\tRUNG\tLEFT\tSOURCE\tREASON")
	for _, h := range res.Holds {
		state := h.State
		if !h.Live {
			state = "ramping"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", h.ID, h.Scope.Provider, dash(h.Scope.Key), dash(h.Scope.Model),
			h.Class, state, h.Rung, left(h.RemainingMS), h.Source, h.Reason)
	}
	return tw.Flush()
}

func holdsRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := adminFlagSet("holds release", "", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("holds release: want exactly one hold ID (see swctl holds ls)")
	}
	b, err := a.call(ctx, "DELETE", "/admin/holds/"+url.PathEscape(pos[0]), nil)
	if err != nil {
		return err
	}
	// 204 released, or 202 {"status":"queued",...}: applied by the admin
	// service and written to NATS once JetStream answers
	var q adminapi.Queued
	if len(b) > 0 && json.Unmarshal(b, &q) == nil && q.Status == adminapi.StatusQueued {
		if a.json {
			return json.NewEncoder(stdout).Encode(map[string]string{"queued": pos[0], "message": q.Message})
		}
		fmt.Fprintf(stdout, "release of %s queued, not written yet: %s\n", pos[0], q.Message)
		return nil
	}
	if a.json {
		return json.NewEncoder(stdout).Encode(map[string]string{"released": pos[0]})
	}
	fmt.Fprintf(stdout, "released %s (the target ramps back in)\n", pos[0])
	return nil
}

func runProviders(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "status" {
		return verbUsage(args, stderr, "usage: swctl providers status [flags]", errors.New("providers: want status"))
	}
	fs, a := adminFlagSet("providers status", "", stderr)
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("providers status: unexpected argument %q", pos[0])
	}
	var res adminapi.ProvidersStatus
	if done, err := a.fetch(ctx, stdout, "providers status", "GET", "/admin/providers/status", &res); done || err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tTYPE\tSTATUS\tCIRCUIT\tHEALTH\tKEY\tFINGERPRINT\tHOLDS")
	for _, p := range res.Providers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Type, p.Status, p.CircuitState, healthText(p.CircuitState, p.Health), "*", "-", holdSummary(p.Holds))
		for _, k := range p.Keys {
			fmt.Fprintf(tw, "\t\t\t\t\t%s\t%s\t%s\n", k.ID, k.Fingerprint, holdSummary(k.Holds))
		}
	}
	return tw.Flush()
}

// healthText is a provider's HEALTH cell: the prober's verdict, and, while
// the breaker is open or half-open, that the breaker decides (a check is
// advice), so "open" never stands beside "healthy" without saying which
// one wins.
func healthText(circuit, health string) string {
	switch circuit {
	case "open":
		return health + " (the open circuit wins)"
	case "half-open":
		return health + " (trial requests decide)"
	}
	return health
}

func holdSummary(hs []adminapi.Hold) string {
	if len(hs) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		s := h.Class.String()
		if h.Scope.Model != "" {
			s += "(" + h.Scope.Model + ")"
		}
		if h.Live {
			s += " " + left(h.RemainingMS)
		} else {
			s += " ramping"
		}
		parts = append(parts, s)
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func runEvents(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "tail" {
		return verbUsage(args, stderr, "usage: swctl events tail [-kind hold,release] [-provider NAME] [-since 10m] [-n N] [flags]", errors.New("events: want tail"))
	}
	fs, a := adminFlagSet("events tail", "", stderr)
	kind := fs.String("kind", "", "comma-separated kinds: hold, release, trip, probe, health, credential, budget, config")
	prov := fs.String("provider", "", "comma-separated provider names")
	since := fs.String("since", "", "replay from the events stream first: a duration (10m) or an RFC 3339 time")
	limit := fs.Int("n", 0, "stop after N events (0: follow until interrupted)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("events tail: unexpected argument %q", pos[0])
	}
	q := url.Values{}
	for k, v := range map[string]string{"kind": *kind, "provider": *prov, "since": *since} {
		if v != "" {
			q.Set(k, v)
		}
	}
	resp, err := a.open(ctx, "GET", withQuery("/admin/events", q), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	go func() { <-ctx.Done(); resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var name, data string
	n := 0
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !a.json {
		fmt.Fprintln(tw, "TIME\tKIND\tTARGET\tCLASS\tOUTCOME\tREASON")
		_ = tw.Flush()
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = line[7:]
		case strings.HasPrefix(line, "data: "):
			data += line[6:]
		case line == "":
			if data != "" && name != "error" {
				if err := printEvent(tw, stdout, a.json, name, data); err != nil {
					return err
				}
				n++
				if *limit > 0 && n >= *limit {
					return nil
				}
			}
			name, data = "", ""
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("events tail: %w", err)
	}
	return errors.New("events tail: the stream ended")
}
