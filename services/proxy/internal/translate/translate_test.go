package translate

import (
	"encoding/json"
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
		{"chat legacy functions", chat, `{` + hi + `,"functions":[{"name":"f"}]}`, "functions"},
		{"chat legacy function_call", chat, `{` + hi + `,"function_call":"auto"}`, "functions"},
		{"chat legacy function message", chat, `{"messages":[{"role":"function","name":"f","content":"42"}]}`, "functions"},
		{"chat custom tool", chat, `{` + hi + `,"tools":[{"type":"custom","custom":{"name":"f"}}]}`, `tools of type "custom"`},
		{"chat allowed_tools choice", chat, `{` + hi + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[]}}}`, `tool_choice of type "allowed_tools"`},
		{"chat custom tool call", chat, `{"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"custom","custom":{"name":"f","input":"x"}}]}]}`, `tool calls of type "custom"`},
		{"chat audio input", chat, `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}}]}]}`, "audio content"},
		{"chat file", chat, `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"f1"}}]}]}`, "file content by file_id"},
		{"chat bmp image", chat, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/bmp;base64,Qk0="}}]}]}`, `image media type "image/bmp"`},
		{"chat docx file", chat, `{"messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.docx","file_data":"data:application/vnd.openxmlformats-officedocument.wordprocessingml.document;base64,UEs="}}]}]}`, `file media type "application/vnd.openxmlformats-officedocument.wordprocessingml.document"`},
		{"chat image in system", chat, `{"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, "image content in system messages"},
		{"messages image by file id", msgs, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"file_1"}}]}]}`, "image content by file_id"},
		{"messages document by url", msgs, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://x/a.pdf"}}]}]}`, "document content by URL"},
		{"messages document in tool result", msgs, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBE"}}]}]}]}`, "document content in tool results"},
		{"chat n", chat, `{` + hi + `,"n":2}`, "n > 1"},
		{"chat logprobs", chat, `{` + hi + `,"logprobs":true}`, "logprobs"},
		{"chat top_logprobs", chat, `{` + hi + `,"top_logprobs":3}`, "logprobs"},
		{"chat structured output array root", chat, `{` + hi + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array"}}}}`, "response_format json_schema whose root is not an object"},
		{"chat unknown response_format", chat, `{` + hi + `,"response_format":{"type":"grammar"}}`, `response_format of type "grammar"`},
		{"messages output format", msgs, `{"max_tokens":10,` + hi + `,"output_config":{"format":{"type":"regex"}}}`, `output format of type "regex"`},
		{"chat reasoning without room", chat, `{` + hi + `,"reasoning_effort":"high","max_completion_tokens":2000}`, "reasoning_effort with max_completion_tokens below 2048"},
		{"messages code execution tool", msgs, `{"max_tokens":10,` + hi + `,"tools":[{"type":"code_execution_20250522","name":"code_execution"}]}`, `tools of type "code_execution_20250522"`},
		{"messages web search domains", msgs, `{"max_tokens":10,` + hi + `,"tools":[{"type":"web_search_20250305","name":"web_search","allowed_domains":["example.com"]}]}`, "web search allowed_domains"},
		{"message response code execution", msgResp, `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"server_tool_use","id":"s1","name":"code_execution","input":{}}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`, "server and MCP tool calls (server_tool_use blocks)"},
		{"chat audio output", chat, `{` + hi + `,"modalities":["text","audio"]}`, "audio output"},
		{"messages image in tool result", msgs, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image","source":{}}]}]}]}`, "image content in tool results"},
		{"messages tool use from the user", msgs, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}]}`, "tool calls"},
		{"messages server tool use in history", msgs, `{"max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"server_tool_use","id":"s1","name":"web_search","input":{}}]}]}`, "server and MCP tool calls (server_tool_use blocks)"},
		{"messages image in system", msgs, `{"max_tokens":10,"system":[{"type":"image","source":{}}],` + hi + `}`, "image content"},
		{"messages mcp", msgs, `{"max_tokens":10,` + hi + `,"mcp_servers":[{"type":"url","url":"https://x","name":"x"}]}`, "mcp_servers"},
		{"messages unknown block", msgs, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, `content blocks of type "hologram"`},
		{"chat response legacy function call", chatResp, `{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},"finish_reason":"function_call"}]}`, "functions"},
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
		{"chat tool call arguments not JSON", chat, `{"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"city\": \"Par"}}]}]}`},
		{"chat tool call arguments an array", chat, `{"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`},
		{"chat tool call arguments an object", chat, `{"messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{}}}]}]}`},
		{"chat tool message without id", chat, `{"messages":[{"role":"tool","content":"42"}]}`},
		{"chat tool calls from the user", chat, `{"messages":[{"role":"user","content":"x","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`},
		{"chat tool without a name", chat, `{"messages":[],"tools":[{"type":"function","function":{}}]}`},
		{"chat tool_choice unknown string", chat, `{"messages":[],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"}`},
		{"chat json_schema without name", chat, `{"messages":[],"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object"}}}}`},
		{"chat reserved tool name", chat, `{"messages":[],"tools":[{"type":"function","function":{"name":"json_response"}}]}`},
		{"messages output format without schema", msgs, `{"max_tokens":1,"messages":[],"output_format":{"type":"json_schema"}}`},
		{"chat tool_choice required without tools", chat, `{"messages":[],"tool_choice":"required"}`},
		{"messages tool_choice any without tools", msgs, `{"max_tokens":1,"messages":[],"tool_choice":{"type":"any"}}`},
		{"messages tool_choice unknown type", msgs, `{"max_tokens":1,"messages":[],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"maybe"}}`},
		{"messages tool_choice tool without name", msgs, `{"max_tokens":1,"messages":[],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool"}}`},
		{"messages tool_use input not an object", msgs, `{"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":[1]}]}]}`},
		{"message response tool_use input not an object", msgResp, `{"id":"msg_1","type":"message","content":[{"type":"tool_use","id":"t1","name":"f","input":"x"}]}`},
		{"chat response arguments not JSON", chatResp, `{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]},"finish_reason":"tool_calls"}]}`},
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

// TestAnthropicLimits: a request OpenAI accepts is not sent to Anthropic
// with a parameter Anthropic refuses (each a 400 that does not fail over):
// a temperature above 1, a stop sequence of whitespace, and beside
// thinking a temperature, a top_p or a forced tool call.
func TestAnthropicLimits(t *testing.T) {
	const (
		hi    = `"messages":[{"role":"user","content":"hi"}]`
		tools = `"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}}]`
	)
	tests := []struct {
		name string
		body string
		want string // the Anthropic request, compacted, minus model and messages
	}{
		{"temperature above 1", `{` + hi + `,"temperature":1.5,"top_p":0.5}`,
			`{"max_tokens":4096,"temperature":1,"top_p":0.5}`},
		{"temperature 1 and below kept", `{` + hi + `,"temperature":0.2}`,
			`{"max_tokens":4096,"temperature":0.2}`},
		{"whitespace stop sequences", `{` + hi + `,"stop":["\n"," \t","","END"]}`,
			`{"max_tokens":4096,"stop_sequences":["END"]}`},
		{"a whitespace stop string", `{` + hi + `,"stop":"\n\n"}`,
			`{"max_tokens":4096}`},
		{"thinking drops temperature and top_p", `{` + hi + `,"reasoning_effort":"low","temperature":0.2,"top_p":0.5}`,
			`{"max_tokens":6144,"thinking":{"type":"enabled","budget_tokens":2048}}`},
		{"no thinking (none) keeps them", `{` + hi + `,"reasoning_effort":"none","temperature":0.2,"top_p":0.5}`,
			`{"max_tokens":4096,"temperature":0.2,"top_p":0.5}`},
		{"thinking with tool_choice required", `{` + hi + `,"reasoning_effort":"low",` + tools + `,"tool_choice":"required","parallel_tool_calls":false}`,
			`{"system":"` + anyToolInstruction + `","max_tokens":6144,"tools":[{"name":"f","input_schema":{"type":"object","properties":{}}},{"name":"g","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"auto","disable_parallel_tool_use":true},"thinking":{"type":"enabled","budget_tokens":2048}}`},
		{"thinking with a named tool", `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"reasoning_effort":"low",` + tools + `,"tool_choice":{"type":"function","function":{"name":"g"}}}`,
			`{"system":"be brief\n\nAnswer by calling the g tool, not with text alone.","max_tokens":6144,"tools":[{"name":"f","input_schema":{"type":"object","properties":{}}},{"name":"g","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"auto"},"thinking":{"type":"enabled","budget_tokens":2048}}`},
		{"thinking with a named tool and response_format", `{` + hi + `,"reasoning_effort":"low",` + tools + `,"tool_choice":{"type":"function","function":{"name":"g"}},"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object"}}}}`,
			`{"system":"Answer by calling the g tool, not with text alone.","max_tokens":6144,"tools":[{"name":"f","input_schema":{"type":"object","properties":{}}},{"name":"g","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"auto"},"thinking":{"type":"enabled","budget_tokens":2048}}`},
		{"thinking with tool_choice auto", `{` + hi + `,"reasoning_effort":"low",` + tools + `,"tool_choice":"auto"}`,
			`{"max_tokens":6144,"tools":[{"name":"f","input_schema":{"type":"object","properties":{}}},{"name":"g","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"auto"},"thinking":{"type":"enabled","budget_tokens":2048}}`},
		{"no thinking keeps a forced tool", `{` + hi + `,` + tools + `,"tool_choice":"required"}`,
			`{"max_tokens":4096,"tools":[{"name":"f","input_schema":{"type":"object","properties":{}}},{"name":"g","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"any"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := ChatToMessages([]byte(tt.body), upstreamModel)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatal(err)
			}
			delete(m, "model")
			delete(m, "messages")
			got, _ := json.Marshal(m)
			var want map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatalf("want: %v", err)
			}
			wantJSON, _ := json.Marshal(want)
			if string(got) != string(wantJSON) {
				t.Errorf("Anthropic request\n got %s\nwant %s", got, wantJSON)
			}
		})
	}
}

// TestWrongType: a field of the wrong JSON type is told apart from other
// malformed bodies and from the translation's other errors.
func TestWrongType(t *testing.T) {
	_, err := ChatToMessages([]byte(`{"model":"m","messages":"hi"}`), "m")
	if !WrongType(err) {
		t.Fatalf("messages as a string: %v, not a wrong type", err)
	}
	_, err = ChatToMessages([]byte(`{"model":"m","messages":[`), "m")
	if err == nil || WrongType(err) {
		t.Fatalf("cut JSON: %v, want malformed but not a wrong type", err)
	}
	if WrongType(nil) {
		t.Fatal("nil is a wrong type")
	}
}
