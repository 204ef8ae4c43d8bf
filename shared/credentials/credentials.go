// Package credentials keeps secrets rotated at run time: the admin service
// encrypts a key's new secret with AES-256-GCM and stores it in the
// switchyard_credentials KV bucket; every proxy watches the bucket, decrypts
// and swaps the key's secret in place.
//
// # Contract
//
// KV bucket bus.BucketCredentials (switchyard_credentials, History 5), key
// "<provider>.<key id>" (both restricted by config validation to
// [A-Za-z0-9_-]), value the JSON Record:
//
//	{"v":1,"provider":"openai","key":"primary","fingerprint":"1a2b3c4d",
//	 "nonce":"<base64 12 bytes>","ciphertext":"<base64>",
//	 "rotated_by":"oncall","rotated_at":"2025-06-02T12:00:00Z"}
//
// The ciphertext is AES-256-GCM of the secret with the record's nonce; the
// additional data binds it to its place ("switchyard.credential.v1:" +
// provider + "." + key id), so a value copied under another key does not
// decrypt. The 32-byte key comes from credentials.encryption_key (env: or
// file:) and never goes into NATS. Only the fingerprint (first 8 hex digits
// of the secret's SHA-256) is in clear.
//
// # Writer (the admin service)
//
//	box, _ := credentials.NewBox(cfg.Credentials.Key)
//	rec, rev, err := credentials.Put(ctx, res.Credentials, box, "openai", "primary", secret, "oncall")
//
// then it releases the key's holds fleet-wide (hold.Engine.ReleaseKey with
// source "credential") and publishes a credential event.
//
// # Reader (every proxy)
//
//	go credentials.Watch(ctx, res.Credentials, cfg.Credentials.Key,
//	        func(provider, keyID string, secret config.Secret) { /* swap the key's secret */ },
//	        credentials.WithLog(log), credentials.WithConn(nc))
//
// Watch delivers the value of every key present first (a proxy started
// after a rotation uses the rotated secret, not the file's), then every
// rotation as it happens (about 100 µs after the write on loopback), until
// ctx ends. Records it cannot decrypt (another encryption key) are logged
// by provider and key id and skipped, and so are records whose secret
// config.CheckSecret refuses (a space or a control character: Seal does
// not write one). Deleting a key from the bucket does not revert a running
// proxy: the file's secret returns at the next start.
package credentials

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/kvwatch"
)

// SchemaVersion is the version of the Record JSON.
const SchemaVersion = 1

// aadPrefix starts the additional authenticated data of every ciphertext.
const aadPrefix = "switchyard.credential.v1:"

// ErrDecrypt: a record did not decrypt (another encryption key, or a
// record moved to another KV key).
var ErrDecrypt = errors.New("credentials: cannot decrypt (wrong encryption key?)")

// Record is one rotated secret as stored in the bucket.
type Record struct {
	Version     int       `json:"v"`
	Provider    string    `json:"provider"`
	Key         string    `json:"key"`
	Fingerprint string    `json:"fingerprint"`
	Nonce       []byte    `json:"nonce"`
	Ciphertext  []byte    `json:"ciphertext"`
	RotatedBy   string    `json:"rotated_by"`
	RotatedAt   time.Time `json:"rotated_at"`
}

// KVKey is the bucket key of a provider's key: "<provider>.<key id>".
func KVKey(provider, keyID string) string { return provider + "." + keyID }

// Box seals and opens secrets with one AES-256-GCM key.
type Box struct{ aead cipher.AEAD }

// NewBox returns a Box for a 32-byte key (config.Credentials.Key).
func NewBox(key []byte) (*Box, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("credentials: encryption key has %d bytes, want 32 (AES-256)", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	return &Box{aead: aead}, nil
}

func aad(provider, keyID string) []byte { return []byte(aadPrefix + KVKey(provider, keyID)) }

// Seal encrypts secret for provider/keyID with a fresh random nonce. It
// refuses an empty secret and one config.CheckSecret refuses.
func (b *Box) Seal(provider, keyID string, secret config.Secret, by string, at time.Time) (Record, error) {
	if secret.IsZero() {
		return Record{}, errors.New("credentials: empty secret")
	}
	if err := secret.Check(); err != nil {
		return Record{}, fmt.Errorf("credentials: %s: %w", KVKey(provider, keyID), err)
	}
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return Record{}, fmt.Errorf("credentials: nonce: %w", err)
	}
	return Record{
		Version:     SchemaVersion,
		Provider:    provider,
		Key:         keyID,
		Fingerprint: secret.Fingerprint(),
		Nonce:       nonce,
		Ciphertext:  b.aead.Seal(nil, nonce, []byte(secret.Reveal()), aad(provider, keyID)),
		RotatedBy:   by,
		RotatedAt:   at.UTC(),
	}, nil
}

