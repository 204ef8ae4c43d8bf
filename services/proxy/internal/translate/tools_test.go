package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestToolChoice maps each OpenAI tool_choice (with parallel_tool_calls) to
// Anthropic's tool_choice and back.
func TestToolChoice(t *testing.T) {
	const tools = `"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`
	tests := []struct {
		name      string
		openAI    string // tool_choice and parallel_tool_calls members, or ""
		anthropic string // the tool_choice written, or "" for none
		back      string // what MessagesToChat writes for it, when not openAI; "-" for nothing
	}{
		{"absent", ``, ``, ``},
		{"auto", `"tool_choice":"auto"`, `{"type":"auto"}`, ``},
		{"required", `"tool_choice":"required"`, `{"type":"any"}`, ``},
		{"none", `"tool_choice":"none"`, `{"type":"none"}`, ``},
		{"named", `"tool_choice":{"type":"function","function":{"name":"f"}}`, `{"type":"tool","name":"f"}`, ``},
		{"parallel true", `"parallel_tool_calls":true`, ``, `-`}, // the default
		{"parallel false alone", `"parallel_tool_calls":false`, `{"type":"auto","disable_parallel_tool_use":true}`, `"tool_choice":"auto","parallel_tool_calls":false`},
		{"auto, not parallel", `"tool_choice":"auto","parallel_tool_calls":false`, `{"type":"auto","disable_parallel_tool_use":true}`, ``},
		{"required, not parallel", `"tool_choice":"required","parallel_tool_calls":false`, `{"type":"any","disable_parallel_tool_use":true}`, ``},
		{"named, not parallel", `"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false`, `{"type":"tool","name":"f","disable_parallel_tool_use":true}`, ``},
		{"none, not parallel", `"tool_choice":"none","parallel_tool_calls":false`, `{"type":"none"}`, `"tool_choice":"none"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			extra := ""
			if tt.openAI != "" {
				extra = "," + tt.openAI
			}
			body := `{"messages":[{"role":"user","content":"hi"}],` + tools + extra + `}`
			msgs, err := ChatToMessages([]byte(body), upstreamModel)
			if err != nil {
				t.Fatal(err)
			}
			var req struct {
				ToolChoice json.RawMessage `json:"tool_choice"`
			}
			if err := json.Unmarshal(msgs, &req); err != nil {
				t.Fatal(err)
			}
			if string(req.ToolChoice) != tt.anthropic {
				t.Errorf("Anthropic tool_choice = %s, want %s", req.ToolChoice, tt.anthropic)
			}
			chat, err := MessagesToChat(msgs, upstreamModel)
			if err != nil {
				t.Fatal(err)
			}
			want := extra
			switch tt.back {
			case "":
			case "-":
				want = ""
			default:
				want = "," + tt.back
			}
			if want := tools + want + `}`; !strings.HasSuffix(string(chat), want) {
				t.Errorf("back to OpenAI: %s\nwant it to end with %s", chat, want)
			}
		})
	}
}

// TestToolChoiceWithoutTools: a tool_choice asking for no tool call is
// dropped with no tools; one asking for a call is an error.
func TestToolChoiceWithoutTools(t *testing.T) {
	for _, tc := range []string{`"none"`, `"auto"`} {
		out, err := ChatToMessages([]byte(`{"messages":[],"parallel_tool_calls":false,"tool_choice":`+tc+`}`), upstreamModel)
		if err != nil || strings.Contains(string(out), "tool") {
			t.Errorf("tool_choice %s: %s, %v", tc, out, err)
		}
	}
	for _, tc := range []string{`{"type":"none"}`, `{"type":"auto","disable_parallel_tool_use":true}`} {
		out, err := MessagesToChat([]byte(`{"max_tokens":1,"messages":[],"tool_choice":`+tc+`}`), upstreamModel)
		if err != nil || strings.Contains(string(out), "tool") {
			t.Errorf("tool_choice %s: %s, %v", tc, out, err)
		}
	}
}

// TestToolArgumentsErrors: tool call arguments that are not a JSON object
// are a clear error wrapping ErrMalformed, naming the call.
func TestToolArgumentsErrors(t *testing.T) {
	tests := []struct {
		name, args, want string
	}{
		{"cut", `{\"city\":\"Par`, "arguments are not valid JSON"},
		{"not JSON", `city=Paris`, "arguments are not valid JSON"},
		{"array", `[\"Paris\"]`, "arguments are not a JSON object"},
		{"string", `\"Paris\"`, "arguments are not a JSON object"},
		{"two values", `{} {}`, "arguments are not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"` + tt.args + `"}}]}]}`
			_, err := ChatToMessages([]byte(body), upstreamModel)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want one wrapping ErrMalformed", err)
			}
			for _, s := range []string{"messages[1]", "tool_calls[0]", `"call_1"`, "get_weather", tt.want} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %q, want it to mention %s", err, s)
				}
			}
		})
	}
}

