package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestActivationRefusedByAProxy: a version that loads on the admin's host
// but not on the proxy's (a variable set on the admin host only) is
// answered as what it is: applied by the admin and the prober, refused
// by the proxy with the reason, which keeps routing with the version
// before; GET /admin/config/instances says the same.
func TestActivationRefusedByAProxy(t *testing.T) {
	f := startSecFleetWith(t, secOptions{proxyEnv: func(env []string) []string {
		return slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "SWITCHYARD_SECRET_NEW_KEY=") })
	}})
	status, b := f.adm(http.MethodGet, "/admin/config", "")
	if status != http.StatusOK {
		t.Fatalf("GET /admin/config: %d %s", status, b)
	}
	var active struct {
		Version  int    `json:"version"`
		Document string `json:"document"`
	}
	_ = json.Unmarshal(b, &active)
	doc := strings.Replace(active.Document, "- {id: k2, secret: 'env:SY_K2'}", "- {id: k2, secret: 'env:SY_K2'}\n      - {id: k5, secret: 'env:SWITCHYARD_SECRET_NEW_KEY'}", 1)
	if doc == active.Document {
		t.Fatalf("the active document has no key k2 line:\n%s", active.Document)
	}
	body, _ := json.Marshal(map[string]any{"document": doc, "comment": "a key the proxy host lacks"})
	status, b = f.adm(http.MethodPost, "/admin/config/activate", string(body))
	if status != http.StatusOK {
		t.Fatalf("activate: %d %s", status, b)
	}
	type outcome struct {
		Instance, Service, Outcome, Error string
		RoutingVersion                    int `json:"routing_version"`
	}
	var w struct {
		Version struct {
			Version int `json:"version"`
		} `json:"version"`
		Instances []outcome `json:"instances"`
		Summary   struct{ Applied, Refused, Pending int }
	}
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	check := func(what string, list []outcome, sum struct{ Applied, Refused, Pending int }, raw []byte) {
		t.Helper()
		by := map[string]outcome{}
		for _, o := range list {
			by[o.Service] = o
		}
		if p := by["proxy"]; p.Outcome != "refused" || p.RoutingVersion != active.Version ||
			!strings.Contains(p.Error, "providers[0].keys[2].secret: env:SWITCHYARD_SECRET_NEW_KEY is not set") {
			t.Errorf("%s: the proxy: %+v (%s)", what, p, raw)
		}
		for _, svc := range []string{"admin", "prober"} {
			if o := by[svc]; o.Outcome != "applied" || o.RoutingVersion != w.Version.Version {
				t.Errorf("%s: the %s: %+v (%s)", what, svc, o, raw)
			}
		}
		if len(list) != 3 || sum.Applied != 2 || sum.Refused != 1 || sum.Pending != 0 {
			t.Errorf("%s: %d instances, summary %+v (%s)", what, len(list), sum, raw)
		}
	}
	check("activate", w.Instances, w.Summary, b)
	status, b = f.adm(http.MethodGet, "/admin/config/instances", "")
	var g struct {
		Instances []outcome `json:"instances"`
		Summary   struct{ Applied, Refused, Pending int }
	}
	if err := json.Unmarshal(b, &g); status != http.StatusOK || err != nil {
		t.Fatalf("instances: %d %s", status, b)
	}
	check("instances", g.Instances, g.Summary, b)
	f.leaks.verify(t)
}
