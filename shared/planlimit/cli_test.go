package planlimit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"
)

// TestNatsCLI: what the package doc shows operators is what
// `nats kv ls switchyard_limits` lists against a running fleet.
func TestNatsCLI(t *testing.T) {
	bin := testkit.NatsCLI(t)
	clk := newClock(start)
	s := startServer(t)
	a := startMember(t, s.ClientURL(), "proxy-host1-4f2a1c", clk, memberOpts{})
	b := startMember(t, s.ClientURL(), "proxy-host2-9b03e7", clk, memberOpts{})
	lim := &Limits{Plan: "pro"}
	lim.Budget.Day = 1
	for _, m := range []*member{a, b} {
		tk, _ := m.Admit("team-a", lim, 0)
		m.Done(tk, 1200, 0.6, true)
	}
	held, _ := a.Admit("team-a", lim, 0) // in flight on a (the reports of $1.20 are not in yet)
	defer a.Done(held, 0, 0, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	home := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--server", s.ClientURL()}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nats %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	ls := func() []string {
		lines := strings.Fields(run("kv", "ls", "switchyard_limits"))
		sort.Strings(lines)
		return lines
	}
	m := clk.Minute()
	want := []string{
		"team-a.exhausted.d20250115",
		"team-a.inflight.proxy-host1-4f2a1c",
		fmt.Sprintf("team-a.req.m%d.proxy-host1-4f2a1c", m),
		fmt.Sprintf("team-a.req.m%d.proxy-host2-9b03e7", m),
		fmt.Sprintf("team-a.tok.m%d.proxy-host1-4f2a1c", m),
		fmt.Sprintf("team-a.tok.m%d.proxy-host2-9b03e7", m),
		"team-a.usd.d20250115.proxy-host1-4f2a1c",
		"team-a.usd.d20250115.proxy-host2-9b03e7",
		"team-a.usd.m202501.proxy-host1-4f2a1c",
		"team-a.usd.m202501.proxy-host2-9b03e7",
		"team-a.usd.w2025W03.proxy-host1-4f2a1c",
		"team-a.usd.w2025W03.proxy-host2-9b03e7",
	}
	testkit.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if got := ls(); !slices.Equal(got, want) {
			return fmt.Errorf("nats kv ls switchyard_limits:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		return nil
	})
	var exh Exhaustion
	if err := json.Unmarshal([]byte(run("kv", "get", "switchyard_limits", "team-a.exhausted.d20250115", "--raw")), &exh); err != nil {
		t.Fatal(err)
	}
	if exh.Version != 1 || exh.Client != "team-a" || exh.PeriodID != "d20250115" || exh.BudgetUSD != 1 {
		t.Errorf("exhausted key: %+v", exh)
	}
	if got := strings.TrimSpace(run("kv", "get", "switchyard_limits", want[7], "--raw")); got != `{"v":1,"usd":0.6}` {
		t.Errorf("%s = %s", want[7], got)
	}

	// After a reset: the reset key, and no exhausted key. b resets once it
	// has applied a's report and the exhausted key.
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		c := b.client("team-a")
		c.mu.Lock()
		defer c.mu.Unlock()
		if s := c.rawSpend(0, clk.periods()); s != 1.2 || !c.exhausted(0, clk.periods()) {
			return fmt.Errorf("b sees $%g spent, exhausted key %v", s, c.exhausted(0, clk.periods()))
		}
		return nil
	})
	if err := b.ResetBudget(ctx, "team-a", "alice"); err != nil {
		t.Fatal(err)
	}
	want = append([]string{"team-a.reset"}, want[1:]...)
	sort.Strings(want)
	if got := ls(); !slices.Equal(got, want) {
		t.Errorf("after the reset, nats kv ls switchyard_limits:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var rec ResetRecord
	if err := json.Unmarshal([]byte(run("kv", "get", "switchyard_limits", "team-a.reset", "--raw")), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.By != "alice" || rec.BaselineUSD["d20250115"] != 1.2 || rec.BaselineUSD["w2025W03"] != 1.2 || rec.BaselineUSD["m202501"] != 1.2 {
		t.Errorf("reset key: %+v", rec)
	}
	if testing.Verbose() {
		t.Logf("nats kv ls switchyard_limits:\n%s", strings.Join(ls(), "\n"))
		t.Logf("team-a.reset: %s", run("kv", "get", "switchyard_limits", "team-a.reset", "--raw"))
		t.Logf("exhausted: %+v", exh)
	}
}
