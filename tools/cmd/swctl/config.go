package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/routingdoc"
)

// The routing configuration's verbs (swctl config ...): the fleet's
// versions in switchyard_config, read and written through the admin API
// (/admin/config...).

const configUsage = `usage: swctl config <verb> [flags]

  show [N]                          the active version (or version N) and its document
  history                           every version, newest first
  diff [N [M]]                      changes: the active version against the one it replaced;
                                    N: from N to the active one; N M: from N to M (0: empty)
  preview FILE                      validate a routing document (or the routing part of a full
                                    configuration file, as import takes it): its errors or its diff
  activate FILE [-m COMMENT]        validate FILE, show its diff, make it the active version
  import FILE [-m COMMENT]          activate the routing part of a full configuration file
  rollback N [-m COMMENT]           make version N's document active again (a new version)
  step CHAIN I on|off [-m COMMENT]  switch step I (from 0) of a chain on or off
  key PROVIDER ID [--weight W] [--priority P] [--enabled true|false] [-m COMMENT]
                                    change a key's weight, priority, or switch it off/on

FILE is YAML or JSON ("-": standard input). Every write needs an operator token and
makes a new version every proxy, the prober and the admin service apply at once.`

func runConfig(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stderr, configUsage)
		if len(args) == 0 {
			return errors.New("config: want a verb")
		}
		return nil
	}
	verbs := map[string]func(context.Context, *configCmd) error{
		"show": configShow, "history": configHistory, "diff": configDiff, "preview": configPreview,
		"activate": configActivate, "import": configImport, "rollback": configRollback,
		"step": configStep, "key": configKey,
	}
	verb, ok := verbs[args[0]]
	if !ok {
		fmt.Fprintln(stderr, configUsage)
		return fmt.Errorf("config: unknown verb %q", args[0])
	}
	c := &configCmd{name: "config " + args[0], stdin: stdin, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, configUsage) }
	c.a.register(fs)
	fs.StringVar(&c.comment, "m", "", "comment kept with the version (writes)")
	fs.Uint64Var(&c.base, "base", 0, "the active revision the write is based on (0: the one it reads; activate: the preview's)")
	fs.Func("weight", "key: the new weight", func(v string) error { return intFlag(v, &c.weight) })
	fs.Func("priority", "key: the new priority", func(v string) error { return intFlag(v, &c.priority) })
	fs.Func("enabled", "key: false takes it out of rotation (it stays configured), true puts it back", func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		c.enabled = &b
		return nil
	})
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	c.pos = pos
	return verb(ctx, c)
}

func intFlag(v string, dst **int) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("want an integer, got %q", v)
	}
	*dst = &n
	return nil
}

// configCmd is one config verb's arguments.
type configCmd struct {
	name             string
	a                adminFlags
	pos              []string
	comment          string
	base             uint64
	weight, priority *int
	enabled          *bool
	stdin            io.Reader
	stdout, stderr   io.Writer
}

// args checks the number of positional arguments.
func (c *configCmd) args(min, max int, what string) error {
	if len(c.pos) < min || len(c.pos) > max {
		return fmt.Errorf("%s: want %s", c.name, what)
	}
	return nil
}

// get asks the admin API and decodes its answer into v, or prints it
// as it came with --json (then v is left alone and done is true).
func (c *configCmd) get(ctx context.Context, path string, v any) (done bool, err error) {
	return c.a.fetch(ctx, c.stdout, c.name, "GET", path, v)
}

