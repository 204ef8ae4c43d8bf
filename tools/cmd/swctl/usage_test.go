package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	usagerec "switchyard.dev/shared/usage"
)

// cannedUsage is an answer of GET /admin/usage: two groups in one hour
// bucket, one of them with a cost unknown, one with no known cost at all.
const cannedUsage = `{"from":"2026-11-30T00:00:00Z","to":"2026-11-30T12:00:00Z","group_by":["client","model"],"interval":"hour",
 "filters":{"client":["app","ci"]},"limit":5,"scanned":7,"matched":7,"skipped":0,"truncated":false,"max_scanned":2000000,
 "totals":{"requests":7,"errors":2,"error_rate":0.2857,"tokens":{"input":1000,"output":500,"cached_input":200,"cache_write":0,"reasoning":30,"total":1730},
   "cost_usd":0.0125,"cost_unknown_requests":3,"tokens_estimated_requests":0,"latency_ms":{"p50":250,"p95":1830.5},"ttft_ms":null,
   "streams":0,"streams_incomplete":0,"cancelled":0},
 "groups":[
  {"bucket":"2026-11-30T09:00:00Z","key":{"client":"app","model":"gpt-4o"},"requests":4,"errors":1,"error_rate":0.25,
   "tokens":{"input":900,"output":450,"cached_input":200,"cache_write":0,"reasoning":30,"total":1580},
   "cost_usd":0.0125,"cost_unknown_requests":0,"tokens_estimated_requests":0,"latency_ms":{"p50":250,"p95":1830.5},"ttft_ms":null,
   "streams":0,"streams_incomplete":0,"cancelled":0},
  {"bucket":"2026-11-30T09:00:00Z","key":{"client":"ci","model":""},"requests":3,"errors":1,"error_rate":0.3333,
   "tokens":{"input":100,"output":50,"cached_input":0,"cache_write":0,"reasoning":0,"total":150},
   "cost_usd":null,"cost_unknown_requests":3,"tokens_estimated_requests":0,"latency_ms":{"p50":90,"p95":120},"ttft_ms":null,
   "streams":0,"streams_incomplete":0,"cancelled":0}],
 "groups_omitted":0}`

func TestUsageTable(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/admin/usage" || r.Header.Get("Authorization") != "Bearer op-secret" {
			http.Error(w, `{"error":{"code":"unauthorized","message":"no"}}`, http.StatusUnauthorized)
			return
		}
		asked = append(asked, r.URL.RawQuery)
		if r.URL.Query().Get("group_by") == "colour" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"code":"bad_request","message":"group_by: unknown dimension \"colour\""}}`))
			return
		}
		_, _ = w.Write([]byte(cannedUsage))
	}))
	defer srv.Close()
	t.Setenv(envAdminURL, srv.URL)
	t.Setenv(envAdminToken, "op-secret")

	tests := []struct {
		name    string
		args    []string
		query   string
		stdout  string
		wantErr string
	}{
		{
			name:  "table",
			args:  []string{"usage", "--from", "-12h", "--by", "client,model", "--interval", "hour", "--client", "app,ci", "--limit", "5"},
			query: "client=app%2Cci&from=-12h&group_by=client%2Cmodel&interval=hour&limit=5",
			stdout: "" +
				"BUCKET             CLIENT  MODEL   REQUESTS  ERRORS     TOKENS IN  TOKENS OUT  COST USD           P50    P95\n" +
				"2026-11-30 09:00Z  app     gpt-4o  4         1 (25.0%)  1100       480         0.0125             250ms  1.83s\n" +
				"2026-11-30 09:00Z  ci      -       3         1 (33.3%)  100        50          unknown            90ms   120ms\n" +
				"TOTAL                              7         2 (28.6%)  1200       530         0.0125 +3 unknown  250ms  1.83s\n",
		},
		{
			name:   "raw JSON",
			args:   []string{"usage", "--json", "--provider", "openai", "--model", "gpt-4o", "--to", "now"},
			query:  "model=gpt-4o&provider=openai&to=now",
			stdout: cannedUsage,
		},
		{
			name:    "the API names a bad parameter",
			args:    []string{"usage", "--by", "colour"},
			query:   "group_by=colour",
			wantErr: `admin API: 400 bad_request: group_by: unknown dimension "colour"`,
		},
		{
			name:    "stray argument",
			args:    []string{"usage", "openai"},
			wantErr: `usage: unexpected argument "openai"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked = nil
			out, _, err := swctl(tt.args...)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err %v, want %s", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if tt.query != "" && (len(asked) != 1 || asked[0] != tt.query) {
				t.Errorf("asked %q, want %q", asked, tt.query)
			}
			if tt.wantErr == "" && out != tt.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, tt.stdout)
			}
		})
	}
}

// TestUsageVerb runs swctl usage against a real admin service reading
// records published to SWITCHYARD_USAGE.
func TestUsageVerb(t *testing.T) {
	f := startFleet(t)
	t.Setenv(envAdminURL, f.adminURL)
	t.Setenv(envAdminToken, "ro-secret") // the read role suffices

	js, err := jetstream.New(f.pnc)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i, p := range []struct {
		provider, model string
		status          int
		cost            *float64
	}{
		{"openai", "gpt-4o", 200, ptr(0.002)},
		{"openai", "gpt-4o", 429, nil},
		{"anthropic", "claude-x", 200, ptr(0.01)},
	} {
		r := usagerec.Record{V: usagerec.SchemaVersion, RequestID: fmt.Sprintf("req-%d", i), At: now.Add(-time.Minute), ClientID: "app",
			Provider: p.provider, Model: p.model, KeyID: "k1", Status: p.status, CostUSD: p.cost, LatencyMS: float64(100 * (i + 1)),
			Tokens: usagerec.Tokens{Input: 10, Output: 5}}
		b, _ := json.Marshal(r)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.Publish(ctx, usagerec.Subject(r.Provider, r.ClientID), b, jetstream.WithMsgID(r.RequestID))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}

	out, _, err := swctl("usage", "--from", "-1h", "--by", "provider,model")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "PROVIDER") ||
		!strings.HasPrefix(lines[1], "anthropic") || !strings.Contains(lines[1], "0.0100") ||
		!strings.HasPrefix(lines[2], "openai") || !strings.Contains(lines[2], "1 (50.0%)") || !strings.Contains(lines[2], "0.0020 +1 unknown") ||
		!strings.HasPrefix(lines[3], "TOTAL") {
		t.Fatalf("table:\n%s", out)
	}

	out, _, err = swctl("usage", "--from", "-1h", "--provider", "openai", "--json")
	var a struct {
		Matched int `json:"matched"`
		Totals  struct {
			Requests int `json:"requests"`
		} `json:"totals"`
	}
	if err != nil || json.Unmarshal([]byte(out), &a) != nil || a.Matched != 2 || a.Totals.Requests != 2 {
		t.Fatalf("--json: %v %s", err, out)
	}

	if _, _, err := swctl("usage", "--interval", "week"); err == nil || !strings.Contains(err.Error(), "400 bad_request: interval:") {
		t.Fatalf("bad interval: %v", err)
	}
	if out, _, err := swctl("usage", "--from", "-1h", "--client", "nobody"); err != nil || out != "no usage in this range\n" {
		t.Fatalf("no usage: %v %q", err, out)
	}
	t.Setenv(envAdminToken, "")
	if _, _, err := swctl("usage"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("no token: %v", err)
	}
}

func ptr(v float64) *float64 { return &v }
