package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/bus"
)

// cannedRoute is the explanation the stand-in proxy answers for gpt-4o:
// two candidates (the second offline, a fallback), one step rejected.
var cannedRoute = bus.Explanation{
	Model: "gpt-4o", Route: "chain:default", Kind: "chain", Strategy: "least_latency", HashOn: "header:X-Session",
	Needs: []string{"tools", "vision"}, EstimatedInputTokens: 42, MaxOutputTokens: 512, Region: "eu", RegionRequired: true,
	Candidates: []bus.ExplainChoice{
		{Step: 0, Target: "openai/gpt-4o", Provider: "openai", Model: "gpt-4o", Region: "eu", Health: "healthy",
			LatencyMS: ptr(412.4), EstimatedCostUSD: ptr(0.00035), Capabilities: []string{"tools", "vision"},
			Keys: []bus.ExplainKey{{ID: "primary", State: bus.KeyAvailable, Headroom: []bus.ExplainWindow{
				{Kind: "requests", Limit: 20, Remaining: 12, Own: new(int64(4)), InFlight: 2, Reset: "2026-11-30T12:00:30Z"}, {Kind: "tokens", Limit: 1000, Remaining: 900, Reset: "2026-11-30T12:00:30Z"}}},
				{ID: "secondary", State: bus.KeyHeld, HoldID: "openai.secondary", Class: "rate_limit", Until: "2026-11-30T12:00:00Z"},
				{ID: "third", State: bus.KeyNoHeadroom, Until: "2026-11-30T12:00:30Z", Headroom: []bus.ExplainWindow{
					{Kind: "requests", Limit: 20, Remaining: 0, Reset: "2026-11-30T12:00:30Z"}}}}},
		{Step: 2, Target: "azure/gpt-4o", Provider: "azure", Model: "gpt-4o", Region: "eu", Health: "offline", Fallback: true,
			Keys: []bus.ExplainKey{{ID: "k1", State: bus.KeyRamping}}},
	},
	Rejected: []bus.ExplainChoice{
		{Step: 1, Target: "local/llama", Provider: "local", Model: "llama", Health: "unknown", Reason: "lacks_capability", Detail: "lacks vision"},
	},
}

// explainResponder is a stand-in proxy answering route explanations in
// the proxies' queue group; it keeps the requests it got.
type explainResponder struct {
	mu  sync.Mutex
	got []bus.ExplainRequest
}

func (x *explainResponder) last() (int, bus.ExplainRequest) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.got) == 0 {
		return 0, bus.ExplainRequest{}
	}
	return len(x.got), x.got[len(x.got)-1]
}

