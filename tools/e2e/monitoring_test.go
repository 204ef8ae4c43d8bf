package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"switchyard.dev/shared/servicetest"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// The dashboard and the rules of deploy/ (deploy/README.md, "Metrics,
// dashboard and alerts").
const (
	dashboardFile = "../../deploy/grafana/switchyard-dashboard.json"
	rulesFile     = "../../deploy/prometheus/switchyard-rules.yml"
	rulesTestFile = "../../deploy/prometheus/switchyard-rules.test.yml"
)

// TestAlertRules: promtool accepts the rules, and their unit tests (every
// alert fires on the series meant to fire it, and not on its healthy
// neighbours) pass. promtool comes with Debian's prometheus package, which
// .ci/run installs.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testkit.MissingTool(t, "promtool not found on PATH; install it with `apt-get install prometheus` (.ci/run does) to run this test")
		return
	}
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// dashboard is what the tests read of the Grafana dashboard.
type dashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int                      `json:"id"`
		Type    string                   `json:"type"`
		Title   string                   `json:"title"`
		GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// TestDashboardJSON checks the dashboard statically: unique panel ids,
// panels inside the 24-column grid and not over one another, and a query
// in every panel that is not a row.
func TestDashboardJSON(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no uid or no panels", dashboardFile)
	}
	vars := map[string]bool{"__rate_interval": true, "__range": true, "__interval": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Fatalf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" || q.RefID == "" {
				t.Errorf("panel %q: a query without expr or refId", p.Title)
			}
			for _, m := range dashboardVar.FindAllStringSubmatch(q.Expr, -1) {
				if !vars[m[1]] {
					t.Errorf("panel %q: variable $%s is not defined", p.Title, m[1])
				}
			}
		}
	}
}

var dashboardVar = regexp.MustCompile(`\$\{?(\w+)`)

var metricName = regexp.MustCompile(`\bswitchyard_[a-z0-9_]+`)

// usedMetrics are the metric names in the dashboard's queries and the
// rules' expressions (histogram series by their family's name).
func usedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	add := func(where, expr string) {
		for _, n := range metricName.FindAllString(expr, -1) {
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				n = strings.TrimSuffix(n, suffix)
			}
			if !slices.Contains(used[n], where) {
				used[n] = append(used[n], where)
			}
		}
	}
	for _, p := range readDashboard(t).Panels {
		for _, q := range p.Targets {
			add("dashboard panel "+p.Title, q.Expr)
		}
	}
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Record, Alert, Expr string
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			add("rule "+r.Record+r.Alert, r.Expr)
		}
	}
	return used
}

// TestMonitoringMetricsExist: every metric the dashboard and the rules
// query is served by a real fleet (proxy, prober and admin on one NATS
// server, in front of the fake providers) after a little traffic: a
// failover from a key failing with 500 to one that serves, a stream, a
// chain whose first key is refused (a hold, an event), with prices, a
// plan's budget and a provider's budget configured.
func TestMonitoringMetricsExist(t *testing.T) {
	used := usedMetrics(t)
	if len(used) < 20 {
		t.Fatalf("only %d metric names found in the dashboard and the rules", len(used))
	}
	f := startSecFleetWith(t, secOptions{yaml: func(y string) string {
		y = strings.Replace(y, `- {id: team, secret: env:SY_CLIENT, models: ["*"]}`,
			`- {id: team, secret: env:SY_CLIENT, models: ["*"], plan: pro}`, 1)
		y = strings.Replace(y, "    type: openai\n", "    type: openai\n    budget: {day: 100}\n", 1)
		return y + `prices:
  - {provider: fake-openai, model: demo-model, input: 1, output: 2}
plans:
  pro: {budget: {day: 1000}}
`
	}})
	f.oa.AddRule(fakeprovider.Rule{Key: canaryK1, Path: "/chat/completions", Error: "openai.server_error"})
	f.an.AddRule(fakeprovider.Rule{Key: canaryK3, Error: "anthropic.invalid_api_key"})
	for i, body := range []string{
		`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"fake-openai/demo-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"fake-anthropic/demo-claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		if st, _, b := f.call(fmt.Sprintf("request %d", i), "/v1/chat/completions", body); st != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, st, b)
		}
	}
	if st, b := f.adm(http.MethodGet, "/admin/holds", ""); st != http.StatusOK {
		t.Fatalf("admin holds: %d %s", st, b)
	}
	urls := map[string]string{"proxy": f.proxyURL, "prober": f.proberURL, "admin": f.adminURL}
	var missing []string
	// Some series appear asynchronously (the admin's backlog every 5 s,
	// the events' lag once the hold event arrives).
	testkit.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		served := map[string]bool{}
		for name, u := range urls {
			text, err := servicetest.Scrape(u + "/metrics")
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			for line := range strings.SplitSeq(text, "\n") {
				if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
					family, _, _ := strings.Cut(rest, " ")
					served[family] = true
				}
			}
		}
		missing = missing[:0]
		for n, where := range used {
			if !served[n] {
				missing = append(missing, n+" (in "+strings.Join(where, ", ")+")")
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			return fmt.Errorf("not served by any service:\n%s", strings.Join(missing, "\n"))
		}
		return nil
	})
	t.Logf("%d metric names of the dashboard and the rules are served", len(used))
}

// TestUsageShowsFailuresAFailoverHid: key k1 answers 500 and k2 serves
// every request: the callers see only successes, and the usage report by
// key (from the records the proxy published, folded by the admin's
// recorder) shows k1's failed attempts under k1, with no request of its
// own, beside k2's requests.
func TestUsageShowsFailuresAFailoverHid(t *testing.T) {
	f := startSecFleet(t)
	f.oa.AddRule(fakeprovider.Rule{Key: canaryK1, Path: "/chat/completions", Error: "openai.server_error"})
	const requests = 3
	for i := range requests {
		if st, _, b := f.call(fmt.Sprintf("request %d", i), "/v1/chat/completions",
			`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`); st != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, st, b)
		}
	}
	// the proxy's attempts (the prober's checks list models)
	k1Calls := f.oa.CountCalls(func(c fakeprovider.Call) bool {
		return c.Key == canaryK1 && strings.HasSuffix(c.Path, "/chat/completions")
	})
	if k1Calls == 0 {
		t.Fatal("k1 was never tried")
	}
	type group struct {
		Key            map[string]string `json:"key"`
		Requests       int64             `json:"requests"`
		Errors         int64             `json:"errors"`
		Attempts       int64             `json:"attempts"`
		FailedAttempts int64             `json:"failed_attempts"`
	}
	testkit.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		st, b := f.adm(http.MethodGet, "/admin/usage?from=-1h&group_by=key", "")
		var a struct{ Groups []group }
		if err := json.Unmarshal(b, &a); st != http.StatusOK || err != nil {
			return fmt.Errorf("usage: %d %s", st, b)
		}
		by := map[string]group{}
		for _, g := range a.Groups {
			by[g.Key["key"]] = g
		}
		k1, k2 := by["fake-openai/k1"], by["fake-openai/k2"]
		if k1.Requests != 0 || k1.FailedAttempts != int64(k1Calls) || k1.Attempts != int64(k1Calls) ||
			k2.Requests != requests || k2.Errors != 0 || k2.Attempts != requests || k2.FailedAttempts != 0 {
			return fmt.Errorf("k1 %+v, k2 %+v; want k1's %d calls failed, no request, and k2's %d requests served", k1, k2, k1Calls, requests)
		}
		return nil
	})
}
