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
// by provider and key id and skipped. Deleting a key from the bucket does
// not revert a running proxy: the file's secret returns at the next start.
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
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/config"
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

// Seal encrypts secret for provider/keyID with a fresh random nonce.
func (b *Box) Seal(provider, keyID string, secret config.Secret, by string, at time.Time) (Record, error) {
	if secret.IsZero() {
		return Record{}, errors.New("credentials: empty secret")
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

// WithConn restarts the watcher, resuming after the last revision
// applied, each time nc reconnects (a watcher can otherwise take about 20 s
// to deliver again after a NATS restart).
func WithConn(nc *nats.Conn) Option { return func(o *watchOpts) { o.nc = nc } }

// WithReady is called once, when the values present at the start have
// been delivered (or after 2 s if the end marker never comes).
func WithReady(f func()) Option { return func(o *watchOpts) { o.ready = f } }

// Watch decrypts every secret in the bucket, then every rotation, and calls
// fn(provider, keyID, secret) for each, in revision order, from one
// goroutine (the caller's). It returns nil when ctx ends, or an error when
// key is not a valid AES-256 key. A watcher that ends (NATS gone) is
// re-created, resuming after the last revision applied.
func Watch(ctx context.Context, kv jetstream.KeyValue, key []byte, fn func(provider, keyID string, secret config.Secret), opts ...Option) error {
	box, err := NewBox(key)
	if err != nil {
		return err
	}
	o := watchOpts{log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	var last uint64
	ready := o.ready
	markReady := func() {
		if ready != nil {
			ready()
			ready = nil
		}
	}
	var reconnected chan nats.Status
	if o.nc != nil {
		reconnected = o.nc.StatusChanged(nats.CONNECTED)
		defer o.nc.RemoveStatusListener(reconnected)
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		wopts := []jetstream.WatchOpt{jetstream.IgnoreDeletes()}
		if last > 0 {
			wopts = append(wopts, jetstream.ResumeFromRevision(last+1))
		}
		w, err := kv.WatchAll(ctx, wopts...)
		if err != nil {
			o.log.Warn("credentials: watch bucket; retrying", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		last = drain(ctx, w, box, fn, last, markReady, o.log, reconnected)
		_ = w.Stop()
	}
	return nil
}

// drain applies w's entries until it closes or ctx ends; it returns the
// last revision applied.
func drain(ctx context.Context, w jetstream.KeyWatcher, box *Box, fn func(string, string, config.Secret), last uint64, markReady func(), log *slog.Logger, reconnected <-chan nats.Status) uint64 {
	readyT := time.NewTimer(2 * time.Second)
	defer readyT.Stop()
	for {
		select {
		case <-ctx.Done():
			return last
		case <-readyT.C:
			markReady()
		case _, ok := <-reconnected:
			if !ok { // the connection closed for good
				reconnected = nil
				continue
			}
			return last // a new watcher resumes after last
		case e, ok := <-w.Updates():
			if !ok {
				return last
			}
			if e == nil {
				markReady()
				continue
			}
			if e.Revision() <= last || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			last = e.Revision()
			rec, err := Decode(e.Key(), e.Value())
			if err != nil {
				log.Error("credentials: unusable record; skipped", "kv_key", e.Key(), "err", err)
				continue
			}
			secret, err := box.Open(rec)
			if err != nil {
				log.Error("credentials: record does not decrypt; skipped", "provider", rec.Provider, "key", rec.Key, "err", err)
				continue
			}
			fn(rec.Provider, rec.Key, secret)
		}
	}
}

// KeyFromKV splits a bucket key into provider and key id.
func KeyFromKV(kvKey string) (provider, keyID string, ok bool) {
	provider, keyID, ok = strings.Cut(kvKey, ".")
	return provider, keyID, ok && provider != "" && keyID != "" && !strings.Contains(keyID, ".")
}
