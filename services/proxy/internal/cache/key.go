// Package cache is the proxy's side of the fleet's response cache: the key
// of a request (a hash of what determines its answer once the gateway
// resolved it), the entries kept in the switchyard_cache bucket, a bounded
// memory in front of it, and the coalescing of identical requests in
// flight.
package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unsafe"

	"switchyard.dev/shared/answercache"
)

// Fields of a request body that are not part of its key: they change how
// the answer travels (stream, stream_options) or name what the route
// already names (model), not what the answer says. "user" is left out
// unless a policy asks for it.
var ignored = []string{"model", "stream", "stream_options"}

// SharedScope is the scope of entries a route shares across client keys.
const SharedScope = answercache.SharedScope

// Key is the bucket key of a request: <route>.<scope>.<sha256 hex>, the
// route and the scope (a client key id, or SharedScope) encoded as KV key
// tokens, so that `nats kv ls` and purges can select by route and scope.
// The hash covers the endpoint and the canonical body (Canonical).
func Key(route, scope, endpoint string, body []byte, withUser bool) (string, error) {
	c := canonPool.Get().(*canonicaliser)
	defer canonPool.Put(c)
	c.out = append(append(c.out[:0], endpoint...), '\n')
	if err := c.body(body, withUser); err != nil {
		return "", err
	}
	sum := sha256.Sum256(c.out)
	k := answercache.AppendKeyPrefix(make([]byte, 0, len(route)+len(scope)+8+hex.EncodedLen(len(sum))), route, scope)
	k = hex.AppendEncode(k, sum[:])
	return unsafe.String(unsafe.SliceData(k), len(k)), nil // k is not written to again
}

// StreamKey is the key of the stream that answered the question of key
// (includeUsage: with the usage chunk the caller asked for): a stream is
// kept as it was relayed, apart from the whole answer key names.
func StreamKey(key string, includeUsage bool) string {
	i := strings.LastIndexByte(key, '.') + 1
	h := sha256.New()
	h.Write([]byte("stream\n"))
	if includeUsage {
		h.Write([]byte("usage\n"))
	}
	h.Write([]byte(key[i:]))
	return key[:i] + hex.EncodeToString(h.Sum(nil))
}
