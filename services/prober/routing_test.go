package prober

import (
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/health"
)

// TestNewRoutingRefuses: what the prober could not check is refused with
// an error naming it.
func TestNewRoutingRefuses(t *testing.T) {
	ok := func() config.Provider {
		return config.Provider{Name: "p1", Type: "openai", BaseURL: "http://127.0.0.1:1/v1",
			Keys: []config.Key{{ID: "k1", Value: config.NewSecret("s")}}, Models: []config.Model{{Name: "m"}}}
	}
	tests := []struct {
		name    string
		cfg     *config.Config
		wantErr string // "" builds
	}{
		{name: "valid", cfg: &config.Config{Providers: []config.Provider{ok()}}},
		{name: "nil", wantErr: "nil config"},
		{name: "a provider twice", cfg: &config.Config{Providers: []config.Provider{ok(), ok()}}, wantErr: `"p1" is configured twice`},
		{name: "no name", cfg: &config.Config{Providers: []config.Provider{func() config.Provider { p := ok(); p.Name = ""; return p }()}},
			wantErr: "providers[0]: no name"},
		{name: "unknown type", cfg: &config.Config{Providers: []config.Provider{func() config.Provider { p := ok(); p.Type = "gopher"; return p }()}},
			wantErr: `unknown type "gopher"`},
		{name: "a key twice", cfg: &config.Config{Providers: []config.Provider{func() config.Provider {
			p := ok()
			p.Keys = append(p.Keys, p.Keys[0])
			return p
		}()}}, wantErr: `id "k1" is used twice`},
		{name: "a check URL that is not http", cfg: &config.Config{Providers: []config.Provider{func() config.Provider {
			p := ok()
			p.BaseURL = "ftp://example.com"
			return p
		}()}}, wantErr: "is not an http(s) URL"},
		{name: "resilience the hold engine refuses", cfg: &config.Config{
			Resilience: config.Resilience{Ladder: config.Ladders{RateLimit: config.Ladder{Base: time.Hour, Ceiling: time.Minute}}},
			Providers:  []config.Provider{ok()}}, wantErr: "hold policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, _, err := newRouting(tt.cfg, withDefaults(config.Prober{}), 7)
			if tt.wantErr == "" {
				if err != nil || rt.version != 7 || rt.targets["p1"] == nil {
					t.Fatalf("newRouting = %+v, %v", rt, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("newRouting error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestSecretOverrides: a rotated secret wins over every configuration; a
// reloaded one while the configuration states the secret it replaced.
func TestSecretOverrides(t *testing.T) {
	key := func(secret string) config.Key { return config.Key{ID: "k1", Value: config.NewSecret(secret)} }
	var rotated, reloaded secrets
	rotated.m.Store("p1/k1", override{secret: config.NewSecret("rotated")})
	reloaded.m.Store("p1/k1", override{secret: config.NewSecret("reloaded"), reloaded: true, over: config.NewSecret("configured")})
	tests := []struct {
		name string
		s    *secrets
		key  config.Key
		want string
	}{
		{name: "nothing overrides", s: &secrets{}, key: key("configured"), want: "configured"},
		{name: "rotated over the configuration it was rotated under", s: &rotated, key: key("configured"), want: "rotated"},
		{name: "rotated over a newer configuration", s: &rotated, key: key("newer"), want: "rotated"},
		{name: "reloaded over the configuration it replaced", s: &reloaded, key: key("configured"), want: "reloaded"},
		{name: "a newer configuration over reloaded", s: &reloaded, key: key("newer"), want: "newer"},
		{name: "another key", s: &rotated, key: config.Key{ID: "k2", Value: config.NewSecret("configured")}, want: "configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.of("p1", tt.key).Reveal(); got != tt.want {
				t.Fatalf("of = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPassiveWindowPrune: counts of providers the routing no longer names
// are dropped, and their reports are not counted any more.
func TestPassiveWindowPrune(t *testing.T) {
	names := []string{"p1", "p2"}
	w := newPassiveWindow(time.Minute, func(p string) bool { return knownNames(names...)(p) })
	now := time.Now()
	for _, p := range names {
		if !w.add(now, report(p, map[string]health.PassiveCounts{"k1": {Success: 1}})) {
			t.Fatalf("report about %s not counted", p)
		}
	}
	names = []string{"p2", "p3"}
	w.prune()
	if total, _ := w.counts(now, "p1"); !total.IsZero() {
		t.Fatalf("p1 still counts %+v after it was removed", total)
	}
	if total, _ := w.counts(now, "p2"); total.Success != 1 {
		t.Fatalf("p2 counts %+v, want its report kept", total)
	}
	if w.add(now, report("p1", map[string]health.PassiveCounts{"k1": {Success: 1}})) {
		t.Fatal("a report about a removed provider was counted")
	}
	if !w.add(now, report("p3", map[string]health.PassiveCounts{"k1": {Success: 1}})) {
		t.Fatal("a report about an added provider was not counted")
	}
}
