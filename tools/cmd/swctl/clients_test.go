package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/planlimit"
)

// cannedClients is an answer of GET /admin/clients: a key without a plan,
// one whose day budget is exhausted (reset earlier in the month), one on
// a plan without a budget.
const cannedClients = `{"clients":[
 {"id":"app","plan":"","limits":{"requests_per_minute":0,"tokens_per_minute":0,"concurrent_requests":0,"budget":{"day":0,"week":0,"month":0}},
  "usage":{"requests_per_minute":0,"tokens_per_minute":0,"in_flight":0,
   "day":{"id":"d20261130","spend_usd":0,"budget_usd":0,"exhausted":false,"ends":"2026-12-01T00:00:00Z"},
   "week":{"id":"w2026W49","spend_usd":0,"budget_usd":0,"exhausted":false,"ends":"2026-12-07T00:00:00Z"},
   "month":{"id":"m202611","spend_usd":0,"budget_usd":0,"exhausted":false,"ends":"2026-12-01T00:00:00Z"},"reset":null}},
 {"id":"team-a","plan":"pro","limits":{"requests_per_minute":100,"tokens_per_minute":10000,"concurrent_requests":5,"budget":{"day":1,"week":0,"month":10}},
  "usage":{"requests_per_minute":3.87,"tokens_per_minute":2000,"in_flight":1,
   "day":{"id":"d20261130","spend_usd":1.2,"budget_usd":1,"exhausted":true,"ends":"2026-12-01T00:00:00Z"},
   "week":{"id":"w2026W49","spend_usd":1.2,"budget_usd":0,"exhausted":false,"ends":"2026-12-07T00:00:00Z"},
   "month":{"id":"m202611","spend_usd":1.2,"budget_usd":10,"exhausted":false,"ends":"2026-12-01T00:00:00Z"},
   "reset":{"by":"oncall","at":"2026-11-29T08:15:00Z"}}},
 {"id":"team-b","plan":"free","limits":{"requests_per_minute":10,"tokens_per_minute":0,"concurrent_requests":0,"budget":{"day":0,"week":0,"month":0}},
  "usage":{"requests_per_minute":3,"tokens_per_minute":120,"in_flight":0,
   "day":{"id":"d20261130","spend_usd":0.0042,"budget_usd":0,"exhausted":false,"ends":"2026-12-01T00:00:00Z"},
   "week":{"id":"w2026W49","spend_usd":0.0042,"budget_usd":0,"exhausted":false,"ends":"2026-12-07T00:00:00Z"},
   "month":{"id":"m202611","spend_usd":0.0042,"budget_usd":0,"exhausted":false,"ends":"2026-12-01T00:00:00Z"},"reset":null}}],
 "nats":false,"role":"operator","instance":"admin-x","generated_at":"2026-11-30T12:00:00Z"}`

func TestClientsTable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer op-secret":
			http.Error(w, `{"error":{"code":"unauthorized","message":"no"}}`, http.StatusUnauthorized)
		case r.Method == "GET" && r.URL.Path == "/admin/clients":
			_, _ = w.Write([]byte(cannedClients))
		case r.Method == "POST" && r.URL.Path == "/admin/clients/team-a/budget/reset":
			var all struct {
				Clients []json.RawMessage `json:"clients"`
			}
			_ = json.Unmarshal([]byte(cannedClients), &all)
			_, _ = w.Write(all.Clients[1])
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no client key nope"}}`))
		}
	}))
	defer srv.Close()
	t.Setenv(envAdminURL, srv.URL)
	t.Setenv(envAdminToken, "op-secret")

	tests := []struct {
		name    string
		args    []string
		stdout  string
		stderr  string
		wantErr string
	}{
		{
			name: "table",
			args: []string{"clients"},
			stdout: "" +
				"CLIENT  PLAN  REQ/MIN  TOK/MIN     IN FLIGHT  DAY USD                WEEK USD  MONTH USD     RESET\n" +
				"app     -     0/-      0/-         0/-        0.0000/-               0.0000/-  0.0000/-      -\n" +
				"team-a  pro   3.9/100  2000/10000  1/5        1.2000/1.00 exhausted  1.2000/-  1.2000/10.00  oncall 2026-11-29 08:15Z\n" +
				"team-b  free  3/10     120/-       0/-        0.0042/-               0.0042/-  0.0042/-      -\n",
			stderr: "warning: the admin service does not follow the switchyard_limits bucket (NATS unreachable): the figures may be stale\n",
		},
		{name: "raw JSON", args: []string{"clients", "--json"}, stdout: cannedClients},
		{name: "unknown client", args: []string{"clients", "nope"}, wantErr: "admin API: 404 not_found: no client key nope"},
		{name: "two clients", args: []string{"clients", "a", "b"}, wantErr: `clients: unexpected argument "b"`},
		{
			name:   "reset",
			args:   []string{"budget", "reset", "team-a"},
			stdout: "budget of team-a (plan pro) reset by oncall: day 1.2000/1.00 exhausted, month 1.2000/10.00 USD\n",
		},
		{name: "reset without a client", args: []string{"budget", "reset"}, wantErr: "budget reset: want exactly one client key id (see swctl clients)"},
		{name: "budget without reset", args: []string{"budget", "team-a"}, wantErr: "budget: want reset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := swctl(tt.args...)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out != tt.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, tt.stdout)
			}
			if tt.stderr != "" && errOut != tt.stderr {
				t.Errorf("stderr %q, want %q", errOut, tt.stderr)
			}
		})
	}
}

