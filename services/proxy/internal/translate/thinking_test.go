package translate

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// anthropicThinking extracts the thinking blocks of an Anthropic stream:
// "thinking:<text>|<signature>" or "redacted:<data>".
func anthropicStreamThinking(t *testing.T, stream []byte) []string {
	t.Helper()
	var out []string
	open := -1
	for _, ev := range events(t, stream) {
		var e struct {
			Type         string
			Index        int
			ContentBlock struct{ Type, Thinking, Data string } `json:"content_block"`
			Delta        struct{ Type, Thinking, Signature string }
		}
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			t.Fatalf("event %q: %v", ev.Data, err)
		}
		switch e.Type {
		case "content_block_start":
			switch e.ContentBlock.Type {
			case "thinking":
				out = append(out, "thinking:"+e.ContentBlock.Thinking+"|")
				open = len(out) - 1
			case "redacted_thinking":
				out = append(out, "redacted:"+e.ContentBlock.Data)
			}
		case "content_block_delta":
			if open < 0 {
				continue
			}
			text, sig, _ := strings.Cut(out[open], "|")
			out[open] = text + e.Delta.Thinking + "|" + sig + e.Delta.Signature
		case "content_block_stop":
			open = -1
		}
	}
	return out
}

// TestThinkingStreamRoundTrip: thinking, its signature and redacted
// thinking of an Anthropic stream come back unchanged through OpenAI
// chunks.
func TestThinkingStreamRoundTrip(t *testing.T) {
	for _, name := range []string{"redacted_thinking_tool_use", "thinking_then_text"} {
		in, err := os.ReadFile("testdata/messages_to_chat_stream/" + name + ".sse")
		if err != nil {
			t.Fatal(err)
		}
		chat, _ := runStream(t, NewMessagesToChatStream(callerModel, true), in)
		back, _ := runStream(t, NewChatToMessagesStream(callerModel), chat)
		want := anthropicStreamThinking(t, in)
		got := anthropicStreamThinking(t, back)
		if strings.Join(got, "\n") != strings.Join(want, "\n") || len(want) == 0 {
			t.Errorf("%s: thinking\n got %q\nwant %q", name, got, want)
		}
	}
}

func TestReasoningEffort(t *testing.T) {
	tests := []struct {
		effort     string
		maxTokens  string // the request's max_completion_tokens, or ""
		budget     int    // 0: no thinking
		wantMax    int
		backEffort string
	}{
		{"none", "", 0, defaultMaxTokens, ""},
		{"minimal", "", 1024, 1024 + defaultMaxTokens, "low"},
		{"low", "", 2048, 2048 + defaultMaxTokens, "low"},
		{"medium", "", 8192, 8192 + defaultMaxTokens, "medium"},
		{"high", "", 16384, 16384 + defaultMaxTokens, "high"},
		{"xhigh", "", 32768, 32768 + defaultMaxTokens, "high"},
		{"high", "64000", 16384, 64000, "high"},
		{"high", "10000", 5000, 10000, "medium"},
		{"low", "2048", 1024, 2048, "low"},
	}
	for _, tt := range tests {
		body := `{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"` + tt.effort + `"`
		if tt.maxTokens != "" {
			body += `,"max_completion_tokens":` + tt.maxTokens
		}
		out, err := ChatToMessages([]byte(body+"}"), "claude")
		if err != nil {
			t.Fatalf("%s/%s: %v", tt.effort, tt.maxTokens, err)
		}
		var req struct {
			MaxTokens int `json:"max_tokens"`
			Thinking  *struct {
				Type         string
				BudgetTokens int `json:"budget_tokens"`
			}
		}
		if err := json.Unmarshal(out, &req); err != nil {
			t.Fatal(err)
		}
		budget := 0
		if req.Thinking != nil {
			budget = req.Thinking.BudgetTokens
			if req.Thinking.Type != "enabled" {
				t.Errorf("%s: thinking type %q", tt.effort, req.Thinking.Type)
			}
		}
		if budget != tt.budget || req.MaxTokens != tt.wantMax {
			t.Errorf("%s/%s: budget %d max_tokens %d, want %d %d", tt.effort, tt.maxTokens, budget, req.MaxTokens, tt.budget, tt.wantMax)
		}
		back, err := MessagesToChat(out, "gpt")
		if err != nil {
			t.Fatal(err)
		}
		var chat struct {
			ReasoningEffort     string `json:"reasoning_effort"`
			MaxTokens           *int   `json:"max_tokens"`
			MaxCompletionTokens *int   `json:"max_completion_tokens"`
		}
		if err := json.Unmarshal(back, &chat); err != nil {
			t.Fatal(err)
		}
		if chat.ReasoningEffort != tt.backEffort {
			t.Errorf("%s/%s: back to reasoning_effort %q, want %q", tt.effort, tt.maxTokens, chat.ReasoningEffort, tt.backEffort)
		}
		if tt.backEffort != "" && (chat.MaxTokens != nil || chat.MaxCompletionTokens == nil || *chat.MaxCompletionTokens != tt.wantMax) {
			t.Errorf("%s: back with max_tokens %v, max_completion_tokens %v", tt.effort, chat.MaxTokens, chat.MaxCompletionTokens)
		}
	}
	for _, tt := range []struct{ thinking, effort string }{
		{`{"type":"adaptive"}`, "medium"},
		{`{"type":"adaptive"},"output_config":{"effort":"max"}`, "high"},
		{`{"type":"adaptive"},"output_config":{"effort":"low"}`, "low"},
		{`{"type":"disabled"}`, ""},
		{`{"type":"enabled","budget_tokens":4095}`, "low"},
		{`{"type":"enabled","budget_tokens":4096}`, "medium"},
		{`{"type":"enabled","budget_tokens":16383}`, "medium"},
		{`{"type":"enabled","budget_tokens":16384}`, "high"},
	} {
		out, err := MessagesToChat([]byte(`{"max_tokens":32000,"messages":[{"role":"user","content":"hi"}],"thinking":`+tt.thinking+`}`), "gpt")
		if err != nil {
			t.Fatalf("%s: %v", tt.thinking, err)
		}
		var chat struct {
			ReasoningEffort string `json:"reasoning_effort"`
		}
		_ = json.Unmarshal(out, &chat)
		if chat.ReasoningEffort != tt.effort {
			t.Errorf("thinking %s -> reasoning_effort %q, want %q", tt.thinking, chat.ReasoningEffort, tt.effort)
		}
	}
}