func configShow(ctx context.Context, c *configCmd) error {
	if err := c.args(0, 1, "at most one version number"); err != nil {
		return err
	}
	// the active version comes with what the admin service applies; a
	// version by number alone
	var ac adminapi.ActiveConfig
	var done bool
	var err error
	if len(c.pos) == 1 {
		done, err = c.get(ctx, "/admin/config/versions/"+url.PathEscape(c.pos[0]), &ac.ConfigVersion)
	} else {
		done, err = c.get(ctx, "/admin/config", &ac)
	}
	if done || err != nil {
		return err
	}
	v := ac.ConfigVersion
	w := c.stdout
	state := ""
	if v.Active {
		state = fmt.Sprintf(" (active, revision %d)", v.ActiveRevision)
	}
	fmt.Fprintf(w, "# version %d%s\n# %s by %s at %s\n", v.Version, state, describe(v), v.By, v.At.Local().Format(time.RFC3339))
	if v.Comment != "" {
		fmt.Fprintf(w, "# comment: %s\n", v.Comment)
	}
	if v.SHA256 != "" {
		fmt.Fprintf(w, "# sha256 %s\n", v.SHA256)
	}
	if len(c.pos) == 0 && uint64(ac.AppliedVersion) != v.Version {
		fmt.Fprintf(w, "# the admin service applies version %d\n", ac.AppliedVersion)
	}
	if ac.RoutingError != nil {
		fmt.Fprintf(w, "# the admin service could not apply version %d: %s\n", ac.RoutingError.Version, ac.RoutingError.Error)
	}
	_, err = io.WriteString(w, v.Document)
	if err == nil && !strings.HasSuffix(v.Document, "\n") {
		_, err = io.WriteString(w, "\n")
	}
	return err
}

// describe says where a version came from.
func describe(v adminapi.ConfigVersion) string {
	switch v.Source {
	case "rollback":
		return fmt.Sprintf("rollback to version %d", v.FromVersion)
	case "edit":
		return fmt.Sprintf("edit of version %d: %s", v.FromVersion, v.Edit)
	}
	return v.Source
}

func configHistory(ctx context.Context, c *configCmd) error {
	if err := c.args(0, 0, "no argument"); err != nil {
		return err
	}
	var res adminapi.VersionList
	if done, err := c.get(ctx, "/admin/config/versions", &res); done || err != nil {
		return err
	}
	if len(res.Versions) == 0 {
		fmt.Fprintln(c.stdout, "no versions: the fleet routes with its files' configuration")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tACTIVE\tAT\tBY\tSOURCE\tCOMMENT")
	for _, v := range res.Versions {
		active := ""
		if v.Active {
			active = "*"
		}
		note := v.Comment
		if v.Edit != "" {
			note = strings.TrimSpace(v.Edit + "  " + v.Comment)
		}
		src := v.Source
		if v.FromVersion != 0 {
			src += fmt.Sprintf(" (from %d)", v.FromVersion)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", v.Version, active, v.At.Local().Format("2006-01-02 15:04:05"), v.By, src, dash(note))
	}
	return tw.Flush()
}

func configDiff(ctx context.Context, c *configCmd) error {
	if err := c.args(0, 2, "[N [M]]: version numbers"); err != nil {
		return err
	}
	q := url.Values{}
	for i, name := range []string{"from", "to"} {
		if i < len(c.pos) {
			if _, err := strconv.ParseUint(c.pos[i], 10, 64); err != nil {
				return fmt.Errorf("%s: %q is not a version number", c.name, c.pos[i])
			}
			q.Set(name, c.pos[i])
		}
	}
	path := withQuery("/admin/config/diff", q)
	var res adminapi.ConfigDiff
	if done, err := c.get(ctx, path, &res); done || err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "# version %d -> %d\n", res.From, res.To)
	return printChanges(c.stdout, res.Changes)
}

// printChanges prints one line per change: "+ path: value" added, "-
// path: value" removed, "~ path: before -> after" changed, then the
// counts.
func printChanges(w io.Writer, ch routingdoc.Changes) error {
	for _, x := range ch.Changes {
		switch x.Op {
		case "added":
			fmt.Fprintf(w, "+ %s: %s\n", x.Path, compact(x.After))
		case "removed":
			fmt.Fprintf(w, "- %s: %s\n", x.Path, compact(x.Before))
		default:
			fmt.Fprintf(w, "~ %s: %s -> %s\n", x.Path, compact(x.Before), compact(x.After))
		}
	}
	_, err := fmt.Fprintf(w, "%d added, %d changed, %d removed\n", ch.Added, ch.Changed, ch.Removed)
	return err
}

func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// readDocument reads FILE ("-": stdin) and the content type to send it
// with.
func (c *configCmd) readDocument(path string) ([]byte, string, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(c.stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", c.name, err)
	}
	ct := "application/yaml"
	if t := bytes.TrimSpace(b); strings.EqualFold(filepath.Ext(path), ".json") || (len(t) > 0 && t[0] == '{') {
		ct = "application/json"
	}
	return b, ct, nil
}

// preview asks the admin service about doc; with --json it prints the
// answer as it came.
func (c *configCmd) preview(ctx context.Context, doc []byte, ct string, print bool) (adminapi.Preview, error) {
	var p adminapi.Preview
	b, err := c.a.callAs(ctx, "POST", "/admin/config/preview", ct, bytes.NewReader(doc))
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%s: decode: %w", c.name, err)
	}
	if !print {
		return p, nil
	}
	if c.a.json {
		_, err := c.stdout.Write(b)
		return p, err
	}
	w := c.stdout
	for _, m := range p.Warnings {
		fmt.Fprintf(c.stderr, "warning: %s\n", m)
	}
	if !p.Valid {
		fmt.Fprintf(w, "invalid: %d problem(s); nothing would be activated\n", len(p.Errors))
		for _, m := range p.Errors {
			fmt.Fprintf(w, "  %s\n", m)
		}
	} else {
		fmt.Fprintln(w, "valid")
	}
	switch {
	case p.Unchanged:
		fmt.Fprintf(w, "# the document is version %d's, which is active: activating it changes nothing\n", p.ActiveVersion)
	case p.Diff != nil:
		fmt.Fprintf(w, "# changes from the active version %d (base %d)\n", p.ActiveVersion, p.Base)
		return p, printChanges(w, *p.Diff)
	}
	return p, nil
}

