package prober

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/provider"
)

// target is one configured provider as the prober checks it.
type target struct {
	name    string
	typ     string
	adapter *provider.Adapter
	keys    []config.Key      // by priority, highest first; empty for keyless providers
	models  map[string]string // configured model name -> upstream name
	spec    checkSpec
	// conf is what decides where and how the target's checks and
	// discoveries are sent: type, base URL, API version, headers and the
	// check spec but its interval. A unit whose target keeps its conf and
	// interval across a new routing configuration is unchanged.
	conf string
}

// checkSpec is a provider's active check with the prober defaults applied.
type checkSpec struct {
	// enabled is false when the provider has no check; reason says why
	// (recorded as the status reason, never guessed around).
	enabled  bool
	reason   string
	method   string
	path     string // as recorded in health records
	url      string
	body     []byte
	expected []int // empty: any 2xx
	interval time.Duration
	timeout  time.Duration
	perKey   bool
	// discover: the provider's models are discovered
	// (health_check.discovery, else as the check is enabled).
	discover bool
}

// buildTargets builds the targets of cfg's providers, with the checks'
// defaults from pc.
func buildTargets(cfg *config.Config, pc config.Prober) []*target {
	var out []*target
	for _, p := range cfg.Providers {
		t := &target{
			name:    p.Name,
			typ:     p.Type,
			adapter: provider.New(p.Type, p.BaseURL, p.APIVersion, p.Headers),
			models:  map[string]string{},
			spec:    specFor(pc, p),
		}
		t.conf = confOf(p, t.spec)
		for _, k := range p.Keys {
			if k.IsEnabled() { // a key switched off is not checked
				t.keys = append(t.keys, k)
			}
		}
		if len(p.Keys) > 0 && len(t.keys) == 0 { // not a keyless server: nothing to check with
			t.spec.enabled, t.spec.reason = false, "every key is switched off (keys[].enabled: false)"
			t.spec.discover = false
		}
		sortKeys(t.keys)
		for _, m := range p.Models {
			up := m.Upstream
			if up == "" {
				up = m.Name
			}
			t.models[m.Name] = up
		}
		out = append(out, t)
	}
	return out
}

// confOf is target.conf.
func confOf(p config.Provider, s checkSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "type=%q base=%q api=%q", p.Type, p.BaseURL, p.APIVersion)
	for _, h := range slices.Sorted(maps.Keys(p.Headers)) {
		fmt.Fprintf(&b, " header %q=%q", h, p.Headers[h])
	}
	fmt.Fprintf(&b, " check enabled=%t reason=%q %s %q url=%q body=%q expected=%v timeout=%s per_key=%t",
		s.enabled, s.reason, s.method, s.path, s.url, s.body, s.expected, s.timeout, s.perKey)
	return b.String()
}

func sortKeys(keys []config.Key) {
	for i := 1; i < len(keys); i++ { // stable insertion sort by priority, highest first
		for j := i; j > 0 && keys[j].Priority > keys[j-1].Priority; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
}

func specFor(pc config.Prober, p config.Provider) checkSpec {
	hc := p.HealthCheck
	s := checkSpec{
		method:   strings.ToUpper(hc.Method),
		expected: hc.ExpectedStatuses,
		interval: hc.Interval,
		timeout:  hc.Timeout,
		perKey:   hc.PerKey && len(p.Keys) > 0,
		body:     []byte(hc.Body),
		discover: hc.DiscoveryEnabled(),
	}
	if s.method == "" {
		s.method = "GET"
	}
	if s.interval <= 0 {
		s.interval = pc.CheckInterval
	}
	if s.timeout <= 0 {
		s.timeout = pc.CheckTimeout
	}
	if most := pc.LeaseTTL * 9 / 10; most > 0 && s.timeout > most {
		// A check ends within the lease it runs under (a fleet version's
		// timeout is not checked against this replica's lease_ttl): a
		// slower answer is a timeout, recorded as one, not a check cut
		// when the lease lapses and never recorded.
		s.timeout = most
	}
	switch {
	case !hc.CheckEnabled():
		s.reason = "health_check.enabled is false"
		return s
	case hc.Path != "":
		base := p.BaseURL
		if base == "" {
			base = config.DefaultBaseURL(p.Type)
		}
		s.path = hc.Path
		s.url = strings.TrimRight(base, "/") + hc.Path
	case config.DefaultHealthPath(p.Type) != "":
		s.path = config.DefaultHealthPath(p.Type)
		s.url = provider.New(p.Type, p.BaseURL, p.APIVersion, nil).URL(provider.OpModels, "")
	default:
		s.reason = "no health_check.path configured"
		return s
	}
	s.enabled = true
	return s
}

// modelEntryURL is the URL of one model's entry on the models endpoint
// (GET <models>/<model>), keeping the endpoint's query (Azure's
// api-version).
func modelEntryURL(a *provider.Adapter, upstream string) string {
	u := a.URL(provider.OpModels, "")
	base, q, hasQ := strings.Cut(u, "?")
	u = base + "/" + url.PathEscape(upstream)
	if hasQ {
		u += "?" + q
	}
	return u
}

// keyByID returns the key with id (the zero Key for keyless providers).
func (t *target) keyByID(id string) (config.Key, bool) {
	if id == "" && len(t.keys) == 0 {
		return config.Key{}, true
	}
	for _, k := range t.keys {
		if k.ID == id {
			return k, true
		}
	}
	return config.Key{}, false
}