func startExplainResponder(t *testing.T, nc *nats.Conn) *explainResponder {
	t.Helper()
	x := &explainResponder{}
	expl, err := json.Marshal(cannedRoute)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.QueueSubscribe(bus.ExplainSubject, bus.ExplainQueue, func(m *nats.Msg) {
		var q bus.ExplainRequest
		_ = json.Unmarshal(m.Data, &q)
		x.mu.Lock()
		x.got = append(x.got, q)
		x.mu.Unlock()
		r := bus.ExplainReply{V: bus.ExplainVersion, Instance: "proxy-a1", RoutingVersion: 3}
		switch {
		case q.Model != "gpt-4o":
			r.Error = &bus.ExplainError{Status: 404, Code: "model_not_found", Message: "the model `" + q.Model + "` does not exist on this gateway"}
		case q.Client == "team-b":
			r.Error = &bus.ExplainError{Status: 403, Code: "model_not_allowed", Message: `client "team-b" may not use the model ` + "`gpt-4o`"}
		default:
			r.Explanation = expl
		}
		b, _ := json.Marshal(r)
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return x
}

// swctlIn is swctl with stdin.
func swctlIn(stdin string, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), err
}

// TestRouteExplain runs swctl route explain against a real admin service
// whose NATS has a stand-in proxy answering explanations.
func TestRouteExplain(t *testing.T) {
	f := startFleet(t)
	t.Setenv(envAdminURL, f.adminURL)
	t.Setenv(envAdminToken, "ro-secret")

	// no proxy answers yet
	if _, _, err := swctl("route", "explain", "gpt-4o"); err == nil || !strings.HasPrefix(err.Error(), "admin API: 503 no_proxy: no proxy answered") {
		t.Fatalf("without a proxy: %v", err)
	}

	x := startExplainResponder(t, f.pnc)
	dir := t.TempDir()
	bodyFile := filepath.Join(dir, "body.json")
	body := `{"model":"gpt-4o","max_tokens":512,"tools":[{"name":"t"}],"messages":[{"role":"user","content":"hi"}]}`
	if err := os.WriteFile(bodyFile, []byte(body+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	want := "" +
		"gpt-4o → chain:default  kind chain  strategy least_latency  hash_on header:X-Session  fail_closed false  needs tools,vision  region eu (required)\n" +
		"answered by proxy-a1 (routing version 3); estimated input tokens 42, max output 512\n" +
		"\n" +
		"#  STEP  TARGET         HEALTH              LATENCY MS  EST. COST USD  KEYS\n" +
		"1  0     openai/gpt-4o  healthy             412         0.000350       primary:available[requests 10/20 own 2], secondary:held, third:headroom[requests 0/20 until 2026-11-30T12:00:30Z]\n" +
		"2  2     azure/gpt-4o   offline (fallback)  -           -              k1:ramping\n" +
		"\n" +
		"REJECTED  TARGET       REASON            DETAIL\n" +
		"step 1    local/llama  lacks_capability  lacks vision\n"
	out, _, err := swctl("route", "explain", "gpt-4o", "--client", "team-a", "--body", bodyFile,
		"--header", "X-Switchyard-Region=eu", "--header", "X-Session=s=1", "--endpoint", "messages")
	if err != nil {
		t.Fatal(err)
	}
	if out != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}
	n, q := x.last()
	if n != 1 || q.V != bus.ExplainVersion || q.Model != "gpt-4o" || q.Client != "team-a" || q.Endpoint != "messages" ||
		string(q.Body) != body || len(q.Headers) != 2 || q.Headers["X-Switchyard-Region"] != "eu" || q.Headers["X-Session"] != "s=1" {
		t.Fatalf("the proxy got %d requests, the last %+v (body %s)", n, q, q.Body)
	}

	// --json: the admin API's answer as it came
	out, _, err = swctl("route", "explain", "gpt-4o", "--json")
	var raw struct {
		Instance       string          `json:"instance"`
		RoutingVersion int             `json:"routing_version"`
		Explanation    json.RawMessage `json:"explanation"`
	}
	canned, _ := json.Marshal(cannedRoute)
	if err != nil || json.Unmarshal([]byte(out), &raw) != nil || raw.Instance != "proxy-a1" || raw.RoutingVersion != 3 || string(raw.Explanation) != string(canned) {
		t.Fatalf("--json: %v %s", err, out)
	}

	// the body from standard input, the model from it
	out, err = swctlIn(body, "route", "explain", "--body", "-")
	if _, q := x.last(); err != nil || !strings.HasPrefix(out, "gpt-4o → chain:default") || q.Model != "gpt-4o" || string(q.Body) != body {
		t.Fatalf("--body -: %v %+v\n%s", err, q, out)
	}

	before, _ := x.last()
	for _, tt := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{args: []string{"route", "explain", "nope"}, want: "admin API: 404 model_not_found: the model `nope` does not exist on this gateway"},
		{args: []string{"route", "explain", "gpt-4o", "--client", "team-b"}, want: "admin API: 403 model_not_allowed: client \"team-b\" may not use the model `gpt-4o`"},
		{args: []string{"route", "explain", "gpt-4o", "--body", "-"}, stdin: `[1]`, want: "admin API: 400 bad_request: body must be a JSON object"},
		{args: []string{"route", "explain", "gpt-4o", "--token", "nope"}, want: "admin API: 401 unauthorized: invalid admin token"},
		{args: []string{"route", "explain", "gpt-4o", "--body", "-"}, stdin: `{"model":`, want: "route explain: --body - is not valid JSON"},
		{args: []string{"route", "explain", "gpt-4o", "--body", filepath.Join(dir, "absent.json")}, want: "route explain: --body: open "},
		{args: []string{"route", "explain", "gpt-4o", "--header", "X-Session"}, want: `invalid value "X-Session" for flag -header: want K=V`},
		{args: []string{"route", "explain"}, want: `route explain: want a model (or --body with a "model" field)`},
		{args: []string{"route", "explain", "a", "b"}, want: `route explain: unexpected argument "b"`},
		{args: []string{"route", "show"}, want: "route: want explain"},
	} {
		_, err := swctlIn(tt.stdin, tt.args...)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want %s", tt.args, err, tt.want)
		}
	}
	// 2 answered by the proxy with an error; the rest never reached it
	if after, _ := x.last(); after != before+2 {
		t.Errorf("the proxy got %d requests, want 2", after-before)
	}
}