func configPreview(ctx context.Context, c *configCmd) error {
	if err := c.args(1, 1, "one FILE (YAML or JSON; - for standard input)"); err != nil {
		return err
	}
	doc, ct, err := c.readDocument(c.pos[0])
	if err != nil {
		return err
	}
	// A full configuration file: its routing part, as import activates it.
	if routing, other, err := config.ExtractRouting(doc, c.pos[0]); err == nil && other {
		fmt.Fprintf(c.stderr, "# %s is a full configuration file: previewing its routing keys, as config import activates them\n", c.pos[0])
		doc, ct = routing, "application/yaml"
	}
	p, err := c.preview(ctx, doc, ct, true)
	if err != nil {
		return err
	}
	if !p.Valid {
		return errSilent
	}
	return nil
}

func configActivate(ctx context.Context, c *configCmd) error {
	if err := c.args(1, 1, "one FILE (YAML or JSON; - for standard input)"); err != nil {
		return err
	}
	doc, ct, err := c.readDocument(c.pos[0])
	if err != nil {
		return err
	}
	return c.activate(ctx, doc, ct)
}

// activate previews doc (printing its problems or its changes), then
// activates it based on the revision it was previewed against: if another
// version became active in between, the admin API answers 409 and
// nothing is activated.
func (c *configCmd) activate(ctx context.Context, doc []byte, ct string) error {
	asJSON := c.a.json
	c.a.json = false
	p, err := c.preview(ctx, doc, ct, !asJSON)
	c.a.json = asJSON
	if err != nil {
		return err
	}
	if !p.Valid {
		if asJSON {
			return fmt.Errorf("%s: invalid document: %s", c.name, strings.Join(p.Errors, "; "))
		}
		return errSilent
	}
	base := p.Base
	if c.base != 0 {
		base = c.base
	}
	body := map[string]any{"document": string(doc), "comment": c.comment, "base": base}
	return c.write(ctx, "POST", "/admin/config/activate", body)
}

func configImport(ctx context.Context, c *configCmd) error {
	if err := c.args(1, 1, "one configuration FILE (its routing keys are activated)"); err != nil {
		return err
	}
	doc, err := config.ExtractDocument(c.pos[0])
	if err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	if c.comment == "" {
		c.comment = "imported from " + filepath.Base(c.pos[0])
	}
	return c.activate(ctx, doc, "application/yaml")
}

