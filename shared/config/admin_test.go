package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAdminSection(t *testing.T) {
	const key64 = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	tests := []struct {
		name    string
		yaml    string
		env     []string
		wantErr []string // substrings; none means success
	}{
		{
			name: "tokens and hex key",
			yaml: "admin:\n  tokens:\n    - {id: ops, secret: env:OPS, role: operator}\n    - {id: ro, secret: env:RO, role: read}\ncredentials:\n  encryption_key: env:CK\n",
			env:  []string{"OPS=o-token", "RO=r-token", "CK=" + key64},
		},
		{
			name:    "bad role, duplicate id, inline secret",
			yaml:    "admin:\n  tokens:\n    - {id: ops, secret: env:OPS, role: admin}\n    - {id: ops, secret: plain-token, role: read}\n",
			env:     []string{"OPS=o"},
			wantErr: []string{"admin.tokens[0].role: unknown value \"admin\"", "admin.tokens[1].id: \"ops\" is used twice", "admin.tokens[1].secret: secrets are referenced"},
		},
		{
			name:    "token equal to a client key",
			yaml:    "admin:\n  tokens:\n    - {id: ops, secret: env:SAME, role: operator}\nclients:\n  - {id: app, secret: env:SAME, models: ['*']}\n",
			env:     []string{"SAME=shared-value"},
			wantErr: []string{"admin.tokens[0].secret: same value as the gateway client key app"},
		},
		{
			name:    "short key",
			yaml:    "credentials:\n  encryption_key: env:CK\n",
			env:     []string{"CK=c2hvcnQ="},
			wantErr: []string{"credentials.encryption_key: decodes to 5 bytes, want 32"},
		},
		{
			name:    "unset token variable",
			yaml:    "admin:\n  tokens:\n    - {id: ops, secret: env:NOPE, role: operator}\n",
			wantErr: []string{"admin.tokens[0].secret: NOPE is not set"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := Load(path, tt.env)
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if len(cfg.Credentials.Key) != 32 || cfg.Admin.Tokens[0].Value.Reveal() != "o-token" {
					t.Errorf("not resolved: %+v", cfg.Admin)
				}
				return
			}
			if err == nil {
				t.Fatal("Load succeeded")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "plain-token") || strings.Contains(err.Error(), "shared-value") {
				t.Errorf("error reveals a secret: %v", err)
			}
		})
	}
}

func TestDecodeEncryptionKey(t *testing.T) {
	for _, s := range []string{
		"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
		"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
	} {
		b, err := DecodeEncryptionKey(s)
		if err != nil || len(b) != 32 || b[31] != 31 {
			t.Errorf("%s: %v %x", s, err, b)
		}
	}
	if _, err := DecodeEncryptionKey("not a key"); err == nil {
		t.Error("accepted garbage")
	}
}
