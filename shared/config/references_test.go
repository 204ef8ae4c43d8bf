package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionSecretReferences: a routing version (a document stored in
// NATS) resolves secret references only within the process's
// credentials.references and the references its own file makes, never
// one of the process's own secrets; its errors name the reference and
// tell nothing of a file beyond "not allowed" or "not readable".
func TestVersionSecretReferences(t *testing.T) {
	secrets := t.TempDir() // the allowed directory
	outside := t.TempDir()
	write := func(dir, name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	allowedFile := write(secrets, "openai", "sk-from-allowed-file\n")
	badBytes := write(secrets, "two-lines", "sk-line-one\nsecond-line-of-a-host-file\n")
	hostFile := write(outside, "shadow", "root:$6$hash-of-the-host:19000:0:99999:7:::\n")
	credsFile := write(secrets, "nats.creds", "-----BEGIN NATS USER JWT-----\n")
	adminFile := write(secrets, "admin-token", "admin-token-value")
	link := filepath.Join(secrets, "link-to-shadow")
	if err := os.Symlink(hostFile, link); err != nil {
		t.Fatal(err)
	}

	file := fmt.Sprintf(`
providers:
  - name: openai
    type: openai
    keys: [{id: k1, secret: env:HOST_OWN_KEY}]
    models: [{name: gpt-4o-mini}]
admin:
  tokens:
    - {id: ops, secret: "file:%s", role: operator}
    - {id: ro, secret: env:SWITCHYARD_SECRET_ADMIN_RO, role: read}
credentials:
  encryption_key: env:CREDS_KEY
  references:
    env_prefixes: [SWITCHYARD_SECRET_, OPENAI_API_KEY]
    file_dirs: ["%s"]
nats:
  token: env:NATS_TOKEN
  creds_file: "%s"
metering:
  store: {url: "postgres://usage@127.0.0.1:5432/usage", password: env:SWITCHYARD_SECRET_PG}
`, adminFile, secrets, credsFile)
	path := writeConfig(t, file)
	credsKey := "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	env := []string{
		"HOST_OWN_KEY=sk-host-own",
		"OPENAI_API_KEY=sk-openai-allowed",
		"SWITCHYARD_SECRET_EU=sk-eu-allowed",
		"SWITCHYARD_SECRET_ADMIN_RO=read-token-value",
		"SWITCHYARD_SECRET_COPY_OF_CREDS=" + credsKey, // the credentials key under another, allowed name
		"CREDS_KEY=" + credsKey,
		"NATS_TOKEN=nats-token-value",
		"AWS_SECRET_ACCESS_KEY=host-aws-secret",
		"SWITCHYARD_SECRET_PG=pg-password-value",
	}
	base, err := Load(path, env)
	if err != nil {
		t.Fatalf("the file itself loads: %v", err)
	}

	version := func(ref string) []byte {
		return fmt.Appendf(nil, "providers:\n  - name: exfil\n    type: openai-compatible\n    base_url: http://127.0.0.1:1/v1\n    keys: [{id: k1, secret: %q}]\n    models: [{name: m}]\n", ref)
	}
	tests := []struct {
		name, ref string
		want      string // the secret resolved, or "" for a refusal
		refusal   string // what the error says, after the key path
	}{
		{"an allowed prefix", "env:SWITCHYARD_SECRET_EU", "sk-eu-allowed", ""},
		{"an allowed full name", "env:OPENAI_API_KEY", "sk-openai-allowed", ""},
		{"the file's own reference", "env:HOST_OWN_KEY", "sk-host-own", ""},
		{"a file in an allowed directory", "file:" + allowedFile, "sk-from-allowed-file", ""},
		{"any other variable", "env:AWS_SECRET_ACCESS_KEY", "", "env:AWS_SECRET_ACCESS_KEY: not allowed on this instance (credentials.references)"},
		{"the credentials key's variable", "env:CREDS_KEY", "", "env:CREDS_KEY: not allowed"},
		{"the NATS token's variable", "env:NATS_TOKEN", "", "env:NATS_TOKEN: not allowed"},
		{"the usage store's password under an allowed prefix", "env:SWITCHYARD_SECRET_PG", "", "env:SWITCHYARD_SECRET_PG: not allowed"},
		{"an admin token under an allowed prefix", "env:SWITCHYARD_SECRET_ADMIN_RO", "", "env:SWITCHYARD_SECRET_ADMIN_RO: not allowed"},
		{"the credentials key under another name", "env:SWITCHYARD_SECRET_COPY_OF_CREDS", "", "env:SWITCHYARD_SECRET_COPY_OF_CREDS: not allowed"},
		{"an admin token's file", "file:" + adminFile, "", "not allowed"},
		{"the NATS creds file", "file:" + credsFile, "", "not allowed"},
		{"a host file", "file:" + hostFile, "", "file:" + hostFile + ": not allowed"},
		{"/etc/shadow", "file:/etc/shadow", "", "file:/etc/shadow: not allowed"},
		{"a dot-dot path out of the directory", "file:" + secrets + "/../" + filepath.Base(outside) + "/shadow", "", "not allowed"},
		{"a link out of the directory", "file:" + link, "", "not allowed"},
		{"a relative path", "file:shadow", "", "not allowed"},
		{"an unset allowed variable", "env:SWITCHYARD_SECRET_NOT_SET", "", "env:SWITCHYARD_SECRET_NOT_SET is not set"},
		{"a missing file in the directory", "file:" + secrets + "/missing", "", "file:" + secrets + "/missing is not readable"},
		{"a file of two lines in the directory", "file:" + badBytes, "", "file:" + badBytes + ": not readable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, load := range []struct {
				name string
				f    func() (*Config, error)
			}{
				{"LoadOverlay", func() (*Config, error) { return LoadOverlay(base, env, version(tt.ref), "config version 7") }},
				{"LoadDocument", func() (*Config, error) { return LoadDocument(path, env, version(tt.ref), "config version 7") }},
			} {
				cfg, err := load.f()
				if tt.want != "" {
					if err != nil {
						t.Fatalf("%s: %v", load.name, err)
					}
					if got := cfg.Providers[0].Keys[0].Value.Reveal(); got != tt.want {
						t.Fatalf("%s: resolved %q, want %q", load.name, got, tt.want)
					}
					continue
				}
				if err == nil {
					t.Fatalf("%s: %s was resolved (%s)", load.name, tt.ref, cfg.Providers[0].Keys[0].Value)
				}
				msg := err.Error()
				if want := "config version 7: providers[0].keys[0].secret: "; !strings.Contains(msg, want) || !strings.Contains(msg, tt.refusal) {
					t.Errorf("%s: error %q, want %q and %q", load.name, msg, want, tt.refusal)
				}
				for _, leak := range []string{"offset", " of ", "0x0a", "second-line", "root:", "sk-line-one", "host-aws-secret", credsKey, "exist", "permission"} {
					if strings.Contains(msg, leak) {
						t.Errorf("%s: the error tells %q: %s", load.name, leak, msg)
					}
				}
			}
		})
	}

	t.Run("an optional provider does not soften a refusal", func(t *testing.T) {
		doc := []byte("providers:\n  - name: x\n    type: openai\n    optional: true\n    keys: [{id: k1, secret: env:AWS_SECRET_ACCESS_KEY}]\n    models: [{name: m}]\n")
		if _, err := LoadOverlay(base, env, doc, "config version 8"); !errors.Is(err, ErrRefNotAllowed) && (err == nil || !strings.Contains(err.Error(), "not allowed")) {
			t.Fatalf("err = %v, want a refusal", err)
		}
	})
	t.Run("clients are bounded too", func(t *testing.T) {
		doc := []byte("clients:\n  - {id: app, secret: env:AWS_SECRET_ACCESS_KEY, models: [\"*\"]}\n")
		_, err := LoadOverlay(base, env, doc, "config version 9")
		if err == nil || !strings.Contains(err.Error(), "config version 9: clients[0].secret: env:AWS_SECRET_ACCESS_KEY: not allowed") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("guardrail webhooks are bounded too", func(t *testing.T) {
		hook := func(ref string) []byte {
			return fmt.Appendf(nil, "guardrails:\n  - {name: g, webhook: {url: 'https://h/p', secret: %q}}\n", ref)
		}
		_, err := LoadOverlay(base, env, hook("env:AWS_SECRET_ACCESS_KEY"), "config version 10")
		if err == nil || !strings.Contains(err.Error(), "config version 10: guardrails[0].webhook.secret: env:AWS_SECRET_ACCESS_KEY: not allowed") ||
			strings.Contains(err.Error(), "host-aws-secret") {
			t.Fatalf("err = %v", err)
		}
		cfg, err := LoadOverlay(base, env, hook("env:SWITCHYARD_SECRET_EU"), "config version 11")
		if err != nil || cfg.Guardrails[0].Webhook.Value.Reveal() != "sk-eu-allowed" {
			t.Fatalf("an allowed reference: %v", err)
		}
	})
	t.Run("an explicit empty allowlist leaves the file's own references", func(t *testing.T) {
		p := writeConfig(t, strings.Replace(file, "env_prefixes: [SWITCHYARD_SECRET_, OPENAI_API_KEY]", "env_prefixes: []", 1))
		b, err := Load(p, env)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOverlay(b, env, version("env:SWITCHYARD_SECRET_EU"), "v1"); err == nil {
			t.Error("a prefix no longer listed was allowed")
		}
		if _, err := LoadOverlay(b, env, version("env:HOST_OWN_KEY"), "v1"); err != nil {
			t.Errorf("the file's own reference: %v", err)
		}
	})
	t.Run("the file is the host's own", func(t *testing.T) {
		// The same references in the process's file load: the host's
		// owner wrote them.
		p := writeConfig(t, strings.Replace(file, "env:HOST_OWN_KEY", "env:AWS_SECRET_ACCESS_KEY", 1))
		cfg, err := Load(p, env)
		if err != nil || cfg.Providers[0].Keys[0].Value.Reveal() != "host-aws-secret" {
			t.Fatalf("Load: %v", err)
		}
	})
}

// TestReferencesValidation: a bad allowlist is an error naming the file
// and the key.
func TestReferencesValidation(t *testing.T) {
	path := writeConfig(t, minimal+"credentials:\n  references:\n    env_prefixes: [\"\", \"A-B\"]\n    file_dirs: [run/secrets]\n")
	_, err := Load(path, minimalEnv)
	if err == nil {
		t.Fatal("loaded")
	}
	for _, want := range []string{
		path + ": credentials.references.env_prefixes[0]",
		path + ": credentials.references.env_prefixes[1]",
		path + ": credentials.references.file_dirs[0]: \"run/secrets\": want an absolute path",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// SWITCHYARD_SECRET_ variables hold secrets: they are not overrides.
	if _, err := Load(writeConfig(t, minimal), append([]string{"SWITCHYARD_SECRET_X=sk-x"}, minimalEnv...)); err != nil {
		t.Errorf("a SWITCHYARD_SECRET_ variable: %v", err)
	}
}

// TestRefGuardPaths: a file's real location decides whether a version may
// read it; the platform's own credentials are never allowed.
func TestRefGuardPaths(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real-secrets")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	linkDir := filepath.Join(root, "mounted") // as /var/run -> /run
	if err := os.Symlink(real, linkDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "key"), []byte("sk-x"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &refGuard{refs: References{FileDirs: []string{linkDir, "/run/secrets"}}, dir: root,
		trusted: map[SecretRef]bool{"file:/var/run/secrets/kubernetes.io/serviceaccount/token": true}}
	for _, tt := range []struct {
		ref  string
		want bool
	}{
		{"file:" + filepath.Join(linkDir, "key"), true},
		{"file:" + filepath.Join(real, "key"), true}, // the same file by its real path
		{"file:" + filepath.Join(linkDir, "missing"), true},
		{"file:mounted/key", true}, // relative to the configuration's directory
		{"file:" + filepath.Join(linkDir, "..", "other"), false},
		{"file:/run/secrets/app-key", true},
		{"file:/run/secrets/kubernetes.io/serviceaccount/token", false},
		{"file:/var/run/secrets/kubernetes.io/serviceaccount/token", false}, // even the file's own
		{"file:/run/secrets/eks.amazonaws.com/serviceaccount/token", false},
		{"file:/run/secretsX/key", false},
	} {
		if got := g.allow(SecretRef(tt.ref)); got != tt.want {
			t.Errorf("allow(%s) = %v, want %v", tt.ref, got, tt.want)
		}
	}
}
