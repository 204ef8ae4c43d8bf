package config

import (
	"slices"
	"strings"
	"testing"
)

// TestLoadDocument: the routing configuration comes from the document,
// the rest from the file; the file's routable keys are ignored.
func TestLoadDocument(t *testing.T) {
	path := writeConfig(t, minimal+`
proxy:
  listen: 127.0.0.1:9999
aliases:
  fast: openai/gpt-4o-mini
`)
	doc := []byte(`
providers:
  - name: other
    type: groq
    keys: [{id: g1, secret: env:OPENAI_KEY, weight: 3}]
    models: [{name: llama}]
aliases:
  quick: other/llama
resilience:
  jitter: 0.3
`)
	env := append([]string{"SWITCHYARD_RESILIENCE_JITTER=0.1"}, minimalEnv...)
	cfg, err := LoadDocument(path, env, doc, "config version 2")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Proxy.Listen != "127.0.0.1:9999" {
		t.Errorf("listen %q: process settings come from the file", cfg.Proxy.Listen)
	}
	if len(cfg.Providers) != 1 || cfg.Providers[0].Name != "other" || cfg.Providers[0].Keys[0].Weight != 3 ||
		cfg.Providers[0].Keys[0].Value.Reveal() != "sk-minimal-secret" {
		t.Errorf("providers %+v", cfg.Providers)
	}
	if _, ok := cfg.Aliases["fast"]; ok || cfg.Aliases["quick"] != "other/llama" {
		t.Errorf("aliases %v: the file's routable keys are ignored", cfg.Aliases)
	}
	if cfg.Resilience.Jitter == nil || *cfg.Resilience.Jitter != 0.3 {
		t.Errorf("jitter %v: a routable variable must not override the document", cfg.Resilience.Jitter)
	}
	if !slices.ContainsFunc(cfg.Warnings, func(w string) bool { return strings.HasPrefix(w, "SWITCHYARD_RESILIENCE_JITTER ignored") }) {
		t.Errorf("warnings %q", cfg.Warnings)
	}
}

func TestLoadDocumentErrors(t *testing.T) {
	path := writeConfig(t, minimal)
	tests := []struct{ name, doc, want string }{
		{"process key", "log:\n  level: debug\n", "config version 5: log: not part of the routing configuration"},
		{"unknown key", "providers:\n  - name: x\n    type: openai\n    colour: red\n", "config version 5: providers[0].colour: unknown key"},
		{"invalid", "providers:\n  - name: x\n    type: opnai\n    keys: [{id: k, secret: env:OPENAI_KEY}]\n    models: [{name: m}]\n",
			`config version 5: providers[0].type: unknown type "opnai"`},
		{"inline secret", "providers:\n  - name: x\n    type: openai\n    keys: [{id: k, secret: sk-inline-secret}]\n    models: [{name: m}]\n",
			"config version 5: providers[0].keys[0].secret: secrets are referenced, not inline"},
		{"not yaml", "providers: [", "config version 5: not a YAML or JSON document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadDocument(path, minimalEnv, []byte(tt.doc), "config version 5")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "sk-inline-secret") {
				t.Errorf("the error shows a secret: %v", err)
			}
		})
	}
}

// TestExtractDocument: a file's routing configuration, as a document,
// loads to the same routing as the file.
func TestExtractDocument(t *testing.T) {
	path := writeConfig(t, minimal+"\naliases:\n  fast: openai/gpt-4o-mini\nproxy:\n  listen: 127.0.0.1:9999\n")
	doc, err := ExtractDocument(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(doc), "listen") || !strings.Contains(string(doc), "env:OPENAI_KEY") {
		t.Errorf("document:\n%s", doc)
	}
	a, err := Load(path, minimalEnv)
	if err != nil {
		t.Fatal(err)
	}
	// another host: its file names no routing, its allowlist the variable
	b, err := LoadDocument(writeConfig(t, "proxy:\n  listen: 127.0.0.1:9999\ncredentials:\n  references:\n    env_prefixes: [OPENAI_KEY]\n"), minimalEnv, doc, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Providers) != len(a.Providers) || b.Providers[0].Name != a.Providers[0].Name || b.Aliases["fast"] != a.Aliases["fast"] {
		t.Errorf("from the document %+v, from the file %+v", b.Providers, a.Providers)
	}
	if !SameRouting(a, b) {
		t.Error("the document does not route like the file")
	}
	c, _ := Load(path, []string{"OPENAI_KEY=sk-another-secret"})
	if SameRouting(a, c) {
		t.Error("another secret routes the same")
	}
	d, _ := Load(path, minimalEnv)
	d.Routing.FailClosed = !d.Routing.FailClosed
	if SameRouting(a, d) {
		t.Error("another routing section routes the same")
	}
}

// TestLoadOverlay: a new routing document over a loaded configuration
// keeps its process settings (file and environment) and resolves the
// document's secrets from the environment.
func TestLoadOverlay(t *testing.T) {
	path := writeConfig(t, minimal+"proxy:\n  listen: 127.0.0.1:9999\n")
	env := append([]string{"SWITCHYARD_LIMITS_MAX_IN_FLIGHT=7", "GROQ_API_KEY=sk-groq-secret"}, minimalEnv...)
	base, err := Load(path, env)
	if err != nil {
		t.Fatal(err)
	}
	doc := []byte("providers:\n  - name: fast\n    type: groq\n    keys: [{id: g1, secret: env:GROQ_API_KEY}]\n    models: [{name: llama}]\n")
	cfg, err := LoadOverlay(base, env, doc, "config version 4")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Proxy.Listen != "127.0.0.1:9999" || cfg.Limits.MaxInFlight != 7 || cfg.File != path {
		t.Errorf("process settings: listen %q, max_in_flight %d, file %q", cfg.Proxy.Listen, cfg.Limits.MaxInFlight, cfg.File)
	}
	if len(cfg.Providers) != 1 || cfg.Providers[0].Keys[0].Value.Reveal() != "sk-groq-secret" {
		t.Errorf("providers %+v", cfg.Providers)
	}
	if _, err := LoadOverlay(base, env, []byte("providers:\n  - name: x\n    type: groq\n    keys: [{id: g1, secret: env:SWITCHYARD_SECRET_NOT_SET}]\n    models: [{name: m}]\n"), "config version 5"); err == nil ||
		!strings.Contains(err.Error(), "env:SWITCHYARD_SECRET_NOT_SET is not set") {
		t.Errorf("an unset variable: %v", err)
	}
	// a configuration built in code (no file) works too
	code := Defaults()
	code.Proxy.Listen = "127.0.0.1:7777"
	if cfg, err := LoadOverlay(code, env, doc, "v1"); err != nil || cfg.Proxy.Listen != "127.0.0.1:7777" || len(cfg.Providers) != 1 {
		t.Errorf("over a configuration built in code: %v", err)
	}
}
