package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/debug"
)

const debugUsage = "usage: swctl debug REQUEST_ID [--json] | swctl debug list [--outcome failed] [--provider P] [--since 1h] [--limit N] [--json]\n" +
	"       (swctl debug get REQUEST_ID for an id that is \"list\" or \"get\")"

// runDebug: swctl debug REQUEST_ID prints the request's debug bundle as a
// timeline; swctl debug list lists the newest bundles.
func runDebug(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "list" {
		return debugList(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "get" {
		args = args[1:]
	}
	fs, a := adminFlagSet("debug", debugUsage, stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		if len(pos) == 0 {
			return errors.New("debug: want a request id, or list")
		}
		return fmt.Errorf("debug: unexpected argument %q", pos[1])
	}
	var b debug.Bundle
	if done, err := a.fetch(ctx, stdout, "debug", "GET", "/admin/requests/"+url.PathEscape(pos[0]), &b); done || err != nil {
		return err
	}
	return printBundle(stdout, &b)
}

// printBundle writes a bundle as a timeline: a header, the route's steps,
// then one line per attempt.
func printBundle(w io.Writer, b *debug.Bundle) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(label string, parts ...string) {
		var kept []string
		for _, p := range parts {
			if p != "" {
				kept = append(kept, p)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, strings.Join(kept, "  "))
	}
	line("request", b.RequestID)
	stream := ""
	if b.Stream {
		stream = "(stream)"
	}
	line("at", b.At.UTC().Format("2006-01-02 15:04:05.000Z"), "instance "+dash(b.Instance), dash(b.Endpoint), stream)
	if b.TraceID != "" {
		from := "started by the gateway"
		if f := strings.Split(b.TraceParent, "-"); len(f) == 4 {
			from = "the caller's, under its span " + f[2]
		}
		line("trace", b.TraceID, "("+from+")")
	}
	model := dash(b.Model)
	if r := b.Route; r != nil {
		model += " → " + r.Name + " (" + strings.Join(nonEmpty(r.Kind, r.Strategy), ", ") + ")"
		if len(r.Needs) > 0 {
			model += "  needs " + strings.Join(r.Needs, ",")
		}
		if r.Region != "" {
			model += "  region " + r.Region
			if r.RegionRequired {
				model += " (required)"
			}
		}
	}
	line("model", model)
	client := dash(b.Client)
	if b.Plan != "" {
		client += " plan " + b.Plan
	}
	if b.ClientType != "" {
		client += " type " + b.ClientType
	}
	limits := ""
	if l := b.Limits; l != nil {
		limits = "limits " + strings.Join(nonEmpty(l.Decision, l.Code, l.Limit), " ")
	}
	line("client", client, "access "+dash(b.Access), limits)
	if p := b.Policy; p != nil {
		var parts []string
		if p.Plan != "" {
			var rules []string
			for _, r := range p.Rules {
				rules = append(rules, fmt.Sprintf("%s %g %s", r.Rule, r.Limit, r.Verdict))
			}
			parts = append(parts, "plan "+p.Plan+": "+strings.Join(rules, ", "))
		}
		for _, g := range p.Guardrails {
			parts = append(parts, g.Guardrail+":"+g.Action+" from "+g.From)
		}
		line("policy", parts...)
	}
	if len(b.Guardrails) > 0 {
		var gs []string
		for _, g := range b.Guardrails {
			gs = append(gs, g.Guardrail+" "+g.Verdict+" ("+strings.Join(nonEmpty(g.Stage, g.Check), ", ")+")")
		}
		line("guards", gs...) // the guardrails' decisions
	}
	status := "-"
	if b.Status != 0 {
		status = strconv.Itoa(b.Status)
	}
	result := []string{status + " " + b.Outcome}
	if b.ErrorCode != "" {
		result = append(result, "error "+b.ErrorCode)
	}
	if b.Class != "" {
		result = append(result, "class "+b.Class)
	}
	result = append(result, "latency "+dms(b.LatencyMS))
	if b.TTFTMS > 0 {
		result = append(result, "ttft "+dms(b.TTFTMS))
	}
	if b.Stream {
		if b.StreamCompleted {
			result = append(result, "stream completed")
		} else {
			result = append(result, "stream not completed")
		}
	}
	if b.Cancelled {
		result = append(result, "cancelled by the caller")
	}
	line("result", result...)
	if b.Provider != "" {
		line("served", b.Provider+"/"+dash(b.ServedModel), "key "+dash(b.KeyID))
	}
	var usage []string
	if t := b.Tokens; t != nil {
		tok := fmt.Sprintf("tokens in %d out %d", t.Input, t.Output)
		if t.CachedInput > 0 {
			tok += fmt.Sprintf(" cached %d", t.CachedInput)
		}
		if t.CacheWrite > 0 {
			tok += fmt.Sprintf(" cache write %d", t.CacheWrite)
		}
		if t.Reasoning > 0 {
			tok += fmt.Sprintf(" reasoning %d", t.Reasoning)
		}
		if t.Estimated {
			tok += " (estimated)"
		}
		usage = append(usage, tok)
	}
	if b.CostUSD != nil {
		usage = append(usage, fmt.Sprintf("cost $%.6f", *b.CostUSD))
	}
	if len(usage) > 0 {
		line("usage", usage...)
	}
	line("kept", dash(b.Sampled))
	if err := tw.Flush(); err != nil {
		return err
	}

	if b.Route != nil && len(b.Route.Steps) > 0 {
		fmt.Fprintln(w, "\nroute steps")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  STEP\tTARGET\tTRIED\tREASON\tHELD KEYS")
		for _, s := range b.Route.Steps {
			tried := "-"
			if s.Tried > 0 {
				tried = "#" + strconv.Itoa(s.Tried)
			}
			var held []string
			for _, h := range s.Held {
				d := h.KeyID
				if x := strings.Join(nonEmpty(hIf("hold ", h.HoldID), h.Class), ", "); x != "" {
					d += " (" + x + ")"
				}
				held = append(held, d)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", s.Step, s.Target, tried, dash(s.Reason), dash(strings.Join(held, "; ")))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "\nattempts")
	if len(b.Attempts) == 0 {
		_, err := fmt.Fprintln(w, "  none (no upstream was tried)")
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tSTART\tDURATION\tTARGET\tKEY\tSTATUS\tCLASS\tERROR\tACTION\tFLAGS")
	for _, at := range b.Attempts {
		key := dash(at.KeyID)
		if at.Fingerprint != "" {
			key += " (fp " + at.Fingerprint + ")"
		}
		status := "-"
		if at.Status != 0 {
			status = strconv.Itoa(at.Status)
		}
		code := ""
		if at.Error != nil {
			code = at.Error.Code
			if code == "" {
				code = at.Error.Type
			}
		}
		action := dash(at.Action)
		if at.BackoffMS > 0 {
			action += ", waited " + dms(at.BackoffMS)
		}
		var flags []string
		if at.Probe {
			flags = append(flags, "probe")
		}
		if at.Soft {
			flags = append(flags, "soft")
		}
		if at.TTFTMS > 0 {
			flags = append(flags, "headers "+dms(at.TTFTMS))
		}
		if at.StreamCompleted {
			flags = append(flags, "stream completed")
		}
		fmt.Fprintf(tw, "  %d\t+%s\t%s\t%s/%s\t%s\t%s\t%s\t%s\t%s\t%s\n", at.N, dms(at.StartMS), dms(at.DurationMS),
			at.Provider, dash(at.Model), key, status, dash(at.Class), dash(code), action, dash(strings.Join(flags, ",")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, at := range b.Attempts {
		if at.Error != nil && at.Error.Message != "" {
			if _, err := fmt.Fprintf(w, "  #%d %s: %s\n", at.N, strings.Join(nonEmpty(at.Error.Type, at.Error.Code), "/"), at.Error.Message); err != nil {
				return err
			}
		}
	}
	return nil
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// hIf is prefix+s, or "" when s is.
func hIf(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// debugList: swctl debug list: the newest bundles as a table.
func debugList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, a := adminFlagSet("debug list", debugUsage, stderr)
	q := queryFlags(fs, []queryFlag{
		{name: "outcome", help: "failed, rejected, ok or all (default all)"},
		{name: "provider", help: "only requests this provider served (or failed on) last; _ for none"},
		{name: "since", help: "a duration back from now (15m, 2h) or an RFC 3339 time (default 1h)"},
		{name: "limit", help: "at most N bundles, the newest (1 to 500, default 50)"},
	})
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fs.Usage()
		return fmt.Errorf("debug list: unexpected argument %q", pos[0])
	}
	path := withQuery("/admin/requests", q)
	var res adminapi.RequestList
	if done, err := a.fetch(ctx, stdout, "debug list", "GET", path, &res); done || err != nil {
		return err
	}
	if len(res.Requests) == 0 {
		_, err := fmt.Fprintf(stdout, "no debug bundles since %s\n", res.Since.UTC().Format(time.RFC3339))
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tREQUEST ID\tOUTCOME\tSTATUS\tERROR\tMODEL\tPROVIDER\tCLIENT\tATTEMPTS\tLATENCY\tINSTANCE")
	for _, s := range res.Requests {
		status := "-"
		if s.Status != 0 {
			status = strconv.Itoa(s.Status)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.At.UTC().Format("2006-01-02 15:04:05Z"), s.RequestID,
			s.Outcome, status, dash(s.ErrorCode), dash(s.Model), dash(s.Provider), dash(s.Client), s.Attempts, dms(s.LatencyMS), dash(s.Instance))
	}
	return tw.Flush()
}

// dms is a duration in milliseconds: a tenth below 10ms, seconds from 1s.
func dms(ms float64) string {
	if ms > 0 && ms < 10 {
		return strconv.FormatFloat(ms, 'f', 1, 64) + "ms"
	}
	return millis(ms)
}