// TestStructuredOutputStream: the input of the json_response tool streams
// as content, and the stream finishes with "stop".
func TestStructuredOutputStream(t *testing.T) {
	for name, path := range inputs(t, "messages_to_chat_stream_structured", ".sse") {
		in, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out, terminated := runStream(t, NewMessagesToChatStream(callerModel, true), in)
		if !terminated {
			t.Errorf("%s: not terminated", name)
		}
		golden(t, strings.TrimSuffix(path, ".sse")+".golden.sse", out)
		checkOpenAIStream(t, out, terminated)
		text := openAIStreamText(t, out)
		var v map[string]any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Errorf("%s: content %q is not a JSON object: %v", name, text, err)
		}
		if tools := openAIStreamTools(t, out); len(tools) != 0 {
			t.Errorf("%s: tool calls %q", name, tools)
		}
		if !strings.Contains(string(out), `"finish_reason":"stop"`) {
			t.Errorf("%s: no finish_reason stop", name)
		}
	}
}

// TestStructuredOutputStreamWithText: where the model writes text before
// the json_response tool's answer (with thinking it cannot be made to call
// the tool at once), the streamed content is the answer alone, as the
// non-stream answer gives it; a stream where the tool never answers gives
// its text as content, before the finish_reason.
func TestStructuredOutputStreamWithText(t *testing.T) {
	req, err := ChatToMessages([]byte(`{"model":"m","max_tokens":2048,"messages":[{"role":"user","content":"hi"}],`+
		`"reasoning_effort":"low","response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object"}}}}`), "claude")
	if err != nil {
		t.Fatal(err)
	}
	if !RequestsAnswerTool(req) {
		t.Fatalf("RequestsAnswerTool false for %s", req)
	}
	if plain, _ := ChatToMessages([]byte(`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`), "claude"); RequestsAnswerTool(plain) {
		t.Fatalf("RequestsAnswerTool true for %s", plain)
	}
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	text := ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Here is "}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"the answer."}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":1}`)
	answer := ev("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"json_response","input":{}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":2}`)
	start := ev("message_start", `{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":5,"output_tokens":1}}}`)
	end := func(reason string) string {
		return ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+reason+`"},"usage":{"output_tokens":9}}`) +
			ev("message_stop", `{"type":"message_stop"}`)
	}
	for _, tt := range []struct {
		name, stream, want string
	}{
		{"text then answer", start + text + answer + end("tool_use"), `{"a":1}`},
		{"answer then text", start + answer + text + end("tool_use"), `{"a":1}`},
		{"text alone", start + text + end("end_turn"), "Here is the answer."},
	} {
		out, terminated := runStream(t, NewMessagesToChatAnswerStream(callerModel, true), []byte(tt.stream))
		checkOpenAIStream(t, out, terminated)
		if got := openAIStreamText(t, out); got != tt.want {
			t.Errorf("%s: content %q, want %q", tt.name, got, tt.want)
		}
		if !strings.Contains(string(out), `"finish_reason":"stop"`) {
			t.Errorf("%s: no finish_reason stop: %s", tt.name, out)
		}
		if i, j := strings.LastIndex(string(out), `"content":`), strings.Index(string(out), `"finish_reason":"stop"`); i > j {
			t.Errorf("%s: content after the finish_reason: %s", tt.name, out)
		}
	}
}
