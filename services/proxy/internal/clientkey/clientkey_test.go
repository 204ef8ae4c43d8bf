package clientkey

import (
	"testing"

	"github.com/valyala/fasthttp"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/config"
)

// headers are a request's headers for Authenticate.
type headers map[string]string

func (h headers) of() *fasthttp.RequestHeader {
	var rh fasthttp.RequestHeader
	for k, v := range h {
		rh.Set(k, v)
	}
	return &rh
}

func keysOf(t *testing.T, tweak func(*config.Config)) (*Keys, *route.Table) {
	t.Helper()
	cfg := config.Defaults()
	cfg.Providers = []config.Provider{
		{Name: "p", Type: "openai", BaseURL: "http://127.0.0.1:1/v1", Keys: []config.Key{{ID: "k", Weight: 1, Value: config.NewSecret("up")}},
			Models: []config.Model{{Name: "m1", Kind: "chat"}, {Name: "m2", Kind: "chat"}}},
		{Name: "q", Type: "anthropic", BaseURL: "http://127.0.0.1:1", Keys: []config.Key{{ID: "k", Weight: 1, Value: config.NewSecret("up2")}},
			Models: []config.Model{{Name: "c1", Kind: "chat"}}},
	}
	cfg.Plans = map[string]config.Plan{"small": {Models: []string{"p/m1", "q/*"}}}
	cfg.Clients = []config.ClientKey{
		{ID: "all", Models: []string{"*"}, Value: config.NewSecret("sk-all")},
		{ID: "p-only", Models: []string{"p/*"}, Value: config.NewSecret("sk-p")},
		{ID: "planned", Models: []string{"*"}, Plan: "small", Value: config.NewSecret("sk-planned")},
	}
	if tweak != nil {
		tweak(cfg)
	}
	table, err := route.Build(cfg, route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return New(cfg, table, cfg.ClientKeyRequired()), table
}

// TestAuthenticate: a key is found from a Bearer token or x-api-key; with
// keys required a missing or unknown one is refused, and without, its
// caller is anonymous.
func TestAuthenticate(t *testing.T) {
	ks, _ := keysOf(t, nil)
	for _, c := range []struct {
		h    headers
		id   string
		pass bool
	}{
		{headers{"Authorization": "Bearer sk-all"}, "all", true},
		{headers{"Authorization": "bearer sk-p"}, "p-only", true},
		{headers{"X-Api-Key": "sk-planned"}, "planned", true},
		{headers{"Authorization": "Basic sk-all"}, "", false}, // not a bearer token: no x-api-key either
		{headers{"Authorization": "Bearer sk-al"}, "", false},
		{headers{}, "", false},
	} {
		k, ok := ks.Authenticate(c.h.of())
		if ok != c.pass || (k == nil) != (c.id == "") || (k != nil && k.ID != c.id) {
			t.Errorf("%v: key %+v, %v; want %q, %v", c.h, k, ok, c.id, c.pass)
		}
	}
	off := false
	open, _ := keysOf(t, func(c *config.Config) { c.Proxy.RequireClientKey = &off })
	if k, ok := open.Authenticate(headers{"Authorization": "Bearer nope"}.of()); k != nil || !ok {
		t.Errorf("keys not required, unknown key: %+v, %v; want anonymous", k, ok)
	}
	if k, ok := open.Authenticate(headers{"Authorization": "Bearer sk-p"}.of()); k == nil || k.ID != "p-only" || !ok {
		t.Errorf("keys not required, known key: %+v, %v; want p-only", k, ok)
	}
}

// TestAllows: a key may use what its own list and its plan's both allow.
func TestAllows(t *testing.T) {
	ks, table := keysOf(t, nil)
	allows := func(id, model string) bool {
		rt, ok := table.Resolve(model)
		if !ok {
			t.Fatalf("%s does not resolve", model)
		}
		return ks.ByID(id).Allows(model, rt.Steps)
	}
	for _, c := range []struct {
		id, model string
		want      bool
	}{
		{"all", "p/m2", true}, {"all", "q/c1", true},
		{"p-only", "p/m2", true}, {"p-only", "q/c1", false},
		{"planned", "p/m1", true}, {"planned", "p/m2", false}, {"planned", "q/c1", true},
	} {
		if got := allows(c.id, c.model); got != c.want {
			t.Errorf("%s uses %s: %v, want %v", c.id, c.model, got, c.want)
		}
	}
	if !ks.ByID("all").AllowsAll() || ks.ByID("planned").AllowsAll() || ks.ByID("p-only").AllowsAll() {
		t.Error("AllowsAll: want the key allowed every model alone")
	}
	if !ks.ByID("p-only").AllowsProvider("p") || ks.ByID("p-only").AllowsProvider("q") || ks.ByID("planned").AllowsProvider("p") {
		t.Error("AllowsProvider: want p-only on p alone, planned on neither whole provider p")
	}
	if ks.ByID("nobody") != nil {
		t.Error("an unknown id has a key")
	}
}
