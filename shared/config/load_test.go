package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeConfig writes body to a gateway.yaml in a fresh directory and
// returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// minimal is a valid configuration the table tests extend.
const minimal = `
providers:
  - name: openai
    type: openai
    keys:
      - id: k1
        secret: env:OPENAI_KEY
    models:
      - name: gpt-4o-mini
`

var minimalEnv = []string{"OPENAI_KEY=sk-minimal-secret"}

func TestLoadDefaults(t *testing.T) {
	cfg, err := Load("", nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	want := Defaults()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"log", cfg.Log, want.Log},
		{"nats", cfg.NATS, want.NATS},
		{"proxy", cfg.Proxy, want.Proxy},
		{"admin", cfg.Admin.Listen, want.Admin.Listen},
		{"prober", cfg.Prober, want.Prober},
		{"limits", cfg.Limits, want.Limits},
		{"timeouts", cfg.Timeouts, want.Timeouts},
		{"retry", cfg.Retry, want.Retry},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %+v, want %+v", c.name, c.got, c.want)
		}
	}
	if cfg.Limits.MaxBodyBytes != 10485760 || cfg.Timeouts.Attempt != 60*time.Second || cfg.NATS.Embedded.Listen != "127.0.0.1:4222" {
		t.Errorf("defaults drifted from the documented values: %+v", cfg)
	}
}

func TestLoadElementDefaults(t *testing.T) {
	cfg, err := Load(writeConfig(t, minimal), minimalEnv)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	p := cfg.Providers[0]
	if p.BaseURL != "https://api.openai.com/v1" || p.Selection != SelectionRoundRobin {
		t.Errorf("provider defaults: base_url %q selection %q", p.BaseURL, p.Selection)
	}
	if k := p.Keys[0]; k.Priority != 0 || k.Weight != 1 || k.Value.Reveal() != "sk-minimal-secret" {
		t.Errorf("key defaults: priority %d weight %d", k.Priority, k.Weight)
	}
	if p.Models[0].Kind != KindChat {
		t.Errorf("model kind = %q, want chat", p.Models[0].Kind)
	}
}

func TestLoadExampleConfigs(t *testing.T) {
	t.Run("demo", func(t *testing.T) {
		// Exactly the variables `make demo` sets: the demo must load with them.
		env := demoEnv(t)
		cfg, err := Load("../../configs/demo.yaml", env)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if len(cfg.Providers) != 2 || len(cfg.Skipped) != 0 {
			t.Fatalf("providers %d, skipped %v", len(cfg.Providers), cfg.Skipped)
		}
		if got := cfg.Provider("fake-openai").Models[1]; got.Name != "demo-embed-model" || got.Kind != KindEmbedding {
			t.Errorf("embedding model = %+v", got)
		}
		if got := cfg.Provider("fake-anthropic").Keys[1].Value.Reveal(); got != "demo-anthropic-key-2" {
			t.Errorf("fake-anthropic key b2 resolved to the wrong variable")
		}
		steps := cfg.Chains["demo-chat"].Steps
		if len(steps) != 2 || steps[0].Target != "fake-openai/demo-model" || steps[1].Target != "fake-anthropic/demo-claude" {
			t.Errorf("demo-chat steps = %+v", steps)
		}
		if cfg.Aliases["demo-embed"] != "fake-openai/demo-embed-model" {
			t.Errorf("demo-embed alias = %q", cfg.Aliases["demo-embed"])
		}
		if cfg.NATS.Embedded.StoreDir != "./data/demo-nats" || cfg.Proxy.Listen != "127.0.0.1:8080" {
			t.Errorf("listeners/store: %+v %+v", cfg.NATS.Embedded, cfg.Proxy)
		}
		// every model is priced: the demo shows money, not "unknown"
		for _, p := range cfg.Providers {
			for _, m := range p.Models {
				priced := false
				for _, pr := range cfg.Prices {
					priced = priced || (pr.Provider == p.Name && pr.Model == m.Name && pr.Input != nil)
				}
				if !priced {
					t.Errorf("the demo's model %s/%s has no price", p.Name, m.Name)
				}
			}
		}
	})
	t.Run("gateway with every key", func(t *testing.T) {
		env := []string{
			"OPENAI_API_KEY=o", "ANTHROPIC_API_KEY=a", "GEMINI_API_KEY=g",
			"OPENROUTER_API_KEY=r", "GROQ_API_KEY=q", "MISTRAL_API_KEY=m",
		}
		cfg, err := Load("../../configs/gateway.yaml", env)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if len(cfg.Skipped) != 0 || len(cfg.Providers) != 6 {
			t.Errorf("providers %d, skipped %v", len(cfg.Providers), cfg.Skipped)
		}
		for _, s := range cfg.Chains["default"].Steps {
			if !s.IsActive() {
				t.Errorf("step %s inactive with every key set", s.Target)
			}
		}
	})
	t.Run("gateway with no key", func(t *testing.T) {
		cfg, err := Load("../../configs/gateway.yaml", nil)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if len(cfg.Providers) != 0 || len(cfg.Skipped) != 6 {
			t.Errorf("providers %d, skipped %v", len(cfg.Providers), cfg.Skipped)
		}
		for _, s := range cfg.Chains["default"].Steps {
			if s.IsActive() || !s.Unavailable {
				t.Errorf("step %s should be unavailable", s.Target)
			}
		}
	})
}

