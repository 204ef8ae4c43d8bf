// Package cache is the proxy's side of the fleet's response cache: the key
// of a request (a hash of what determines its answer once the gateway
// resolved it), the entries kept in the switchyard_cache bucket, a bounded
// memory in front of it, and the coalescing of identical requests in
// flight.
package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

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
	canon, err := Canonical(body, withUser)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(endpoint))
	h.Write([]byte{'\n'})
	h.Write(canon)
	return answercache.KeyPrefix(route, scope) + hex.EncodeToString(h.Sum(nil)), nil
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

// Canonical is body with its keys sorted at every level, no insignificant
// white space, numbers in one form (an integer as digits, any other number
// as the shortest form that reads back the same float64: 1.0, 1e0 and 1
// are one number), and the ignored fields (and "user" unless withUser)
// left out at the top level. Two bodies with the same Canonical ask the
// same question.
func Canonical(body []byte, withUser bool) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("cache: trailing data after the body")
	}
	top, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("cache: the body is not a JSON object")
	}
	for _, k := range ignored {
		delete(top, k)
	}
	if !withUser {
		delete(top, "user")
	}
	return appendCanonical(make([]byte, 0, len(body)), v)
}

func appendCanonical(b []byte, v any) ([]byte, error) {
	var err error
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, k)
			b = append(b, ':')
			if b, err = appendCanonical(b, x[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendCanonical(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return strconv.AppendInt(b, n, 10), nil
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, errors.New("cache: a number out of range")
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.AppendInt(b, int64(f), 10), nil
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64), nil
	case string:
		return strconv.AppendQuote(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case nil:
		return append(b, "null"...), nil
	}
	return nil, errors.New("cache: unexpected JSON value")
}
