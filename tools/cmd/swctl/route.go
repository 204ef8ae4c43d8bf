package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/bus"
)

// headerFlags are repeated --header K=V flags.
type headerFlags map[string]string

func (h headerFlags) String() string { return "" }

func (h headerFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if k = strings.TrimSpace(k); !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", v)
	}
	h[k] = val
	return nil
}

// runRoute: swctl route explain MODEL: how a proxy of the fleet would
// route a request now (POST /admin/route/explain; a read token suffices).
func runRoute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	const use = "usage: swctl route explain MODEL [--client ID] [--body FILE|-] [--header K=V ...] [--endpoint E] [flags]"
	if len(args) == 0 || args[0] != "explain" {
		return verbUsage(args, stderr, use, errors.New("route: want explain"))
	}
	fs, a := adminFlagSet("route explain", use, stderr)
	client := fs.String("client", "", "a client key id: its plan's models, region and hash apply")
	bodyFile := fs.String("body", "", "a JSON file with the request body the routing depends on (- for standard input)")
	endpoint := fs.String("endpoint", "", "chat.completions (the default), messages or embeddings")
	headers := headerFlags{}
	fs.Var(headers, "header", "a request header K=V that steers routing (X-Switchyard-Region=eu, a session header); repeatable")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fs.Usage()
		return fmt.Errorf("route explain: unexpected argument %q", pos[1])
	}
	req := adminapi.RouteExplainRequest{Endpoint: *endpoint, Client: *client}
	if len(pos) == 1 {
		req.Model = pos[0]
	}
	if len(headers) > 0 {
		req.Headers = headers
	}
	if *bodyFile != "" {
		var b []byte
		if *bodyFile == "-" {
			b, err = io.ReadAll(stdin)
		} else {
			b, err = os.ReadFile(*bodyFile)
		}
		if err != nil {
			return fmt.Errorf("route explain: --body: %w", err)
		}
		if !json.Valid(b) {
			return fmt.Errorf("route explain: --body %s is not valid JSON", *bodyFile)
		}
		req.Body = bytes.TrimSpace(b)
	}
	if req.Model == "" && req.Body == nil {
		fs.Usage()
		return errors.New("route explain: want a model (or --body with a \"model\" field)")
	}
	payload, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("route explain: %w", err)
	}
	b, err := a.call(ctx, "POST", "/admin/route/explain", bytes.NewReader(payload))
	if err != nil {
		return err
	}
	if a.json {
		_, err := stdout.Write(b)
		return err
	}
	var res adminapi.RouteExplanation
	var x bus.Explanation
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("route explain: decode: %w", err)
	}
	if err := json.Unmarshal(res.Explanation, &x); len(res.Explanation) > 0 && err != nil {
		return fmt.Errorf("route explain: decode the explanation: %w", err)
	}
	return printExplanation(stdout, &res, &x)
}

// printExplanation writes a header line (model → route and the policy),
// the candidates in the order a request would try them, then the steps
// rejected with the reason.
func printExplanation(w io.Writer, res *adminapi.RouteExplanation, x *bus.Explanation) error {
	region := dash(x.Region)
	if x.RegionRequired {
		region += " (required)"
	}
	hash := ""
	if x.HashOn != "" {
		hash = "  hash_on " + x.HashOn
	}
	fmt.Fprintf(w, "%s → %s  kind %s  strategy %s%s  fail_closed %t  needs %s  region %s\n",
		x.Model, x.Route, x.Kind, x.Strategy, hash, x.FailClosed, dash(strings.Join(x.Needs, ",")), region)
	out := ""
	if x.MaxOutputTokens > 0 {
		out = fmt.Sprintf(", max output %d", x.MaxOutputTokens)
	}
	fmt.Fprintf(w, "answered by %s (routing version %d); estimated input tokens %d%s\n\n",
		dash(res.Instance), res.RoutingVersion, x.EstimatedInputTokens, out)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(x.Candidates) == 0 {
		fmt.Fprintln(tw, "no candidates: a request would fail")
	} else {
		fmt.Fprintln(tw, "#\tSTEP\tTARGET\tHEALTH\tLATENCY MS\tEST. COST USD\tKEYS")
		for i, c := range x.Candidates {
			health := c.Health
			if c.Fallback {
				health += " (fallback)"
			}
			keys := make([]string, 0, len(c.Keys))
			for _, k := range c.Keys {
				keys = append(keys, keyText(k))
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", i+1, c.Step, c.Target, health,
				number(c.LatencyMS, 0), number(c.EstimatedCostUSD, 6), dash(strings.Join(keys, ", ")))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(x.Rejected) == 0 {
		_, err := fmt.Fprintln(w, "rejected: none")
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REJECTED\tTARGET\tREASON\tDETAIL")
	for _, r := range x.Rejected {
		fmt.Fprintf(tw, "step %d\t%s\t%s\t%s\n", r.Step, r.Target, dash(r.Reason), dash(r.Detail))
	}
	return tw.Flush()
}

// keyText is a key of an explanation: its id and state, and its
// tightest rate-limit window when its provider stated any (headroom
// routing), with the reset of a key skipped for headroom.
func keyText(k bus.ExplainKey) string {
	s := k.ID + ":" + k.State
	if len(k.Headroom) == 0 {
		return s
	}
	tight, share := k.Headroom[0], 2.0
	for _, w := range k.Headroom {
		sh := 1.0
		if w.Limit > 0 {
			sh = float64(w.Remaining-w.InFlight) / float64(w.Limit)
		}
		if sh < share {
			tight, share = w, sh
		}
	}
	s += fmt.Sprintf("[%s %d", tight.Kind, tight.Remaining-tight.InFlight)
	if tight.Limit > 0 {
		s += fmt.Sprintf("/%d", tight.Limit)
	}
	if tight.Own != nil {
		s += fmt.Sprintf(" own %d", *tight.Own-tight.InFlight)
	}
	if k.State == bus.KeyNoHeadroom && k.Until != "" {
		s += " until " + k.Until
	}
	return s + "]"
}

// number formats *v with prec decimals, "-" for nil.
func number(v *float64, prec int) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}
