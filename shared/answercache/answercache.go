// Package answercache is the response cache's contract in NATS: the
// entries of the switchyard_cache bucket (their JSON) and their keys. The
// proxy writes and reads them (services/proxy/internal/cache); the admin
// service lists and purges them.
package answercache

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/usage"
)

// SchemaVersion is the version of an Entry's JSON form.
const SchemaVersion = 1

// SharedScope is the scope of the entries a route shares across client
// keys (else an entry's scope is the id of the client key that stored it,
// "_" for a caller without one).
const SharedScope = "_shared"

// Entry is one cached answer, as the bucket keeps it (JSON, readable with
// `nats kv get switchyard_cache <key>`): the answer in the caller's
// format, and what served it and what it cost, for the usage record of a
// hit. Never a secret or a client credential: the answer as relayed.
type Entry struct {
	V        int       `json:"v"`
	StoredAt time.Time `json:"stored_at"`
	Expires  time.Time `json:"expires"`
	Endpoint string    `json:"endpoint"`
	Route    string    `json:"route"`
	Scope    string    `json:"scope"`
	// Provider, ProviderType, Model and KeyID are what served the answer.
	Provider     string       `json:"provider"`
	ProviderType string       `json:"provider_type"`
	Model        string       `json:"model"`
	KeyID        string       `json:"key_id"`
	Tokens       usage.Tokens `json:"tokens"`
	// CostUSD is what the answer cost (nil: unknown), what a hit saves.
	CostUSD     *float64        `json:"cost_usd"`
	ContentType string          `json:"content_type"`
	Answer      json.RawMessage `json:"answer,omitempty"`
	// Events is, for an answer kept as the stream it was relayed as
	// (content type text/event-stream), that stream; Answer is then
	// empty.
	Events string `json:"events,omitempty"`
	// Embedding is, on a route with a semantic cache, the embedding of
	// the question's last user message (unit length), by which the
	// proxies find the entry nearest another question.
	Embedding []float32 `json:"embedding,omitempty"`
}

// Size is the bytes of the entry's answer or events.
func (e *Entry) Size() int { return len(e.Answer) + len(e.Events) }

// Live reports whether the entry may still be served at now.
func (e *Entry) Live(now time.Time) bool { return now.Before(e.Expires) }

// Age is how long ago the entry was stored, in whole seconds.
func (e *Entry) Age(now time.Time) int64 { return int64(now.Sub(e.StoredAt) / time.Second) }

// Decode reads an entry of this schema version.
func Decode(b []byte) (*Entry, error) {
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	if e.V != SchemaVersion || e.Size() == 0 {
		return nil, errors.New("answercache: not an entry of this version")
	}
	return &e, nil
}

// KeyPrefix is the start of the keys of a route's entries for a scope,
// "<route>.<scope>.", each encoded as a KV key token (hold.EncodeToken): a
// key is the prefix and the SHA-256 (hex) of the question.
func KeyPrefix(route, scope string) string {
	return string(AppendKeyPrefix(nil, route, scope))
}

// AppendKeyPrefix appends KeyPrefix(route, scope) to b.
func AppendKeyPrefix(b []byte, route, scope string) []byte {
	b = append(hold.AppendToken(b, route), '.')
	return append(hold.AppendToken(b, scope), '.')
}

// Filter is the subject filter of the keys of route and scope, "" for
// any: "<route>.<scope>.*" with "*" for what is not given.
func Filter(route, scope string) string {
	r, s := "*", "*"
	if route != "" {
		r = hold.EncodeToken(route)
	}
	if scope != "" {
		s = hold.EncodeToken(scope)
	}
	return r + "." + s + ".*"
}

// Parts are the route and the scope a key names (false: not a key of the
// bucket's form).
func Parts(key string) (route, scope string, ok bool) {
	toks := strings.Split(key, ".")
	if len(toks) != 3 || len(toks[2]) != 64 {
		return "", "", false
	}
	r, err1 := hold.DecodeToken(toks[0])
	s, err2 := hold.DecodeToken(toks[1])
	return r, s, err1 == nil && err2 == nil
}
