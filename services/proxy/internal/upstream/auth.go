package upstream

// The credential headers of a provider's keys, built by its adapter once
// per secret.

import (
	"net/http"
	"unsafe"

	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/provider"
)

// authHeaders are the headers Adapter.Authorize sets for one secret.
type authHeaders struct {
	secret string
	pairs  [][2]string
}

// SetAuth puts the credential headers of the provider's key with index
// keyIndex, whose secret is secret, on req: built by the provider's
// adapter a once per secret (a rotated secret rebuilds them), kept per
// key index. The adapter sets Anthropic-Version only when the request has
// none (a caller's own version is forwarded), so one already on req is
// kept.
func (c *Client) SetAuth(req *fasthttp.Request, a *provider.Adapter, keyIndex int, secret string) {
	setAuth(req, c.authFor(a, keyIndex, secret))
}

// authFor returns the credential headers for the key with index i and
// secret secret.
func (c *Client) authFor(a *provider.Adapter, i int, secret string) [][2]string {
	if i < 0 || i >= len(c.auth) {
		return buildAuth(a, secret).pairs
	}
	if h := c.auth[i].Load(); h != nil && h.secret == secret {
		return h.pairs
	}
	h := buildAuth(a, secret)
	c.auth[i].Store(h)
	return h.pairs
}

// buildAuth builds the credential headers for a secret once, ready to set
// with SetCanonical: names in canonical form (the setter copies the value
// with its line breaks replaced).
func buildAuth(a *provider.Adapter, secret string) *authHeaders {
	h := http.Header{}
	a.Authorize(h, secret)
	out := &authHeaders{secret: secret}
	for k, vs := range h {
		for _, v := range vs {
			out.pairs = append(out.pairs, [2]string{http.CanonicalHeaderKey(k), v})
		}
	}
	return out
}

// setAuth puts the credential headers on req, keeping an Anthropic-Version
// already there.
func setAuth(req *fasthttp.Request, pairs [][2]string) {
	for _, kv := range pairs {
		if kv[0] == "Anthropic-Version" && len(req.Header.Peek(kv[0])) > 0 {
			continue
		}
		req.Header.SetCanonical(bytesOf(kv[0]), bytesOf(kv[1]))
	}
}

// bytesOf is s's bytes without a copy, for a fasthttp setter that copies
// what it is given (SetCanonical): never written to, never kept.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
