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

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/planlimit"
)

// runClients: swctl clients [ID]: every client key (or one) with its plan
// and its consumption against the plan's limits.
func runClients(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs, a := adminFlagSet("clients", "usage: swctl clients [CLIENT] [flags]", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fs.Usage()
		return fmt.Errorf("clients: unexpected argument %q", pos[1])
	}
	path := "/admin/clients"
	if len(pos) == 1 {
		path += "/" + url.PathEscape(pos[0])
	}
	// the list says whether the figures follow the fleet; one client key
	// comes alone
	res := adminapi.ClientList{NATS: true}
	var one adminapi.Client
	into := any(&res)
	if len(pos) == 1 {
		into = &one
	}
	if done, err := a.fetch(ctx, stdout, "clients", "GET", path, into); done || err != nil {
		return err
	}
	if len(pos) == 1 {
		res.Clients = []adminapi.Client{one}
	}
	if !res.NATS {
		fmt.Fprintln(stderr, "warning: the admin service does not follow the switchyard_limits bucket (NATS unreachable): the figures may be stale")
	}
	return printClients(stdout, res.Clients)
}

// printClients writes one aligned line per client key: used/limit for
// the sliding minute's requests and tokens and the requests in flight,
// spend/budget per period ("-": no limit), and the last reset.
func printClients(w io.Writer, cs []adminapi.Client) error {
	if len(cs) == 0 {
		_, err := fmt.Fprintln(w, "no client keys are configured (clients[])")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tPLAN\tREQ/MIN\tTOK/MIN\tIN FLIGHT\tDAY USD\tWEEK USD\tMONTH USD\tRESET")
	for _, c := range cs {
		u := c.Usage
		reset := "-"
		if u.Reset != nil {
			reset = u.Reset.By + " " + u.Reset.At.UTC().Format("2006-01-02 15:04Z")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, dash(c.Plan),
			used(u.RequestsPerMinute, float64(c.Limits.RequestsPerMinute)), used(u.TokensPerMinute, float64(c.Limits.TokensPerMinute)),
			used(float64(u.InFlight), float64(c.Limits.ConcurrentRequests)), spent(u.Day), spent(u.Week), spent(u.Month), reset)
	}
	return tw.Flush()
}

// used is "used/limit", "-" for no limit.
func used(v, limit float64) string {
	s := strconv.FormatFloat(float64(int64(v*10+0.5))/10, 'f', -1, 64)
	if limit <= 0 {
		return s + "/-"
	}
	return s + "/" + strconv.FormatFloat(limit, 'f', -1, 64)
}

// spent is "spend/budget", "-" for no budget, and "exhausted".
func spent(p planlimit.Period) string {
	s := fmt.Sprintf("%.4f/", p.SpendUSD)
	if p.BudgetUSD > 0 {
		s += fmt.Sprintf("%.2f", p.BudgetUSD)
	} else {
		s += "-"
	}
	if p.Exhausted {
		s += " exhausted"
	}
	return s
}

// runBudget: swctl budget reset CLIENT: the client key's spend in the
// current day, week and month starts from 0 again, fleet-wide (operator).
func runBudget(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "reset" {
		return verbUsage(args, stderr, "usage: swctl budget reset CLIENT [flags]", errors.New("budget: want reset"))
	}
	fs, a := adminFlagSet("budget reset", "", stderr)
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("budget reset: want exactly one client key id (see swctl clients)")
	}
	var c adminapi.Client
	if done, err := a.fetch(ctx, stdout, "budget reset", "POST", "/admin/clients/"+url.PathEscape(pos[0])+"/budget/reset", &c); done || err != nil {
		return err
	}
	by := ""
	if c.Usage.Reset != nil {
		by = " by " + c.Usage.Reset.By
	}
	var periods []string
	for _, p := range []struct {
		name string
		p    planlimit.Period
	}{{"day", c.Usage.Day}, {"week", c.Usage.Week}, {"month", c.Usage.Month}} {
		if p.p.BudgetUSD > 0 {
			periods = append(periods, p.name+" "+spent(p.p))
		}
	}
	_, err = fmt.Fprintf(stdout, "budget of %s (plan %s) reset%s: %s USD\n", c.ID, c.Plan, by, strings.Join(periods, ", "))
	return err
}
