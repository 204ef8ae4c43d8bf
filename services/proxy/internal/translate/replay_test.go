package translate

import (
	"errors"
	"strings"
	"testing"
)

// TestReplayRefusesWhatItCannotTell: answers with tool calls, a refusal,
// non-text blocks or items, or that are not answers, are not replayed.
func TestReplayRefusesWhatItCannotTell(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func([]byte) ([]byte, error)
		body string
	}{
		{"chat tool call", func(b []byte) ([]byte, error) { return ChatAnswerToStream(b, false) },
			`{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`},
		{"chat refusal", func(b []byte) ([]byte, error) { return ChatAnswerToStream(b, false) },
			`{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"no"},"finish_reason":"stop"}]}`},
		{"chat not an answer", func(b []byte) ([]byte, error) { return ChatAnswerToStream(b, false) }, `{"data":[]}`},
		{"messages tool use", MessagesAnswerToStream,
			`{"id":"m","type":"message","role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}],"stop_reason":"tool_use"}`},
		{"responses function call", ResponsesAnswerToStream,
			`{"id":"r","object":"response","status":"completed","output":[{"type":"function_call","id":"f","call_id":"c","name":"f","arguments":"{}"}]}`},
	} {
		if _, err := c.f([]byte(c.body)); !errors.Is(err, ErrNotReplayable) {
			t.Errorf("%s: %v, want ErrNotReplayable", c.name, err)
		}
	}
	out, err := ChatAnswerToStream([]byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`), false)
	if err != nil || strings.Contains(string(out), `"usage"`) || !strings.HasSuffix(string(out), "data: [DONE]\n\n") || strings.Count(string(out), "data: ") != 4 {
		t.Errorf("a chat replay without usage: %v\n%s", err, out)
	}
}