func TestEnvOverrides(t *testing.T) {
	tests := []struct {
		name  string
		env   string
		check func(*Config) bool
	}{
		{"key with underscore", "SWITCHYARD_LIMITS_MAX_IN_FLIGHT=7", func(c *Config) bool { return c.Limits.MaxInFlight == 7 }},
		{"nested section", "SWITCHYARD_NATS_EMBEDDED_STORE_DIR=/var/lib/sy", func(c *Config) bool { return c.NATS.Embedded.StoreDir == "/var/lib/sy" }},
		{"duration", "SWITCHYARD_TIMEOUTS_ATTEMPT=45s", func(c *Config) bool { return c.Timeouts.Attempt == 45*time.Second }},
		{"list", "SWITCHYARD_RETRY_ON_STATUSES=500, 503", func(c *Config) bool { return slices.Equal(c.Retry.OnStatuses, []int{500, 503}) }},
		{"empty list", "SWITCHYARD_RETRY_ROTATE_ON_STATUSES=", func(c *Config) bool { return len(c.Retry.RotateOnStatuses) == 0 }},
		{"bool", "SWITCHYARD_RETRY_ON_TRANSPORT_ERRORS=false", func(c *Config) bool { return !c.Retry.OnTransportErrors }},
		{"pointer bool", "SWITCHYARD_PROXY_REQUIRE_CLIENT_KEY=false", func(c *Config) bool {
			return c.Proxy.RequireClientKey != nil && !*c.Proxy.RequireClientKey
		}},
		{"over the file", "SWITCHYARD_LOG_LEVEL=debug", func(c *Config) bool { return c.Log.Level == "debug" }},
		{"nats url", "SWITCHYARD_NATS_URL=nats://a:4222,nats://b:4222", func(c *Config) bool { return c.NATS.URL == "nats://a:4222,nats://b:4222" }},
		{"config path ignored", "SWITCHYARD_CONFIG=/etc/switchyard.yaml", func(c *Config) bool { return true }},
	}
	path := writeConfig(t, minimal+"log:\n  level: warn\n")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load(path, append([]string{tt.env}, minimalEnv...))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !tt.check(cfg) {
				t.Errorf("%s not applied: %+v", tt.env, cfg)
			}
		})
	}
}

