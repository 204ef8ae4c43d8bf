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
