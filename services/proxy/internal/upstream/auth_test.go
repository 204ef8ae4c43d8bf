package upstream

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/provider"
)

// The credential headers are built once per secret and set as they are:
// names canonical, and a line break in a secret or a configured header
// value cannot add a header to the upstream request.
func TestAuthHeadersCannotSplit(t *testing.T) {
	a := provider.New("openai", "http://127.0.0.1:1/v1", "", map[string]string{"x-org-tag": "team\r\nX-Injected: 1"})
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("http://127.0.0.1:1/v1/chat/completions")
	setAuth(req, buildAuth(a, "sk-one\nX-Smuggled: 2").pairs)
	head := string(req.Header.Header())
	for _, bad := range []string{"\r\nX-Injected:", "\r\nX-Smuggled:", "\nX-Injected", "\nX-Smuggled"} {
		if strings.Contains(head, bad) {
			t.Fatalf("a header was split (%q):\n%s", bad, head)
		}
	}
	if got := string(req.Header.Peek("X-Org-Tag")); got != "team  X-Injected: 1" {
		t.Errorf("X-Org-Tag %q", got)
	}
	if got := string(req.Header.Peek("Authorization")); got != "Bearer sk-one X-Smuggled: 2" {
		t.Errorf("Authorization %q", got)
	}
}

// SetAuth sets the headers each provider type authorises with, and no
// other type's credential header; a keyless provider (no secret) sends
// only its configured headers.
func TestSetAuthPerProviderType(t *testing.T) {
	tests := []struct {
		name, typ, apiVersion, secret string
		headers                       map[string]string
		callerVersion                 string // an Anthropic-Version already on the request
		want                          map[string]string
	}{
		{name: "openai", typ: "openai", secret: "sk-o",
			want: map[string]string{"Authorization": "Bearer sk-o"}},
		{name: "gemini", typ: "gemini", secret: "g-1",
			want: map[string]string{"Authorization": "Bearer g-1"}},
		{name: "openrouter with headers", typ: "openrouter", secret: "or-1", headers: map[string]string{"http-referer": "https://example.test"},
			want: map[string]string{"Authorization": "Bearer or-1", "Http-Referer": "https://example.test"}},
		{name: "azure", typ: "azure", apiVersion: "2024-10-21", secret: "az-1",
			want: map[string]string{"Api-Key": "az-1"}},
		{name: "anthropic", typ: "anthropic", secret: "ak-1",
			want: map[string]string{"X-Api-Key": "ak-1", "Anthropic-Version": provider.DefaultAnthropicVersion}},
		{name: "anthropic, configured version", typ: "anthropic", apiVersion: "2024-01-01", secret: "ak-1",
			want: map[string]string{"X-Api-Key": "ak-1", "Anthropic-Version": "2024-01-01"}},
		{name: "anthropic, the caller's version", typ: "anthropic", secret: "ak-1", callerVersion: "2023-01-01",
			want: map[string]string{"X-Api-Key": "ak-1", "Anthropic-Version": "2023-01-01"}},
		{name: "keyless", typ: "openai-compatible", headers: map[string]string{"x-tenant": "t1"},
			want: map[string]string{"X-Tenant": "t1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := provider.New(tt.typ, "http://127.0.0.1:1/v1", tt.apiVersion, tt.headers)
			c := newClient(t, settings(), providerAt(a.Base()))
			req := fasthttp.AcquireRequest()
			defer fasthttp.ReleaseRequest(req)
			if tt.callerVersion != "" {
				req.Header.Set("Anthropic-Version", tt.callerVersion)
			}
			c.SetAuth(req, a, 0, tt.secret)
			for name, want := range tt.want {
				if got := string(req.Header.Peek(name)); got != want {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}
			for _, name := range provider.ClientCredentialHeaders {
				if _, ok := tt.want[name]; !ok && len(req.Header.Peek(name)) > 0 {
					t.Errorf("%s set (%q): not this type's credential", name, req.Header.Peek(name))
				}
			}
		})
	}
}

// A key's credential headers are built once per secret and kept by key
// index: the same secret finds them, a rotated one rebuilds them, and a
// key the Client has no slot for gets them built each time. Setting kept
// headers on a request allocates nothing.
func TestAuthBuiltOncePerSecret(t *testing.T) {
	a := provider.New("openai", "http://127.0.0.1:1/v1", "", nil)
	c := newClient(t, settings(), providerAt(a.Base())) // keys 0 and 1
	first := c.authFor(a, 0, "s1")
	if again := c.authFor(a, 0, "s1"); &again[0] != &first[0] {
		t.Error("the same secret built its headers again")
	}
	if other := c.authFor(a, 1, "s1"); &other[0] == &first[0] {
		t.Error("key 1 shares key 0's headers")
	}
	rotated := c.authFor(a, 0, "s2")
	if &rotated[0] == &first[0] || rotated[0][1] != "Bearer s2" {
		t.Errorf("rotated secret: %q (rebuilt: %v)", rotated, &rotated[0] != &first[0])
	}
	if again := c.authFor(a, 0, "s2"); &again[0] != &rotated[0] {
		t.Error("the rotated secret's headers were not kept")
	}
	for _, i := range []int{-1, 2} {
		x, y := c.authFor(a, i, "s1"), c.authFor(a, i, "s1")
		if &x[0] == &y[0] || x[0][1] != "Bearer s1" {
			t.Errorf("key index %d: %q, kept: %v", i, x, &x[0] == &y[0])
		}
	}

	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI("http://127.0.0.1:1/v1/chat/completions")
	c.SetAuth(req, a, 0, "s2") // the request's header slots, as a pooled request has them
	if n := testing.AllocsPerRun(100, func() { c.SetAuth(req, a, 0, "s2") }); n != 0 {
		t.Errorf("SetAuth allocates %v times with its headers built", n)
	}
}