func TestEnvKeysMapping(t *testing.T) {
	keys := envKeys()
	for name, path := range map[string]string{
		"SWITCHYARD_LIMITS_MAX_IN_FLIGHT":    "limits.max_in_flight",
		"SWITCHYARD_NATS_EMBEDDED_STORE_DIR": "nats.embedded.store_dir",
		"SWITCHYARD_NATS_TLS_CA_FILE":        "nats.tls.ca_file",
		"SWITCHYARD_RETRY_ON_STATUSES":       "retry.on_statuses",
	} {
		if got := keys[name].path; got != path {
			t.Errorf("%s -> %q, want %q", name, got, path)
		}
	}
	for name, k := range keys {
		if strings.ContainsAny(k.path, "[<") {
			t.Errorf("%s maps into a list or map: %s", name, k.path)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		want []string // substrings; "$FILE" is replaced by the file path
	}{
		{
			name: "unknown yaml keys",
			yaml: minimal + "limits:\n  max_inflight: 3\nlogging: {}\n",
			want: []string{"$FILE: limits.max_inflight: unknown key", "$FILE: logging: unknown key"},
		},
		{
			name: "unknown key inside a list element",
			yaml: strings.Replace(minimal, "      - id: k1\n", "      - id: k1\n        wieght: 2\n", 1),
			want: []string{"$FILE: providers[0].keys[0].wieght: unknown key"},
		},
		{
			name: "unknown environment variable",
			yaml: minimal,
			env:  []string{"SWITCHYARD_LIMITS_MAX_INFLIGHT=3"},
			want: []string{"SWITCHYARD_LIMITS_MAX_INFLIGHT: matches no configuration key"},
		},
		{
			name: "env var for a list element is unknown",
			yaml: minimal,
			env:  []string{"SWITCHYARD_PROVIDERS_NAME=x"},
			want: []string{"SWITCHYARD_PROVIDERS_NAME: matches no configuration key"},
		},
		{
			name: "unset secret variable",
			yaml: strings.Replace(minimal, "env:OPENAI_KEY", "env:NOT_SET_ANYWHERE", 1),
			want: []string{"$FILE: providers[0].keys[0].secret: NOT_SET_ANYWHERE is not set"},
		},
		{
			name: "unset client secret",
			yaml: minimal + "clients:\n  - id: team-a\n    secret: env:TEAM_A_KEY\n    models: ['*']\n",
			want: []string{"$FILE: clients[0].secret: TEAM_A_KEY is not set"},
		},
		{
			name: "missing secret file",
			yaml: strings.Replace(minimal, "env:OPENAI_KEY", "file:nope.txt", 1),
			want: []string{"$FILE: providers[0].keys[0].secret: file ", "nope.txt does not exist"},
		},
		{
			name: "bare number duration",
			yaml: minimal + "timeouts:\n  attempt: 60\n",
			want: []string{"$FILE: ", "timeouts.attempt", `a duration needs a unit, like "30s"`},
		},
		{
			name: "mistyped value",
			yaml: minimal + "limits:\n  max_in_flight: lots\n",
			want: []string{"$FILE: ", "limits.max_in_flight"},
		},
		{
			name: "bad yaml",
			yaml: "providers: [\n",
			want: []string{"load $FILE: "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.yaml)
			_, err := Load(path, append(tt.env, minimalEnv...))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "$FILE", path); !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent.yaml"), nil)
	if err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Fatalf("err = %v, want one naming the file", err)
	}
}

func TestFileSecret(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "openai"), []byte("sk-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(dir, "nats-token")
	if err := os.WriteFile(abs, []byte("tok-from-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(minimal, "env:OPENAI_KEY", "file:secrets/openai", 1) +
		"nats:\n  url: nats://127.0.0.1:4222\n  token: file:" + abs + "\n"
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := cfg.Providers[0].Keys[0].Value.Reveal(); got != "sk-from-file" {
		t.Errorf("relative file secret not resolved against the config's directory (trailing newline kept?)")
	}
	if cfg.NATS.TokenValue.Reveal() != "tok-from-file" {
		t.Errorf("nats.token not resolved")
	}
}

func TestOptionalProvider(t *testing.T) {
	body := minimal + `
  - name: anthropic
    type: anthropic
    optional: true
    keys:
      - id: a1
        secret: env:ANTHROPIC_KEY_1
      - id: a2
        secret: env:ANTHROPIC_KEY_2
    models:
      - name: claude-haiku-4-5
chains:
  default:
    steps:
      - target: anthropic/claude-haiku-4-5
      - target: openai/gpt-4o-mini
aliases:
  haiku: anthropic/claude-haiku-4-5
clients:
  - id: team-a
    secret: env:TEAM_A
    models: [anthropic/*, chain:default]
`
	path := writeConfig(t, body)
	env := append([]string{"TEAM_A=sk-team-a"}, minimalEnv...)

	t.Run("all keys unset: provider skipped", func(t *testing.T) {
		cfg, err := Load(path, env)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if !slices.Equal(cfg.Skipped, []string{"anthropic"}) || cfg.Provider("anthropic") != nil {
			t.Fatalf("skipped = %v, providers = %d", cfg.Skipped, len(cfg.Providers))
		}
		want := "provider anthropic skipped: ANTHROPIC_KEY_1 is not set; ANTHROPIC_KEY_2 is not set"
		if !slices.Contains(cfg.Warnings, want) {
			t.Errorf("warnings = %q, want %q", cfg.Warnings, want)
		}
		steps := cfg.Chains["default"].Steps
		if !steps[0].Unavailable || steps[0].IsActive() || steps[1].Unavailable || !steps[1].IsActive() {
			t.Errorf("steps = %+v", steps)
		}
		// The loaded configuration stays valid on its own.
		if err := cfg.Validate(); err != nil {
			t.Errorf("Validate after Load: %v", err)
		}
	})
	t.Run("one key set: the other dropped", func(t *testing.T) {
		cfg, err := Load(path, append([]string{"ANTHROPIC_KEY_2=sk-ant"}, env...))
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		p := cfg.Provider("anthropic")
		if p == nil || len(p.Keys) != 1 || p.Keys[0].ID != "a2" || len(cfg.Skipped) != 0 {
			t.Fatalf("anthropic = %+v, skipped %v", p, cfg.Skipped)
		}
		if want := "provider anthropic: key a1 dropped: ANTHROPIC_KEY_1 is not set"; !slices.Contains(cfg.Warnings, want) {
			t.Errorf("warnings = %q, want %q", cfg.Warnings, want)
		}
		if !cfg.Chains["default"].Steps[0].IsActive() {
			t.Errorf("step of a served provider is inactive")
		}
	})
	t.Run("a mistake in an optional provider still fails", func(t *testing.T) {
		bad := writeConfig(t, strings.Replace(body, "type: anthropic", "type: antropic", 1))
		_, err := Load(bad, env)
		if err == nil || !strings.Contains(err.Error(), bad+`: providers[1].type: unknown type "antropic"`) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestDottedMapKeys(t *testing.T) {
	body := strings.Replace(minimal, "gpt-4o-mini", "gpt-4.1-mini", 1) + `
aliases:
  gpt-4.1: openai/gpt-4.1-mini
chains:
  v1.5:
    steps:
      - target: openai/gpt-4.1-mini
`
	cfg, err := Load(writeConfig(t, body), minimalEnv)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if cfg.Aliases["gpt-4.1"] != "openai/gpt-4.1-mini" || len(cfg.Chains["v1.5"].Steps) != 1 {
		t.Errorf("aliases %v chains %v", cfg.Aliases, cfg.Chains)
	}
}

// demoEnv returns the NAME=value pairs of DEMO_ENV in the root Makefile.
func demoEnv(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "DEMO_ENV :=") {
			in = true
			line = strings.TrimPrefix(line, "DEMO_ENV :=")
		}
		if !in {
			continue
		}
		for _, f := range strings.Fields(line) {
			if f != "\\" && strings.Contains(f, "=") {
				env = append(env, f)
			}
		}
		if !strings.HasSuffix(strings.TrimSpace(line), "\\") {
			break
		}
	}
	if len(env) == 0 {
		t.Fatal("no DEMO_ENV in the Makefile")
	}
	return env
}