// Open decrypts a record.
func (b *Box) Open(r Record) (config.Secret, error) {
	if r.Version != SchemaVersion {
		return config.Secret{}, fmt.Errorf("credentials: %s: schema version %d, want %d", KVKey(r.Provider, r.Key), r.Version, SchemaVersion)
	}
	if len(r.Nonce) != b.aead.NonceSize() {
		return config.Secret{}, fmt.Errorf("credentials: %s: bad nonce", KVKey(r.Provider, r.Key))
	}
	pt, err := b.aead.Open(nil, r.Nonce, r.Ciphertext, aad(r.Provider, r.Key))
	if err != nil {
		return config.Secret{}, fmt.Errorf("%w: %s", ErrDecrypt, KVKey(r.Provider, r.Key))
	}
	return config.NewSecret(string(pt)), nil
}

// Decode parses a bucket value stored under kvKey and checks that it
// names the same provider and key.
func Decode(kvKey string, data []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("credentials: %s: decode: %w", kvKey, err)
	}
	if KVKey(r.Provider, r.Key) != kvKey {
		return Record{}, fmt.Errorf("credentials: value under %s names %s", kvKey, KVKey(r.Provider, r.Key))
	}
	return r, nil
}

// Put seals secret and stores it under provider/keyID. It returns the
// stored record (no secret in it) and the KV revision.
func Put(ctx context.Context, kv jetstream.KeyValue, b *Box, provider, keyID string, secret config.Secret, by string) (Record, uint64, error) {
	rec, err := b.Seal(provider, keyID, secret, by, time.Now())
	if err != nil {
		return Record{}, 0, err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return Record{}, 0, fmt.Errorf("credentials: encode: %w", err)
	}
	rev, err := kv.Put(ctx, KVKey(provider, keyID), data)
	if err != nil {
		return Record{}, 0, fmt.Errorf("credentials: store %s: %w", KVKey(provider, keyID), err)
	}
	return rec, rev, nil
}

// Get returns the stored record of provider/keyID (jetstream.ErrKeyNotFound
// when none).
func Get(ctx context.Context, kv jetstream.KeyValue, provider, keyID string) (Record, uint64, error) {
	e, err := kv.Get(ctx, KVKey(provider, keyID))
	if err != nil {
		return Record{}, 0, err
	}
	r, err := Decode(e.Key(), e.Value())
	return r, e.Revision(), err
}

// Option configures Watch.
type Option func(*watchOpts)

type watchOpts struct {
	nc    *nats.Conn
	log   *slog.Logger
	ready func()
}

// WithLog sets the logger for records that cannot be used and for watcher
// restarts (never a secret: provider and key id only).
func WithLog(l *slog.Logger) Option { return func(o *watchOpts) { o.log = l } }

// WithConn is the connection kv uses: its reconnects re-create the watcher
// at once, resuming after the last revision applied (a watcher can
// otherwise take about 20 s to deliver again after a NATS restart).
func WithConn(nc *nats.Conn) Option { return func(o *watchOpts) { o.nc = nc } }

// WithReady is called once, when the values present at the start have
// been delivered (or after readyTimeout if the end marker never comes).
func WithReady(f func()) Option { return func(o *watchOpts) { o.ready = f } }

// readyTimeout bounds the wait for the end of the initial values before
// WithReady's function is called anyway.
const readyTimeout = 2 * time.Second

// Watch decrypts every secret in the bucket, then every rotation, and calls
// fn(provider, keyID, secret) for each, in revision order, from one
// goroutine (the caller's). It returns nil when ctx ends, or an error when
// key is not a valid AES-256 key. The watcher is package kvwatch's: it is
// re-created, resuming after the last revision applied, when the
// connection reconnects (WithConn), when the bucket's stream elects a
// leader, when it closes or falls behind the bucket.
func Watch(ctx context.Context, kv jetstream.KeyValue, key []byte, fn func(provider, keyID string, secret config.Secret), opts ...Option) error {
	box, err := NewBox(key)
	if err != nil {
		return err
	}
	o := watchOpts{log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	wo := kvwatch.Options{KV: kv, Conn: o.nc, Log: o.log, LoadTimeout: readyTimeout}
	return kvwatch.Run(ctx, wo, func(ev kvwatch.Event) {
		switch ev.Op {
		case kvwatch.OpLoaded:
			if o.ready != nil {
				o.ready()
			}
		case kvwatch.OpPut:
			rec, err := Decode(ev.Key, ev.Value)
			if err != nil {
				o.log.Error("credentials: unusable record; skipped", "kv_key", ev.Key, "err", err)
				return
			}
			secret, err := box.Open(rec)
			if err != nil {
				o.log.Error("credentials: record does not decrypt; skipped", "provider", rec.Provider, "key", rec.Key, "err", err)
				return
			}
			if err := secret.Check(); err != nil {
				// Seal refuses such a secret; a record written otherwise
				// (another writer, an older version) would put it in
				// request headers, which upstreams answer 400: a failure
				// returned to callers, with no failover and no hold.
				o.log.Error("credentials: rotated secret refused (the key keeps its secret); skipped", "provider", rec.Provider, "key", rec.Key, "fingerprint", rec.Fingerprint, "err", err)
				return
			}
			fn(rec.Provider, rec.Key, secret)
		}
		// A deleted key does not revert a running proxy (see the package
		// documentation).
	})
}
