package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"

	"switchyard.dev/services/admin/adminapi"
)

// runCache: swctl cache ls|get|purge: the response cache's entries
// (GET /admin/cache, GET /admin/cache/entries/{key}, DELETE /admin/cache).
func runCache(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	const use = "usage: swctl cache ls [--route R] [--client C] [--prefix P] [--limit N] | get KEY | purge (--route R | --client C | --prefix P | --all) [flags]"
	if len(args) == 0 || (args[0] != "ls" && args[0] != "get" && args[0] != "purge") {
		return verbUsage(args, stderr, use, errors.New("cache: want ls, get or purge"))
	}
	verb := args[0]
	fs, a := adminFlagSet("cache "+verb, use, stderr)
	var route, client, prefix string
	var limit int
	var all bool
	if verb != "get" {
		fs.StringVar(&route, "route", "", "a route as the gateway resolves it: chain:<name>, provider/model")
		fs.StringVar(&client, "client", "", "a client key's id, or _shared (a route's shared entries)")
		fs.StringVar(&prefix, "prefix", "", "a key prefix")
	}
	if verb == "ls" {
		fs.IntVar(&limit, "limit", 0, "at most this many entries (the API's default: 100)")
	}
	if verb == "purge" {
		fs.BoolVar(&all, "all", false, "purge every entry")
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	q := cacheQuery(route, client, prefix)
	switch verb {
	case "get":
		if len(pos) != 1 {
			return errors.New("cache get: want exactly one key (see swctl cache ls)")
		}
		var e adminapi.CacheEntry
		if done, err := a.fetch(ctx, stdout, "cache get", "GET", "/admin/cache/entries/"+url.PathEscape(pos[0]), &e); done || err != nil {
			return err
		}
		if err := printCache(stdout, []adminapi.CacheEntry{e}); err != nil {
			return err
		}
		body := string(e.Answer)
		if e.Events != "" {
			body = e.Events
		}
		_, err := fmt.Fprintf(stdout, "\n%s\n", body)
		return err
	case "purge":
		if q.Encode() == "" && !all {
			return errors.New("cache purge: name what to purge (--route, --client, --prefix) or --all")
		}
		if all {
			q.Set("all", "true")
		}
		var p adminapi.CachePurge
		if done, err := a.fetch(ctx, stdout, "cache purge", "DELETE", "/admin/cache?"+q.Encode(), &p); done || err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "%d entries purged\n", p.Purged)
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("cache ls: unexpected argument %q", pos[0])
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var l adminapi.CacheList
	if done, err := a.fetch(ctx, stdout, "cache ls", "GET", "/admin/cache?"+q.Encode(), &l); done || err != nil {
		return err
	}
	if err := printCache(stdout, l.Entries); err != nil {
		return err
	}
	if l.Truncated {
		fmt.Fprintf(stderr, "%d keys matched, %d shown: narrow the filters or raise --limit\n", l.Matched, len(l.Entries))
	}
	return nil
}

func cacheQuery(route, client, prefix string) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"route": route, "client": client, "prefix": prefix} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// printCache writes one aligned line per entry.
func printCache(w io.Writer, es []adminapi.CacheEntry) error {
	if len(es) == 0 {
		_, err := fmt.Fprintln(w, "no entries")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tSCOPE\tENDPOINT\tSERVED BY\tAGE\tEXPIRES\tBYTES\tCOST USD\tKEY")
	for _, e := range es {
		cost := "-"
		if e.CostUSD != nil {
			cost = fmt.Sprintf("%.6f", *e.CostUSD)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%ds\t%s\t%d\t%s\t%s\n", e.Route, e.Scope, e.Endpoint, e.Provider, e.Model,
			e.AgeS, e.Expires.UTC().Format("2006-01-02 15:04:05Z"), e.Bytes, cost, e.Key)
	}
	return tw.Flush()
}