// TestToolRequestRoundTrip translates an OpenAI request with tools to
// Anthropic and back: tools, calls (names, ids, arguments) and results come
// back unchanged.
func TestToolRequestRoundTrip(t *testing.T) {
	in := `{"model":"m","messages":[` +
		`{"role":"system","content":"Use tools."},` +
		`{"role":"user","content":"Weather in Paris and Tokyo?"},` +
		`{"role":"assistant","content":null,"tool_calls":[` +
		`{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"opts\":{\"unit\":\"c\",\"days\":[1,2]}}"}},` +
		`{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Tokyo <東京>\"}"}}]},` +
		`{"role":"tool","content":"18C","tool_call_id":"call_1"},` +
		`{"role":"tool","content":"24C","tool_call_id":"call_2"},` +
		`{"role":"assistant","content":"Checking the time too.","tool_calls":[{"id":"call_3","type":"function","function":{"name":"now","arguments":"{}"}}]},` +
		`{"role":"tool","content":"06:00","tool_call_id":"call_3"},` +
		`{"role":"user","content":"Thanks"}],` +
		`"max_tokens":100,` +
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},` +
		`{"type":"function","function":{"name":"now","parameters":{"type":"object","properties":{}}}}],` +
		`"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false}`
	msgs, err := ChatToMessages([]byte(in), "claude")
	if err != nil {
		t.Fatal(err)
	}
	back, err := MessagesToChat(msgs, "m")
	if err != nil {
		t.Fatal(err)
	}
	if string(back) != in {
		t.Errorf("round trip\n got %s\nwant %s\n(via %s)", back, in, msgs)
	}
}

// TestToolResponseRoundTrip translates an Anthropic message with tool calls
// to a chat completion and back, and a chat completion with tool calls to an
// Anthropic message and back.
func TestToolResponseRoundTrip(t *testing.T) {
	t.Run("anthropic", func(t *testing.T) {
		in := `{"id":"msg_01A","type":"message","role":"assistant","model":"caller","content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"city":"Paris","opts":{"days":[1,2]}}},{"type":"tool_use","id":"toolu_02","name":"now","input":{}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}`
		chat, err := MessagesResponseToChat([]byte(in), "caller")
		if err != nil {
			t.Fatal(err)
		}
		back, err := ChatResponseToMessages(chat, "caller")
		if err != nil {
			t.Fatal(err)
		}
		if string(back) != in {
			t.Errorf("round trip\n got %s\nwant %s", back, in)
		}
	})
	t.Run("openai", func(t *testing.T) {
		in := `{"id":"chatcmpl-msg_01B","object":"chat.completion","created":1750000000,"model":"caller","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"id":"call_2","type":"function","function":{"name":"now","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":0}}}`
		msg, err := ChatResponseToMessages([]byte(in), "caller")
		if err != nil {
			t.Fatal(err)
		}
		back, err := MessagesResponseToChat(msg, "caller")
		if err != nil {
			t.Fatal(err)
		}
		if string(back) != in {
			t.Errorf("round trip\n got %s\nwant %s", back, in)
		}
	})
}

// TestStreamedCallWithoutArguments: a tool call with no input streams its
// arguments as "{}", as the non-stream answer gives them, not "" (which no
// SDK parses as JSON); a call with input gets its input only.
func TestStreamedCallWithoutArguments(t *testing.T) {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	stream := ev("message_start", `{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":5,"output_tokens":1}}}`) +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"now","input":{}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_2","name":"add","input":{}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":1}`) +
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
	out, _ := runStream(t, NewMessagesToChatStream("m", true), []byte(stream))
	calls := openAIStreamTools(t, out)
	if len(calls) != 2 || calls[0].Arguments != "{}" || calls[1].Arguments != `{"a":1}` {
		t.Fatalf("calls %+v", calls)
	}
	body := `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"now","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":9}}`
	chat, err := MessagesResponseToChat([]byte(body), "m")
	if err != nil || !bytes.Contains(chat, []byte(`"arguments":"{}"`)) {
		t.Fatalf("non-stream: %s %v", chat, err)
	}
}

// TestStreamedCallsReusingAnIndex: an OpenAI-format stream that numbers
// every tool call 0 and tells them apart by id (Ollama does) gives one
// tool_use block per call, not one block with the inputs run together.
func TestStreamedCallsReusingAnIndex(t *testing.T) {
	stream := "data: " + `{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"w","arguments":"{\"p\":\"a\"}"}}]}}]}` + "\n\n" +
		"data: " + `{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}` + "\n\n" +
		"data: " + `{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"w","arguments":"{\"p\":\"b\"}"}}]}}]}` + "\n\n" +
		"data: " + `{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n" +
		"data: [DONE]\n\n"
	out, _ := runStream(t, NewChatToMessagesStream("m"), []byte(stream))
	calls := anthropicStreamTools(t, out)
	if len(calls) != 2 || calls[0].ID != "call_a" || calls[0].Arguments != `{"p":"a"}` || calls[1].ID != "call_b" || calls[1].Arguments != `{"p":"b"}` {
		t.Fatalf("tool_use blocks %+v", calls)
	}
}
