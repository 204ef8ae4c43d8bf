package proxy

import (
	"testing"

	"switchyard.dev/services/proxy/internal/gwerror"

	"switchyard.dev/shared/config"
)

// input is optional in the Responses API (a prompt template, a stored
// conversation carries the turn): a request without it goes to a provider
// with the API as sent; one translated to chat or messages, which need a
// turn, is refused with unsupported_translation, before any call. An
// input neither a string nor an array is refused either way.
func TestResponsesWithoutInput(t *testing.T) {
	native := newFixture(t)
	translated := newFixture(t, func(c *config.Config) { c.Providers[0].Type = "groq" }) // OpenAI format, no Responses API
	const prompt = `{"model":"demo-model","prompt":{"id":"pmpt_abc","variables":{"city":"Paris"}}}`
	tests := []struct {
		name   string
		f      *fixture
		body   string
		status int
		code   string
		calls  int
	}{
		{"prompt template", native, prompt, 200, "", 1},
		{"null input", native, `{"model":"demo-model","input":null,"previous_response_id":"resp_1"}`, 200, "", 1},
		{"input not a string or array", native, `{"model":"demo-model","input":5}`, 400, gwerror.InvalidRequest, 0},
		{"translated prompt template", translated, prompt, 400, gwerror.Unsupported, 0},
		{"translated without input", translated, `{"model":"demo-model","instructions":"be brief"}`, 400, gwerror.Unsupported, 0},
		{"translated empty input", translated, `{"model":"demo-model","input":[]}`, 400, gwerror.Unsupported, 0},
		{"translated to messages", translated, `{"model":"fake-anthropic/demo-claude"}`, 400, gwerror.Unsupported, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.openai.ResetCalls()
			tt.f.anthropic.ResetCalls()
			status, _, body := tt.f.call(t, "/v1/responses", tt.body)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, body)
			}
			if tt.code != "" && errorCode(t, body) != tt.code {
				t.Errorf("code %q, want %q: %s", errorCode(t, body), tt.code, body)
			}
			if n := len(tt.f.openai.Calls()) + len(tt.f.anthropic.Calls()); n != tt.calls {
				t.Errorf("%d upstream calls, want %d", n, tt.calls)
			}
		})
	}
}
