package admin

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/headroom"
	"switchyard.dev/shared/testkit"
)

// TestProviderHeadroom: a proxy's headroom report on
// switchyard.headroom.<provider> shows in the provider status under its
// key (by model), with its share; a window whose reset passed shows whole.
func TestProviderHeadroom(t *testing.T) {
	e := startEnv(t, true)
	now := time.Now().UTC()
	rep := headroom.Report{Version: 1, Provider: "openai", Instance: "proxy-1", At: now, Slots: []headroom.ReportSlot{
		{Key: "primary", Model: "gpt-4o", Windows: []headroom.ReportWindow{
			{Kind: "requests", Limit: 20, Remaining: 5, Reset: now.Add(30 * time.Second), At: now},
			{Kind: "tokens", Limit: 1000, Remaining: 0, Reset: now.Add(-time.Second), At: now.Add(-time.Minute)},
		}},
	}}
	e.publishHeadroom(rep, func(r reply) error {
		var st struct {
			Providers []struct {
				Name string
				Keys []struct {
					ID       string
					Headroom []struct {
						Model, Kind      string
						Limit, Remaining int64
						Share            *float64
						Reset            time.Time
					}
				}
			}
		}
		if err := json.Unmarshal(r.raw, &st); err != nil {
			return err
		}
		for _, k := range st.Providers[0].Keys {
			if k.ID == "secondary" && len(k.Headroom) > 0 {
				return fmt.Errorf("secondary shows primary's headroom: %s", r.raw)
			}
			if k.ID != "primary" {
				continue
			}
			if len(k.Headroom) != 2 {
				return fmt.Errorf("primary's headroom: %s", r.raw)
			}
			req, tok := k.Headroom[0], k.Headroom[1]
			if req.Model != "gpt-4o" || req.Kind != "requests" || req.Remaining != 5 || req.Share == nil || *req.Share != 0.25 ||
				!req.Reset.Equal(rep.Slots[0].Windows[0].Reset.Truncate(0)) {
				return fmt.Errorf("requests window: %+v", req)
			}
			if tok.Kind != "tokens" || tok.Remaining != 1000 || *tok.Share != 1 {
				return fmt.Errorf("a window past its reset is whole: %+v", tok)
			}
			if strings.Contains(string(r.raw), "sk-") {
				t.Fatalf("the status shows a secret: %s", r.raw)
			}
			return nil
		}
		return fmt.Errorf("no key primary: %s", r.raw)
	})
}

// publishHeadroom publishes rep as a proxy would until the provider status
// passes check (the admin service subscribes as it starts).
func (e *env) publishHeadroom(rep headroom.Report, check func(reply) error) {
	e.t.Helper()
	data, _ := json.Marshal(rep)
	testkit.CheckFor(e.t, testTimeout, 20*time.Millisecond, func() error {
		if err := e.pnc.Publish(headroom.Subject(rep.Provider), data); err != nil {
			return err
		}
		return check(e.do("GET", "/admin/providers/status", readToken, nil))
	})
}
