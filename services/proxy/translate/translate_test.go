package translate

import (
	"errors"
	"os"
	"strings"
	"testing"
)

const (
	callerModel   = "switchyard-default"
	upstreamModel = "upstream-model-1"
)

// TestGolden runs every input under testdata/<dir>/*.json through its
// translation and compares the indented output with <name>.golden.json.
func TestGolden(t *testing.T) {
	tests := []struct {
		name string // the testdata directory
		conv func([]byte) ([]byte, error)
	}{
		{"chat_to_messages", func(b []byte) ([]byte, error) { return ChatToMessages(b, upstreamModel) }},
		{"messages_to_chat", func(b []byte) ([]byte, error) { return MessagesToChat(b, upstreamModel) }},
		{"messages_response_to_chat", func(b []byte) ([]byte, error) { return MessagesResponseToChat(b, callerModel) }},
		{"chat_response_to_messages", func(b []byte) ([]byte, error) { return ChatResponseToMessages(b, callerModel) }},
	}
	for _, tt := range tests {
		for name, path := range inputs(t, tt.name, ".json") {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				in, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				out, err := tt.conv(in)
				if err != nil {
					t.Fatalf("translate: %v", err)
				}
				golden(t, strings.TrimSuffix(path, ".json")+".golden.json", indentJSON(t, out))
			})
		}
	}
}

