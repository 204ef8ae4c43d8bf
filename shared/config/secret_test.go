package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileSecrets: a key's file secret is a change the first time and
// when it differs from the one the file gave last, not when it is the
// same.
func TestFileSecrets(t *testing.T) {
	var f FileSecrets
	f.NoteAll(&Config{Providers: []Provider{{Name: "p", Keys: []Key{{ID: "k", Value: NewSecret("a")}}}}})
	for i, c := range []struct {
		key, secret string
		want        bool
	}{
		{"k", "a", false}, {"k", "b", true}, {"k", "b", false}, {"new", "x", true}, {"new", "x", false},
	} {
		if got := f.Changed("p", c.key, NewSecret(c.secret)); got != c.want {
			t.Errorf("step %d: Changed(%s, %s) = %v, want %v", i, c.key, c.secret, got, c.want)
		}
	}
}

// TestSecretBytes: a secret with a space, a control character or DEL
// fails to load, the error naming the configuration file, the key path
// and the variable or file (never the value); a file's trailing newline
// is trimmed first, so it passes.
func TestSecretBytes(t *testing.T) {
	const base = `
providers:
  - name: openai
    type: openai
    keys:
      - id: k1
        secret: env:OPENAI_KEY
    models:
      - name: gpt-4o-mini
`
	tests := []struct {
		name  string
		yaml  string
		env   []string
		file  string // written to secrets/s next to the configuration
		want  string // "" loads; else a substring of the error, "$FILE" and "$DIR" replaced
		value string // the secret loaded when want is ""
	}{
		{name: "NUL", yaml: base, env: []string{"OPENAI_KEY=sk-abc\x00def"},
			want: "$FILE: providers[0].keys[0].secret: variable OPENAI_KEY: a secret must not contain spaces or control characters (bytes 0x00-0x20 and 0x7f): byte 0x00 at offset 6 of 10"},
		{name: "leading space, trailing tab", yaml: base, env: []string{"OPENAI_KEY= sk-abc\t"},
			want: "$FILE: providers[0].keys[0].secret: variable OPENAI_KEY: a secret must not contain spaces"},
		{name: "trailing newline in a variable", yaml: base, env: []string{"OPENAI_KEY=sk-abc\n"},
			want: "byte 0x0a at offset 6"},
		{name: "DEL", yaml: base, env: []string{"OPENAI_KEY=sk\x7f"}, want: "byte 0x7f"},
		{name: "file with a trailing newline", yaml: strings.Replace(base, "env:OPENAI_KEY", "file:secrets/s", 1),
			file: "sk-from-file\n", value: "sk-from-file"},
		{name: "file with a trailing space", yaml: strings.Replace(base, "env:OPENAI_KEY", "file:secrets/s", 1),
			file: "sk-from-file \n", want: "$FILE: providers[0].keys[0].secret: file $DIR/secrets/s: a secret must not contain spaces"},
		{name: "optional provider: a bad value is an error, not a skip",
			yaml: strings.Replace(base, "type: openai", "type: openai\n    optional: true", 1),
			env:  []string{"OPENAI_KEY=sk abc"}, want: "$FILE: providers[0].keys[0].secret: variable OPENAI_KEY"},
		{name: "client key", yaml: base + "clients:\n  - {id: app, secret: env:APP, models: ['*']}\n",
			env: []string{"OPENAI_KEY=sk", "APP=app key"}, want: "$FILE: clients[0].secret: variable APP: a secret must not"},
		{name: "admin token", yaml: base + "admin:\n  tokens:\n    - {id: ops, secret: env:OPS, role: operator}\n",
			env: []string{"OPENAI_KEY=sk", "OPS=ops\rtoken"}, want: "$FILE: admin.tokens[0].secret: variable OPS: a secret must not"},
		{name: "printable and non-ASCII pass", yaml: base, env: []string{"OPENAI_KEY=sk-ä_~!\"#"}, value: "sk-ä_~!\"#"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "gateway.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.file != "" {
				if err := os.MkdirAll(filepath.Join(dir, "secrets"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "secrets", "s"), []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg, err := Load(path, tt.env)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if got := cfg.Providers[0].Keys[0].Value.Reveal(); got != tt.value {
					t.Fatalf("secret = %q, want %q", got, tt.value)
				}
				return
			}
			want := strings.NewReplacer("$FILE", path, "$DIR", dir).Replace(tt.want)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, want)
			}
			if strings.Contains(err.Error(), "abc") {
				t.Errorf("the error quotes the secret: %v", err)
			}
		})
	}
}
