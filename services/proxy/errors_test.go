package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/internal/gwerror"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
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
				b := errorBody(f, 404, gwerror.NotFound, tt.message)
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

// A translated request with a field of the wrong type is refused with 400
// invalid_request naming the field and the JSON type it must have (no Go
// type names), before any call, in the endpoint's format; also when the
// chain's untranslated step is held (503 would tell the caller to retry
// a request that can never succeed).
func TestTranslatedTypeErrors(t *testing.T) {
	f := newFixture(t)
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, path, body, want string
		anthropic              bool
	}{
		{"max_tokens a string", "/v1/chat/completions", `{"model":"fake-anthropic/demo-claude",` + msgs + `,"max_tokens":"100"}`, "`max_tokens` must be an integer, not a string", false},
		{"max_tokens out of range", "/v1/chat/completions", `{"model":"fake-anthropic/demo-claude",` + msgs + `,"max_tokens":1e30}`, "`max_tokens` must be an integer, not the number 1e30", false},
		{"n a string", "/v1/chat/completions", `{"model":"fake-anthropic/demo-claude",` + msgs + `,"n":"2"}`, "`n` must be an integer, not a string", false},
		{"temperature a string", "/v1/chat/completions", `{"model":"fake-anthropic/demo-claude",` + msgs + `,"temperature":"hot"}`, "`temperature` must be a number, not a string", false},
		{"tools an object", "/v1/chat/completions", `{"model":"fake-anthropic/demo-claude",` + msgs + `,"tools":{}}`, "`tools` must be an array, not an object", false},
		{"messages to chat", "/v1/messages", `{"model":"fake-openai/demo-model",` + msgs + `,"max_tokens":"100"}`, "`max_tokens` must be an integer, not a string", true},
		{"a held native step", "/v1/chat/completions", `{"model":"demo-chat",` + msgs + `,"max_tokens":"100"}`, "`max_tokens` must be an integer, not a string", false},
		{"responses input item", "/v1/responses", `{"model":"fake-anthropic/demo-claude","input":[{"role":5,"content":"hi"}]}`, "`input[].role` must be a string, not a number", false},
	}
	// demo-chat's first step (fake-openai, untranslated) is held: the
	// request reaches the translated step.
	ctx := context.Background()
	for _, key := range []string{"a1", "a2"} {
		sc := hold.Scope{Kind: hold.ScopeKey, Provider: "fake-openai", Key: key}
		if err := f.svc.engine.Pin(ctx, sc, time.Now().Add(time.Hour), "test"); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.openai.Calls()) + len(f.anthropic.Calls())
			status, _, b := f.call(t, tt.path, tt.body)
			if status != http.StatusBadRequest || errorCode(t, b) != gwerror.InvalidRequest {
				t.Fatalf("%d %s", status, b)
			}
			m := decode(t, b)
			if tt.anthropic != (m["type"] == "error") {
				t.Errorf("not in the endpoint's format: %s", b)
			}
			if msg := m["error"].(map[string]any)["message"]; msg != tt.want {
				t.Errorf("message %q, want %q", msg, tt.want)
			}
			if n := len(f.openai.Calls()) + len(f.anthropic.Calls()) - before; n != 0 {
				t.Errorf("%d upstream calls", n)
			}
		})
	}
}

// Answers made before (or without) an endpoint's handler take the format
// of the route as fiber matches it: in any case, with or without a
// trailing slash, count_tokens and an Anthropic provider's passthrough
// included. (Headers too large to read, 431, leave no path to go by: the
// answer is OpenAI's unless the caller sends anthropic-version.)
func TestErrorFormatFollowsRoutes(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Limits.MaxBodyBytes = 1024 })
	big := `{"model":"demo-model","messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`
	tests := []struct {
		name, method, path, body string
		key                      bool
		status                   int
		anthropic                bool
	}{
		{"413 messages", "POST", "/v1/messages", big, true, 413, true},
		{"413 messages, other case and a slash", "POST", "/V1/Messages/", big, true, 413, true},
		{"413 count_tokens", "POST", "/v1/messages/count_tokens", big, true, 413, true},
		{"413 anthropic passthrough", "POST", "/fake-anthropic/v1/messages", big, true, 413, true},
		{"413 chat", "POST", "/v1/chat/completions", big, true, 413, false},
		{"413 openai passthrough", "POST", "/fake-openai/files", big, true, 413, false},
		{"401 anthropic passthrough", "GET", "/fake-anthropic/v1/models", "", false, 401, true},
		{"401 openai passthrough", "GET", "/fake-openai/models", "", false, 401, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, f.url+tt.path, strings.NewReader(tt.body))
			if tt.key {
				req.Header.Set("Authorization", "Bearer "+clientSecret)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if m := decode(t, b); tt.anthropic != (m["type"] == "error") {
				t.Errorf("anthropic %v, got %s", tt.anthropic, b)
			}
		})
	}
}

// A translation error that is not a field of the wrong type (tool-call
// arguments that are not JSON, which OpenAI takes in a conversation's
// history) concerns the step that needs the translation only: the chain's
// next step serves the request as it is.
func TestUntranslatableStepSkipped(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Chains["anthropic-first"] = config.Chain{Steps: []config.ChainStep{{Target: "fake-anthropic/demo-claude"}, {Target: "fake-openai/demo-model"}}}
	})
	body := `{"model":"anthropic-first","messages":[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\": 1"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"ok"}]}`
	status, h, b := f.call(t, "/v1/chat/completions", body)
	if status != http.StatusOK || h.Get(headerProvider) != "fake-openai" {
		t.Fatalf("%d by %q: %s", status, h.Get(headerProvider), b)
	}
}

// TestErrorCodesDocumented holds the README's table of error codes to the
// closed list in errors.go: every gateway code is documented there, in
// the table's code column.
func TestErrorCodesDocumented(t *testing.T) {
	// The gateway's codes are gwerror's catalogue (its own test holds the
	// statuses equal); the reason codes of errors.go are documented too.
	codes := map[string]bool{codeResponseTooLarge: true}
	for _, e := range gwerror.Catalogue() {
		codes[e.Code] = true
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(readme), "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) < 3 {
			continue
		}
		for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(cells[1], -1) {
			documented[m[1]] = true
		}
	}
	for c := range codes {
		if !documented[c] {
			t.Errorf("the code %s (gwerror, errors.go) is not in README.md's table of codes", c)
		}
	}
	if !documented[gwerror.CircuitOpen] || !documented[gwerror.NoTarget] {
		t.Fatalf("no table of codes found in README.md")
	}
}

// TestUncataloguedCodeIsA500: a code the catalogue does not have is
// answered 500 (a bug, kept from answering 200).
func TestUncataloguedCodeIsA500(t *testing.T) {
	app := fiber.New()
	app.Get("/", func(c *fiber.Ctx) error { return sendError(c, provider.FormatOpenAI, "no_such_code", "x") })
	resp, err := app.Test(httptest.NewRequest(http.MethodGet, "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 500 {
		t.Fatalf("status %d, want 500", resp.StatusCode)
	}
}
