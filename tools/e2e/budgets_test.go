package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"
)

// TestBudgetSpendEqualsUsageRollups: the day budget's spend the admin
// shows for a client (the proxies' plan counters in switchyard_limits)
// equals the cost the usage rollups hold for that client and day (the
// recorder's fold of the usage records): the two numbers a team bills and
// limits from agree.
func TestBudgetSpendEqualsUsageRollups(t *testing.T) {
	f := startSecFleetWith(t, secOptions{yaml: func(y string) string {
		y = strings.Replace(y, `- {id: team, secret: env:SY_CLIENT, models: ["*"]}`,
			`- {id: team, secret: env:SY_CLIENT, models: ["*"], plan: pro}`, 1)
		return y + `prices:
  - {provider: fake-openai, model: demo-model, input: 1000, output: 2000}
plans:
  pro: {budget: {day: 1000}}
`
	}})
	const requests = 20
	for i := range requests {
		if st, _, b := f.call(fmt.Sprintf("chat %d", i), "/v1/chat/completions",
			`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`); st != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, st, b)
		}
	}
	dayStart := time.Now().UTC().Truncate(24 * time.Hour)
	var spend, rolled float64
	testkit.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		st, b := f.adm(http.MethodGet, "/admin/clients/team", "")
		var c struct {
			Usage struct {
				Day struct {
					Spend float64 `json:"spend_usd"`
				} `json:"day"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &c); st != http.StatusOK || err != nil {
			return fmt.Errorf("clients: %d %s", st, b)
		}
		spend = c.Usage.Day.Spend
		st, b = f.adm(http.MethodGet, "/admin/usage?client=team&from="+url.QueryEscape(dayStart.Format(time.RFC3339)), "")
		var u struct {
			RolledUp int64 `json:"rolled_up"`
			Totals   struct {
				Requests int64    `json:"requests"`
				Cost     *float64 `json:"cost_usd"`
			} `json:"totals"`
		}
		if err := json.Unmarshal(b, &u); st != http.StatusOK || err != nil {
			return fmt.Errorf("usage: %d %s", st, b)
		}
		if u.Totals.Requests != requests || u.RolledUp != requests || u.Totals.Cost == nil {
			return fmt.Errorf("usage: %d requests, %d rolled up, cost %v", u.Totals.Requests, u.RolledUp, u.Totals.Cost)
		}
		rolled = *u.Totals.Cost
		if spend == 0 || math.Abs(spend-rolled) > 1e-9 {
			return fmt.Errorf("the day's budget spend %.9f, the rollups' cost %.9f", spend, rolled)
		}
		return nil
	})
	t.Logf("day spend %.6f USD = rollups' cost %.6f USD over %d requests", spend, rolled, requests)
}
