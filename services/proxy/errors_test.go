package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"switchyard.dev/shared/provider"
)

// Every error body is valid JSON (so valid UTF-8) whatever its message
// quotes: a caller's path or model name may carry bytes that are not
// UTF-8, which become U+FFFD; valid UTF-8 and control characters are kept
// as JSON encodes them.
func TestErrorBodiesAreValidJSON(t *testing.T) {
	tests := []struct {
		name, message, want string
	}{
		{"invalid bytes", "no route for GET /\xff\xfe/x", "no route for GET /\ufffd\ufffd/x"},
		{"truncated rune", "model `caf\xc3`", "model `caf\ufffd`"},
		{"valid UTF-8", "model `café 模型`", "model `café 模型`"},
		{"controls and quotes", "a\n\"b\"\\\x01", "a\n\"b\"\\\x01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, f := range []provider.Format{provider.FormatOpenAI, provider.FormatAnthropic} {
				b := errorBody(f, 404, codeNotFound, tt.message)
				var v struct {
					Error struct{ Message string }
				}
				if !utf8.Valid(b) || json.Unmarshal(b, &v) != nil {
					t.Fatalf("format %v: not valid JSON: %q", f, b)
				}
				if v.Error.Message != tt.want {
					t.Errorf("format %v: message %q, want %q", f, v.Error.Message, tt.want)
				}
			}
		})
	}
	// Through the server: a request line whose path is not UTF-8 (sent
	// as raw bytes: an HTTP client would escape them).
	f := newFixture(t)
	for _, path := range []string{"/\xff\xfe/x", "/v1/\xff", "/fake-openai\xff/x"} {
		status, b := rawGet(t, f.url, path)
		if status < 400 || !utf8.Valid(b) || !json.Valid(b) || !strings.Contains(string(b), "\ufffd") {
			t.Errorf("GET %q: %d %q", path, status, b)
		}
	}
}

// rawGet sends GET path as written (no escaping) with the client key and
// returns the status and body.
func rawGet(t *testing.T, url, path string) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+clientSecret+"\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
