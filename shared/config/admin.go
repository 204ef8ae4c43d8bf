package config

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Admin configures the admin service: its listener, the bearer tokens
// operators present, and nothing else (the credentials encryption key is
// in Credentials, since the proxies need it too).
type Admin struct {
	Listen string `koanf:"listen"`
	// Tokens are the bearer tokens the admin API accepts. With none, every
	// /admin route answers 401: the admin API has no anonymous access.
	Tokens []AdminToken `koanf:"tokens"`
}

// Admin token roles.
const (
	// RoleRead may read holds, provider status, events, classify.
	RoleRead = "read"
	// RoleOperator may also release, pin, reset and rotate credentials.
	RoleOperator = "operator"
)

// AdminToken is one bearer token of the admin API.
type AdminToken struct {
	ID     string    `koanf:"id"`
	Secret SecretRef `koanf:"secret"`
	// Role is read or operator.
	Role string `koanf:"role"`

	// Value is the resolved token, filled in by Load.
	Value Secret `koanf:"-"`
}

// Credentials configures secrets rotated at run time (admin API
// PUT /admin/providers/{name}/keys/{id}), stored AES-256-GCM encrypted in
// the switchyard_credentials KV bucket.
type Credentials struct {
	// EncryptionKey references the 32-byte AES-256 key, written as 64 hex
	// digits or standard base64. It never goes into NATS. Unset: rotation
	// is off (the admin answers 409, proxies ignore the bucket).
	EncryptionKey SecretRef `koanf:"encryption_key"`
	// References bounds the secret references routing versions (stored
	// in NATS) may make on this process.
	References References `koanf:"references"`

	// Key is EncryptionKey resolved and decoded by Load (nil when unset).
	Key []byte `koanf:"-"`
}

// DecodeEncryptionKey decodes a 32-byte key written as 64 hex digits or
// standard (or URL-safe) base64. The error never quotes the value.
func DecodeEncryptionKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 64 {
		if b, err := hex.DecodeString(s); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != 32 {
				return nil, fmt.Errorf("decodes to %d bytes, want 32 (AES-256)", len(b))
			}
			return b, nil
		}
	}
	return nil, errors.New("is neither 64 hex digits nor base64 of 32 bytes (generate one with: openssl rand -base64 32)")
}

// adminSection checks the admin tokens.
func (v *validator) adminSection() {
	ids := map[string]bool{}
	for i, tok := range v.cfg.Admin.Tokens {
		at := fmt.Sprintf("admin.tokens[%d]", i)
		switch {
		case tok.ID == "":
			v.add(at+".id", "must be set")
		case !idRE.MatchString(tok.ID):
			v.add(at+".id", "%q must match %s", tok.ID, idRE)
		case ids[tok.ID]:
			v.add(at+".id", "%q is used twice", tok.ID)
		}
		ids[tok.ID] = true
		v.secretRef(at+".secret", tok.Secret, true)
		v.oneOf(at+".role", tok.Role, RoleRead, RoleOperator)
	}
	v.secretRef("credentials.encryption_key", v.cfg.Credentials.EncryptionKey, false)
}

// resolveAdmin resolves the admin tokens, the credentials key and the
// password of the admin's usage store (metering.store). An admin
// token may not equal a gateway client key (a caller's key never opens the
// admin API) nor another admin token.
func (c *Config) resolveAdmin(env map[string]string, dir string, fail func(path string, err error)) {
	if ref := c.Metering.Store.Password; ref != "" {
		v, err := ref.resolve(env, dir)
		if err != nil {
			fail("metering.store.password", err)
		} else {
			c.Metering.Store.PasswordValue = v
		}
	}
	for i := range c.Admin.Tokens {
		at := fmt.Sprintf("admin.tokens[%d].secret", i)
		v, err := c.Admin.Tokens[i].Secret.resolveToken(env, dir)
		if err != nil {
			fail(at, err)
			continue
		}
		c.Admin.Tokens[i].Value = v
		for j := range i {
			if c.Admin.Tokens[j].Value == v {
				fail(at, fmt.Errorf("same token as admin.tokens[%d] (%s)", j, c.Admin.Tokens[j].ID))
			}
		}
		for _, cl := range c.Clients {
			if !cl.Value.IsZero() && cl.Value == v {
				fail(at, fmt.Errorf("same value as the gateway client key %s: admin tokens and client keys must differ", cl.ID))
			}
		}
	}
	if ref := c.Credentials.EncryptionKey; ref != "" {
		v, err := ref.resolve(env, dir)
		if err != nil {
			fail("credentials.encryption_key", err)
			return
		}
		key, err := DecodeEncryptionKey(v.Reveal())
		if err != nil {
			fail("credentials.encryption_key", err)
			return
		}
		c.Credentials.Key = key
	}
}