// TestClientsVerbs runs swctl clients and swctl budget reset against a
// real admin service while a stand-in proxy's plan limiter consumes on
// the switchyard_limits bucket.
func TestClientsVerbs(t *testing.T) {
	f := startFleetWith(t, `
clients:
  - {id: team-a, secret: env:T_CA, models: ["*"], plan: pro}
  - {id: team-b, secret: env:T_CB, models: ["*"], plan: free}
metering: {limits_interval: 50ms}
plans:
  pro: {requests_per_minute: 100, budget: {day: 1}}
  free: {requests_per_minute: 10}
`)
	t.Setenv(envAdminURL, f.adminURL)
	t.Setenv(envAdminToken, "ro-secret")

	lim, err := planlimit.New(planlimit.Options{Instance: "proxy-test", Conn: f.pnc, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.Bind(f.proxy.Resources().Limits); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = lim.Run(ctx) }()
	defer func() { cancel(); <-done }()
	pro := &planlimit.Limits{Plan: "pro", RequestsPerMinute: 100}
	pro.Budget.Day = 1
	for range 2 {
		tk, ref := lim.Admit("team-a", pro, 0)
		if ref != nil {
			t.Fatal(ref.Message)
		}
		lim.Done(tk, 10, 0.6, true)
	}

	var out string
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, err = swctl("clients")
		if err == nil && strings.Contains(out, "1.2000/1.00 exhausted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("clients never showed team-a's day budget exhausted: %v\n%s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out, "team-b  free") || !strings.Contains(out, "CLIENT") {
		t.Errorf("clients:\n%s", out)
	}

	for _, tt := range []struct{ args, want string }{
		{"budget reset team-a", "admin API: 403 forbidden"},
		{"budget reset nope -token op-secret", "admin API: 404 not_found"},
		{"budget reset team-b -token op-secret", "admin API: 409 no_budget"},
	} {
		if _, _, err := swctl(strings.Fields(tt.args)...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %s", tt.args, err, tt.want)
		}
	}
	out, _, err = swctl("budget", "reset", "team-a", "-token", "op-secret")
	if err != nil || out != "budget of team-a (plan pro) reset by ops: day 0.0000/1.00 USD\n" {
		t.Fatalf("budget reset: %v %q", err, out)
	}
	// the reset reaches the proxy through the bucket within milliseconds
	admitted := false
	for deadline := time.Now().Add(time.Second); !admitted && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if tk, ref := lim.Admit("team-a", pro, 0); ref == nil {
			lim.Done(tk, 0, 0, false)
			admitted = true
		}
	}
	if !admitted {
		t.Fatal("the proxy refuses team-a a second after the reset")
	}
	out, _, err = swctl("clients", "team-a", "--json")
	var one struct {
		Usage struct {
			Day struct {
				SpendUSD  float64 `json:"spend_usd"`
				Exhausted bool    `json:"exhausted"`
			} `json:"day"`
			Reset struct {
				By string `json:"by"`
			} `json:"reset"`
		} `json:"usage"`
	}
	if err != nil || json.Unmarshal([]byte(out), &one) != nil || one.Usage.Day.SpendUSD != 0 || one.Usage.Day.Exhausted || one.Usage.Reset.By != "ops" {
		t.Fatalf("clients team-a --json after the reset: %v %s", err, out)
	}
	out, _, err = swctl("events", "tail", "-since", "10m", "-kind", "budget", "-n", "1")
	if err != nil || !strings.Contains(out, "team-a (plan pro)") || !strings.Contains(out, "reset") {
		t.Fatalf("events tail -kind budget: %v\n%s", err, out)
	}
	t.Log("\n" + out)
}