func configRollback(ctx context.Context, c *configCmd) error {
	if err := c.args(1, 1, "the version N to restore"); err != nil {
		return err
	}
	n, err := strconv.ParseUint(c.pos[0], 10, 64)
	if err != nil || n == 0 {
		return fmt.Errorf("%s: %q is not a version number", c.name, c.pos[0])
	}
	return c.write(ctx, "POST", "/admin/config/rollback", map[string]any{"version": n, "comment": c.comment, "base": c.base})
}

func configStep(ctx context.Context, c *configCmd) error {
	if err := c.args(3, 3, "CHAIN I on|off"); err != nil {
		return err
	}
	i, err := strconv.Atoi(c.pos[1])
	if err != nil || i < 0 {
		return fmt.Errorf("%s: step %q: want its index, from 0", c.name, c.pos[1])
	}
	var active bool
	switch c.pos[2] {
	case "on":
		active = true
	case "off":
	default:
		return fmt.Errorf("%s: want on or off, got %q", c.name, c.pos[2])
	}
	path := fmt.Sprintf("/admin/config/chains/%s/steps/%d", url.PathEscape(c.pos[0]), i)
	return c.write(ctx, "POST", path, map[string]any{"active": active, "comment": c.comment, "base": c.base})
}

func configKey(ctx context.Context, c *configCmd) error {
	if err := c.args(2, 2, "PROVIDER ID with --weight W, --priority P and/or --enabled true|false"); err != nil {
		return err
	}
	if c.weight == nil && c.priority == nil && c.enabled == nil {
		return fmt.Errorf("%s: give --weight, --priority, --enabled or several", c.name)
	}
	body := map[string]any{"comment": c.comment, "base": c.base}
	if c.weight != nil {
		body["weight"] = *c.weight
	}
	if c.priority != nil {
		body["priority"] = *c.priority
	}
	if c.enabled != nil {
		body["enabled"] = *c.enabled
	}
	path := "/admin/config/providers/" + url.PathEscape(c.pos[0]) + "/keys/" + url.PathEscape(c.pos[1])
	return c.write(ctx, "PATCH", path, body)
}

// write sends a configuration write and says what became active.
func (c *configCmd) write(ctx context.Context, method, path string, body any) error {
	j, err := json.Marshal(body)
	if err != nil {
		return err
	}
	b, err := c.a.call(ctx, method, path, bytes.NewReader(j))
	if err != nil {
		return err
	}
	if c.a.json {
		_, err := c.stdout.Write(b)
		return err
	}
	var res adminapi.ConfigWrite
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: decode: %w", c.name, err)
	}
	v := res.Version
	if !res.Changed {
		_, err := fmt.Fprintf(c.stdout, "unchanged: version %d is active and already says so; nothing written\n", v.Version)
		return err
	}
	fmt.Fprintf(c.stdout, "version %d active (%s, replaces %d) by %s\n", v.Version, describe(v), v.Replaces, v.By)
	if !res.Applied {
		fmt.Fprintln(c.stderr, "warning: the admin service has not applied it yet (see its /readyz routing_version and routing_error)")
	}
	if s := res.Summary; s != nil {
		fmt.Fprintf(c.stdout, "instances: %d applied, %d refused, %d pending\n", s.Applied, s.Refused, s.Pending)
		for _, o := range res.Instances {
			if o.Outcome == adminapi.OutcomeApplied {
				continue
			}
			line := fmt.Sprintf("  %s %s (%s): %s, routes with version %d", o.Outcome, o.Instance, o.Service, strings.TrimSpace(o.Error), o.RoutingVersion)
			if o.Error == "" {
				line = fmt.Sprintf("  %s %s (%s): no report of version %d yet, routes with version %d", o.Outcome, o.Instance, o.Service, v.Version, o.RoutingVersion)
			}
			fmt.Fprintln(c.stdout, line)
		}
		if s.Refused > 0 {
			fmt.Fprintf(c.stderr, "warning: %d instance(s) refused version %d and keep routing with the version before\n", s.Refused, v.Version)
		}
	}
	return nil
}
