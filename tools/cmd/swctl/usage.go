package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"switchyard.dev/services/admin/adminapi"
)

func runUsage(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs, a := adminFlagSet("usage", "usage: swctl usage [--from -24h] [--to now] [--by client,model] [--interval hour] [--client C] [--provider P] [--model M] [--limit N] [flags]", stderr)
	q := queryFlags(fs, []queryFlag{
		{"from", "", "start: RFC 3339, now, or before now (-24h, -90m, -7d); default 24h before --to"},
		{"to", "", "end (exclusive), same forms; default now"},
		{"by", "group_by", "group by, comma-separated: client, plan, client_type, provider, model, key, endpoint, status, class"},
		{"interval", "", "time buckets: minute, hour, day or none"},
		{"client", "", "only these clients (comma-separated)"},
		{"provider", "", "only these providers (comma-separated)"},
		{"model", "", "only these models (comma-separated)"},
		{"limit", "", "at most N groups per time bucket (by cost, then requests)"},
	})
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fs.Usage()
		return fmt.Errorf("usage: unexpected argument %q", pos[0])
	}
	var res adminapi.UsageReport
	if done, err := a.fetch(ctx, stdout, "usage", "GET", withQuery("/admin/usage", q), &res); done || err != nil {
		return err
	}
	if res.Truncated {
		fmt.Fprintf(stderr, "warning: truncated (%s): the sums cover part of the range (data from %s; %d stream messages unread)\n",
			res.TruncatedBy, res.CoveredFrom.Format(time.RFC3339), res.UnreadMessages)
	}
	if res.Skipped > 0 {
		fmt.Fprintf(stderr, "warning: %d records could not be read and are not counted\n", res.Skipped)
	}
	return printUsage(stdout, res)
}

// printUsage writes the groups as an aligned table: the bucket (with an
// interval), the group's keys, then the sums; a TOTAL line ends it.
func printUsage(w io.Writer, res adminapi.UsageReport) error {
	if res.Totals.Requests == 0 {
		_, err := fmt.Fprintln(w, "no usage in this range")
		return err
	}
	bucketed := res.Interval != "" && res.Interval != "none"
	var head []string
	if bucketed {
		head = append(head, "BUCKET")
	}
	for _, k := range res.GroupBy {
		head = append(head, strings.ToUpper(k))
	}
	head = append(head, "REQUESTS", "ERRORS", "TOKENS IN", "TOKENS OUT", "COST USD", "P50", "P95")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	row := func(lead []string, g adminapi.UsageGroup) {
		cells := append(lead,
			strconv.FormatInt(g.Requests, 10),
			errorsCell(g),
			strconv.FormatInt(g.Tokens.Input+g.Tokens.CachedInput+g.Tokens.CacheWrite, 10),
			strconv.FormatInt(g.Tokens.Output+g.Tokens.Reasoning, 10),
			costCell(g),
			millis(g.LatencyMS.P50),
			millis(g.LatencyMS.P95))
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	for _, g := range res.Groups {
		var lead []string
		if bucketed {
			lead = append(lead, bucketCell(g.Bucket, res.Interval))
		}
		for _, k := range res.GroupBy {
			lead = append(lead, dash(g.Key[k]))
		}
		row(lead, g)
	}
	if len(res.Groups) > 1 || res.GroupsOmitted > 0 {
		lead := make([]string, len(head)-7) // more than one group: at least one key column
		lead[0] = "TOTAL"
		row(lead, res.Totals)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.GroupsOmitted > 0 {
		_, err := fmt.Fprintf(w, "(%d more groups left out by --limit; TOTAL counts them)\n", res.GroupsOmitted)
		return err
	}
	return nil
}

func errorsCell(g adminapi.UsageGroup) string {
	if g.Errors == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%.1f%%)", g.Errors, g.ErrorRate*100)
}

// costCell is the sum of the known costs, and how many requests had none.
func costCell(g adminapi.UsageGroup) string {
	known := "unknown"
	if g.CostUSD != nil {
		known = fmt.Sprintf("%.4f", *g.CostUSD)
	}
	if g.CostUnknownRequests > 0 && g.CostUSD != nil {
		return fmt.Sprintf("%s +%d unknown", known, g.CostUnknownRequests)
	}
	return known
}

func millis(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.2fs", ms/1000)
	}
	return fmt.Sprintf("%.0fms", ms)
}

func bucketCell(t *time.Time, interval string) string {
	if t == nil {
		return "-"
	}
	if interval == "day" {
		return t.UTC().Format("2006-01-02")
	}
	return t.UTC().Format("2006-01-02 15:04Z")
}
