package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
)

// Secret is a resolved secret value. It never prints itself: String, Format
// and LogValue give its fingerprint only.
type Secret struct{ value string }

// NewSecret wraps a secret value.
func NewSecret(v string) Secret { return Secret{value: v} }

// Reveal returns the secret for the one place that needs it: the header of
// an upstream request (or a constant-time comparison).
func (s Secret) Reveal() string { return s.value }

// IsZero reports whether no secret is set.
func (s Secret) IsZero() bool { return s.value == "" }

// Fingerprint is a short, stable, non-reversible id of the secret: the first
// 8 hex digits of its SHA-256. Safe for logs, events and KV values.
func (s Secret) Fingerprint() string {
	if s.value == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(s.value))
	return hex.EncodeToString(sum[:4])
}

// ErrSecretBytes: a secret holds a byte no secret may hold (see
// CheckSecret).
var ErrSecretBytes = errors.New("a secret must not contain spaces or control characters (bytes 0x00-0x20 and 0x7f)")

// CheckSecret reports whether v can be a secret. A secret travels in an HTTP
// header (Authorization: Bearer, x-api-key, api-key) or is compared with one,
// so it is one token: no byte below 0x21 (NUL, tab, CR, LF, space and the
// other control characters) and no DEL (0x7f). An upstream answers such a
// header 400, a failure the gateway returns to the caller as the caller's
// (request_rejected: no failover, no hold), and whitespace at either end is
// kept by some parsers and dropped by others. The error names the byte and
// its offset, never the secret.
func CheckSecret(v string) error {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < 0x21 || b == 0x7f {
			return fmt.Errorf("%w: byte 0x%02x at offset %d of %d", ErrSecretBytes, b, i, len(v))
		}
	}
	return nil
}

// Check is CheckSecret of the secret's value.
func (s Secret) Check() error { return CheckSecret(s.value) }

// String returns "fp:<fingerprint>".
func (s Secret) String() string { return "fp:" + s.Fingerprint() }

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return s.String() }

// LogValue makes slog print the fingerprint only.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Format makes every fmt verb print "fp:<fingerprint>", so that no format
// string can reveal the value.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// MarshalText gives encoders (JSON, YAML, slog's JSON handler) the
// fingerprint only.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// FileSecrets remembers each key's secret as the configuration file last
// gave it (at start, then at each reload on SIGHUP), so that a reload tells
// a key whose secret the file changed from one it did not: a secret
// rotated through the admin API since stands until the file changes it.
// It is safe for concurrent use.
type FileSecrets struct {
	mu sync.Mutex
	m  map[string]string // provider + "/" + key id -> secret
}

// NoteAll notes the secret of every key of cfg.
func (f *FileSecrets) NoteAll(cfg *Config) {
	for _, p := range cfg.Providers {
		for _, k := range p.Keys {
			f.Changed(p.Name, k.ID, k.Value)
		}
	}
}

// Changed notes the file's secret of a key and reports whether it changed
// since the file last gave it (a key it did not have counts as changed).
func (f *FileSecrets) Changed(provider, keyID string, s Secret) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]string{}
	}
	id := provider + "/" + keyID
	prev, known := f.m[id]
	f.m[id] = s.value
	return !known || prev != s.value
}