func TestUnsupported(t *testing.T) {
	chat := func(b string) error { _, err := ChatToMessages([]byte(b), upstreamModel); return err }
	msgs := func(b string) error { _, err := MessagesToChat([]byte(b), upstreamModel); return err }
	msgResp := func(b string) error { _, err := MessagesResponseToChat([]byte(b), callerModel); return err }
	chatResp := func(b string) error { _, err := ChatResponseToMessages([]byte(b), callerModel); return err }
	const hi = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name      string
		translate func(string) error
		body      string
		field     string
	}{
		{"chat tools", chat, `{` + hi + `,"tools":[{"type":"function","function":{"name":"f"}}]}`, "tools"},
		{"chat legacy functions", chat, `{` + hi + `,"functions":[{"name":"f"}]}`, "tools"},
		{"chat tool_choice", chat, `{` + hi + `,"tool_choice":"auto"}`, "tool_choice"},
		{"chat tool call in history", chat, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, "tool calls"},
		{"chat tool result", chat, `{"messages":[{"role":"tool","tool_call_id":"c1","content":"42"}]}`, "tool results"},
		{"chat image", chat, `{"messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, "image content"},
		{"chat audio input", chat, `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}}]}]}`, "audio content"},
		{"chat file", chat, `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"f1"}}]}]}`, "file content"},
		{"chat n", chat, `{` + hi + `,"n":2}`, "n > 1"},
		{"chat logprobs", chat, `{` + hi + `,"logprobs":true}`, "logprobs"},
		{"chat top_logprobs", chat, `{` + hi + `,"top_logprobs":3}`, "logprobs"},
		{"chat json mode", chat, `{` + hi + `,"response_format":{"type":"json_object"}}`, "response_format"},
		{"chat structured output", chat, `{` + hi + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}}`, "response_format"},
		{"chat reasoning", chat, `{` + hi + `,"reasoning_effort":"high"}`, "reasoning_effort"},
		{"chat audio output", chat, `{` + hi + `,"modalities":["text","audio"]}`, "audio output"},
		{"chat web search", chat, `{` + hi + `,"web_search_options":{}}`, "web_search_options"},
		{"messages tools", msgs, `{"max_tokens":10,` + hi + `,"tools":[{"name":"f","input_schema":{"type":"object"}}]}`, "tools"},
		{"messages tool_choice", msgs, `{"max_tokens":10,` + hi + `,"tool_choice":{"type":"any"}}`, "tool_choice"},
		{"messages thinking", msgs, `{"max_tokens":2000,` + hi + `,"thinking":{"type":"enabled","budget_tokens":1024}}`, "thinking"},
		{"messages image", msgs, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA"}}]}]}`, "image content"},
		{"messages document", msgs, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]}]}`, "document content"},
		{"messages tool use in history", msgs, `{"max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}]}`, "tool calls"},
		{"messages tool result", msgs, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"42"}]}]}`, "tool results"},
		{"messages thinking in history", msgs, `{"max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"x","signature":"s"}]}]}`, "thinking"},
		{"messages image in system", msgs, `{"max_tokens":10,"system":[{"type":"image","source":{}}],` + hi + `}`, "image content"},
		{"messages mcp", msgs, `{"max_tokens":10,` + hi + `,"mcp_servers":[{"type":"url","url":"https://x","name":"x"}]}`, "mcp_servers"},
		{"messages unknown block", msgs, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, `content blocks of type "hologram"`},
		{"message response tool use", msgResp, `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"t1","name":"f","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`, "tool calls"},
		{"chat response tool calls", chatResp, `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`, "tool calls"},
		{"chat response n", chatResp, `{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":"b"},"finish_reason":"stop"}]}`, "n > 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.translate(tt.body)
			var ue *UnsupportedError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v, want an *UnsupportedError", err)
			}
			if ue.Field != tt.field {
				t.Errorf("Field = %q, want %q", ue.Field, tt.field)
			}
			want := "translation of " + tt.field + " between OpenAI and Anthropic formats is not supported yet"
			if ue.Error() != want {
				t.Errorf("Error() = %q, want %q", ue.Error(), want)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	chat := func(b string) error { _, err := ChatToMessages([]byte(b), upstreamModel); return err }
	msgs := func(b string) error { _, err := MessagesToChat([]byte(b), upstreamModel); return err }
	msgResp := func(b string) error { _, err := MessagesResponseToChat([]byte(b), callerModel); return err }
	chatResp := func(b string) error { _, err := ChatResponseToMessages([]byte(b), callerModel); return err }
	tests := []struct {
		name      string
		translate func(string) error
		body      string
	}{
		{"chat not JSON", chat, `{"messages":`},
		{"chat empty body", chat, ``},
		{"chat array", chat, `[]`},
		{"chat messages not an array", chat, `{"messages":"hi"}`},
		{"chat content a number", chat, `{"messages":[{"role":"user","content":42}]}`},
		{"chat part without type", chat, `{"messages":[{"role":"user","content":[{"text":"x"}]}]}`},
		{"chat unknown role", chat, `{"messages":[{"role":"robot","content":"x"}]}`},
		{"chat stop a number", chat, `{"messages":[],"stop":4}`},
		{"chat stream a string", chat, `{"messages":[],"stream":"yes"}`},
		{"chat max_tokens a string", chat, `{"messages":[],"max_tokens":"10"}`},
		{"messages not JSON", msgs, `{"messages":[`},
		{"messages unknown role", msgs, `{"max_tokens":1,"messages":[{"role":"system","content":"x"}]}`},
		{"messages content an object", msgs, `{"max_tokens":1,"messages":[{"role":"user","content":{"text":"x"}}]}`},
		{"messages block text a number", msgs, `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`},
		{"messages system a number", msgs, `{"max_tokens":1,"system":1,"messages":[]}`},
		{"message response not JSON", msgResp, `<html>502 Bad Gateway</html>`},
		{"message response is an error", msgResp, `{"type":"error","error":{"type":"api_error","message":"x"}}`},
		{"chat response not JSON", chatResp, `{"choices":[`},
		{"chat response no choices", chatResp, `{"id":"x","choices":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.translate(tt.body)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want one wrapping ErrMalformed", err)
			}
			var ue *UnsupportedError
			if errors.As(err, &ue) {
				t.Errorf("malformed input reported as unsupported: %v", err)
			}
		})
	}
}
