package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"switchyard.dev/shared/sse"
)

// streamFormat is what a test needs to know of a stream format.
type streamFormat struct {
	name string
	// text extracts the generated text of a whole stream.
	text func(t *testing.T, stream []byte) string
	// tools extracts the tool calls of a whole stream.
	tools func(t *testing.T, stream []byte) []streamedToolCall
	// check validates the shape of a converter's whole output.
	check func(t *testing.T, stream []byte, terminated bool)
}

var (
	openAIStream = streamFormat{name: "OpenAI", text: openAIStreamText, tools: openAIStreamTools, check: checkOpenAIStream}
	anthropicSSE = streamFormat{name: "Anthropic", text: anthropicStreamText, tools: anthropicStreamTools, check: checkAnthropicStream}
)

// streamedToolCall is a tool call put together from a stream.
type streamedToolCall struct{ ID, Name, Arguments string }

// TestStreams feeds captured-style upstream streams through each converter,
// event by event as the proxy does, and checks the frames against golden
// files, their shape, and that the text survives the translation and the
// translation back.
func TestStreams(t *testing.T) {
	tests := []struct {
		name     string // the testdata directory
		conv     func() StreamConverter
		back     func() StreamConverter // translates the output back
		from, to streamFormat
	}{
		{
			name: "messages_to_chat_stream",
			conv: func() StreamConverter { return NewMessagesToChatStream(callerModel, true) },
			back: func() StreamConverter { return NewChatToMessagesStream(callerModel) },
			from: anthropicSSE, to: openAIStream,
		},
		{
			name: "chat_to_messages_stream",
			conv: func() StreamConverter { return NewChatToMessagesStream(callerModel) },
			back: func() StreamConverter { return NewMessagesToChatStream(callerModel, true) },
			from: openAIStream, to: anthropicSSE,
		},
	}
	for _, tt := range tests {
		for name, path := range inputs(t, tt.name, ".sse") {
			t.Run(tt.name+"/"+name, func(t *testing.T) {
				in, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				wantTerminated := !strings.HasPrefix(name, "error")

				out, terminated := runStream(t, tt.conv(), in)
				golden(t, strings.TrimSuffix(path, ".sse")+".golden.sse", out)
				if terminated != wantTerminated {
					t.Errorf("Terminated() = %v, want %v", terminated, wantTerminated)
				}
				tt.to.check(t, out, terminated)

				want := tt.from.text(t, in)
				if got := tt.to.text(t, out); got != want {
					t.Errorf("%s text = %q, want %q", tt.to.name, got, want)
				}
				wantTools := tt.from.tools(t, in)
				if got := tt.to.tools(t, out); !slices.Equal(got, wantTools) {
					t.Errorf("%s tool calls = %q, want %q", tt.to.name, got, wantTools)
				}
				back, backTerminated := runStream(t, tt.back(), out)
				if backTerminated != wantTerminated {
					t.Errorf("translated back: Terminated() = %v, want %v", backTerminated, wantTerminated)
				}
				tt.from.check(t, back, backTerminated)
				if got := tt.from.text(t, back); got != want {
					t.Errorf("translated back: %s text = %q, want %q", tt.from.name, got, want)
				}
				if got := tt.from.tools(t, back); !slices.Equal(got, wantTools) {
					t.Errorf("translated back: %s tool calls = %q, want %q", tt.from.name, got, wantTools)
				}
			})
		}
	}
}

// runStream feeds stream to c one event at a time and returns all frames.
func runStream(t *testing.T, c StreamConverter, stream []byte) (out []byte, terminated bool) {
	t.Helper()
	r := sse.NewReader(bytes.NewReader(stream))
	done := false
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read input: %v", err)
		}
		if done {
			t.Fatalf("event %q after done", ev.Raw)
		}
		frames, d, err := c.Event(ev.Name, ev.Data)
		if err != nil {
			t.Fatalf("Event(%q): %v", ev.Raw, err)
		}
		if len(frames) > 0 && !bytes.HasSuffix(frames, []byte("\n\n")) {
			t.Fatalf("Event(%q) frames %q do not end in a blank line", ev.Raw, frames)
		}
		out = append(out, frames...)
		done = d
	}
	if c.Terminated() && !done {
		t.Errorf("Terminated() without done")
	}
	return out, c.Terminated()
}

// events splits a stream into its events, failing on a cut one.
func events(t *testing.T, stream []byte) []sse.Event {
	t.Helper()
	var evs []sse.Event
	r := sse.NewReader(bytes.NewReader(stream))
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return evs
		}
		if err != nil {
			t.Fatalf("read stream: %v\n%s", err, stream)
		}
		evs = append(evs, sse.Event{Name: bytes.Clone(ev.Name), Data: bytes.Clone(ev.Data)})
	}
}

type openAIChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			Refusal   *string `json:"refusal"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage   `json:"usage"`
	Error *openAIError `json:"error"`
}

func openAIStreamText(t *testing.T, stream []byte) string {
	var sb strings.Builder
	for _, ev := range events(t, stream) {
		if string(ev.Data) == "[DONE]" {
			continue
		}
		var ch openAIChunk
		if err := json.Unmarshal(ev.Data, &ch); err != nil {
			t.Fatalf("OpenAI chunk %q: %v", ev.Data, err)
		}
		for _, c := range ch.Choices {
			if c.Delta.Content != nil {
				sb.WriteString(*c.Delta.Content)
			}
			if c.Delta.Refusal != nil {
				sb.WriteString(*c.Delta.Refusal)
			}
		}
	}
	return sb.String()
}

// checkOpenAIStream checks a produced OpenAI stream: chunks with one id and
// the caller's model, a role first, one finish_reason, then a usage chunk
// and [DONE]; or an error chunk last.
func checkOpenAIStream(t *testing.T, stream []byte, terminated bool) {
	t.Helper()
	evs := events(t, stream)
	if len(evs) == 0 {
		t.Fatal("empty stream")
	}
	var id string
	finishes := 0
	for i, ev := range evs {
		if len(ev.Name) != 0 {
			t.Errorf("event %d has a name %q: OpenAI streams have none", i, ev.Name)
		}
		if string(ev.Data) == "[DONE]" {
			if i != len(evs)-1 || !terminated {
				t.Errorf("[DONE] at %d of %d, terminated %v", i, len(evs), terminated)
			}
			continue
		}
		var ch openAIChunk
		if err := json.Unmarshal(ev.Data, &ch); err != nil {
			t.Fatalf("chunk %d %q: %v", i, ev.Data, err)
		}
		if ch.Error != nil {
			if i != len(evs)-1 || terminated {
				t.Errorf("error chunk at %d of %d, terminated %v", i, len(evs), terminated)
			}
			if ch.Error.Message == "" || ch.Error.Type == "" {
				t.Errorf("error chunk without message or type: %s", ev.Data)
			}
			continue
		}
		if ch.Object != "chat.completion.chunk" || ch.Model != callerModel || ch.Created != fixedTime.Unix() || !strings.HasPrefix(ch.ID, "chatcmpl-") {
			t.Errorf("chunk %d header: %s", i, ev.Data)
		}
		if id == "" {
			id = ch.ID
		} else if ch.ID != id {
			t.Errorf("chunk %d id %q, want %q", i, ch.ID, id)
		}
		if i == 0 && (len(ch.Choices) != 1 || ch.Choices[0].Delta.Role != "assistant") {
			t.Errorf("first chunk does not give the role: %s", ev.Data)
		}
		for _, c := range ch.Choices {
			if c.FinishReason != nil {
				finishes++
			}
		}
		if len(ch.Choices) == 0 && ch.Usage == nil {
			t.Errorf("chunk %d has neither choices nor usage: %s", i, ev.Data)
		}
	}
	if terminated {
		if finishes != 1 {
			t.Errorf("%d finish_reason chunks, want 1", finishes)
		}
		if len(evs) < 2 || !bytes.Contains(evs[len(evs)-2].Data, []byte(`"usage":`)) {
			t.Errorf("no usage chunk before [DONE]")
		}
	}
}

// openAIStreamTools puts together the tool calls of an OpenAI stream, by
// index, failing on a call that does not begin with its id, type and name.
func openAIStreamTools(t *testing.T, stream []byte) []streamedToolCall {
	var calls []streamedToolCall
	for _, ev := range events(t, stream) {
		if string(ev.Data) == "[DONE]" {
			continue
		}
		var ch openAIChunk
		if err := json.Unmarshal(ev.Data, &ch); err != nil {
			t.Fatalf("OpenAI chunk %q: %v", ev.Data, err)
		}
		for _, c := range ch.Choices {
			for _, tc := range c.Delta.ToolCalls {
				switch {
				case tc.Index == len(calls):
					if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
						t.Errorf("tool call %d begins without id, type or name: %s", tc.Index, ev.Data)
					}
					calls = append(calls, streamedToolCall{ID: tc.ID, Name: tc.Function.Name})
				case tc.Index != len(calls)-1:
					t.Fatalf("tool call index %d after %d calls: %s", tc.Index, len(calls), ev.Data)
				}
				calls[tc.Index].Arguments += tc.Function.Arguments
			}
		}
	}
	return calls
}

// anthropicStreamTools puts together the tool_use blocks of an Anthropic
// stream.
func anthropicStreamTools(t *testing.T, stream []byte) []streamedToolCall {
	var calls []streamedToolCall
	toolBlock, serverBlock := -1, -1
	for _, ev := range events(t, stream) {
		var e struct {
			Type         string `json:"type"`
			Index        int    `json:"index"`
			ContentBlock struct {
				Type  string          `json:"type"`
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			} `json:"content_block"`
			Delta struct {
				Type        string `json:"type"`
				PartialJSON string `json:"partial_json"`
			} `json:"delta"`
		}
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			t.Fatalf("Anthropic event %q: %v", ev.Data, err)
		}
		switch {
		case e.Type == "content_block_start" && e.ContentBlock.Type == "tool_use":
			if e.ContentBlock.ID == "" || e.ContentBlock.Name == "" || string(e.ContentBlock.Input) != "{}" {
				t.Errorf("tool_use block start: %s", ev.Data)
			}
			toolBlock = e.Index
			calls = append(calls, streamedToolCall{ID: e.ContentBlock.ID, Name: e.ContentBlock.Name})
		case e.Type == "content_block_start" && e.ContentBlock.Type == "server_tool_use":
			serverBlock = e.Index // a web search: not a call of the caller's
		case e.Type == "content_block_delta" && e.Delta.Type == "input_json_delta" && e.Index == serverBlock:
		case e.Type == "content_block_delta" && e.Delta.Type == "input_json_delta":
			if e.Index != toolBlock {
				t.Fatalf("input_json_delta for block %d, tool block %d", e.Index, toolBlock)
			}
			calls[len(calls)-1].Arguments += e.Delta.PartialJSON
		}
	}
	return calls
}

func anthropicStreamText(t *testing.T, stream []byte) string {
	var sb strings.Builder
	for _, ev := range events(t, stream) {
		var e struct {
			Type  string `json:"type"`
			Delta struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"delta"`
		}
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			t.Fatalf("Anthropic event %q: %v", ev.Data, err)
		}
		if e.Type == "content_block_delta" && e.Delta.Type == "text_delta" {
			sb.WriteString(e.Delta.Text)
		}
	}
	return sb.String()
}

// checkAnthropicStream checks a produced Anthropic stream against the
// documented event flow: message_start, then blocks opened and closed in
// order, message_delta, message_stop; or an error event last.
func checkAnthropicStream(t *testing.T, stream []byte, terminated bool) {
	t.Helper()
	evs := events(t, stream)
	state := "start" // start, message, block, delta, stop, error
	blocks := 0      // content blocks started
	for i, ev := range evs {
		var e struct {
			Type    string `json:"type"`
			Index   int    `json:"index"`
			Message *struct {
				ID    string `json:"id"`
				Model string `json:"model"`
				Role  string `json:"role"`
			} `json:"message"`
			Delta struct {
				StopReason *string `json:"stop_reason"`
			} `json:"delta"`
			Usage *anthropicUsage `json:"usage"`
			Error *anthropicError `json:"error"`
		}
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			t.Fatalf("event %d %q: %v", i, ev.Data, err)
		}
		if e.Type != string(ev.Name) {
			t.Errorf("event %d named %q has type %q", i, ev.Name, e.Type)
		}
		bad := func() { t.Errorf("event %d %s in state %s", i, e.Type, state) }
		switch e.Type {
		case "message_start":
			if state != "start" {
				bad()
			}
			if e.Message == nil || !strings.HasPrefix(e.Message.ID, "msg_") || e.Message.Model != callerModel || e.Message.Role != "assistant" {
				t.Errorf("message_start: %s", ev.Data)
			}
			state = "message"
		case "content_block_start":
			if state != "message" {
				bad()
			}
			if e.Index != blocks {
				t.Errorf("event %d starts block %d, want %d", i, e.Index, blocks)
			}
			blocks++
			state = "block"
		case "content_block_delta":
			if state != "block" {
				bad()
			}
			if e.Index != blocks-1 {
				t.Errorf("event %d: delta for block %d, open block %d", i, e.Index, blocks-1)
			}
		case "content_block_stop":
			if state != "block" {
				bad()
			}
			if e.Index != blocks-1 {
				t.Errorf("event %d: stop for block %d, open block %d", i, e.Index, blocks-1)
			}
			state = "message"
		case "message_delta":
			if state != "message" {
				bad()
			}
			if e.Delta.StopReason == nil || e.Usage == nil {
				t.Errorf("message_delta without stop_reason or usage: %s", ev.Data)
			}
			state = "delta"
		case "message_stop":
			if state != "delta" {
				bad()
			}
			state = "stop"
		case "error":
			if e.Error == nil || e.Error.Type == "" || e.Error.Message == "" {
				t.Errorf("error event: %s", ev.Data)
			}
			state = "error"
		case "ping":
		default:
			t.Errorf("event %d: unknown type %q", i, e.Type)
		}
	}
	if want := map[bool]string{true: "stop", false: "error"}[terminated]; state != want {
		t.Errorf("stream ends in state %s, want %s", state, want)
	}
}

func TestStreamUsage(t *testing.T) {
	tests := []struct {
		name  string
		conv  StreamConverter
		path  string
		match string
	}{
		{"anthropic usage with cache to chat", NewMessagesToChatStream(callerModel, true), "testdata/messages_to_chat_stream/thinking_then_text.sse",
			`"usage":{"prompt_tokens":2013,"completion_tokens":40,"total_tokens":2053,"prompt_tokens_details":{"cached_tokens":2000}}`},
		{"chat usage chunk to anthropic", NewChatToMessagesStream(callerModel), "testdata/chat_to_messages_stream/basic.sse",
			`"delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":176,"cache_creation_input_tokens":0,"cache_read_input_tokens":1024,"output_tokens":12}`},
		{"chat length to anthropic", NewChatToMessagesStream(callerModel), "testdata/chat_to_messages_stream/length_no_usage.sse",
			`"stop_reason":"max_tokens"`},
		{"chat refusal to anthropic", NewChatToMessagesStream(callerModel), "testdata/chat_to_messages_stream/refusal.sse",
			`"stop_reason":"refusal"`},
		{"chat tool calls to anthropic", NewChatToMessagesStream(callerModel), "testdata/chat_to_messages_stream/tool_calls.sse",
			`"stop_reason":"tool_use"`},
		{"anthropic tool use to chat", NewMessagesToChatStream(callerModel, true), "testdata/messages_to_chat_stream/tool_use.sse",
			`"finish_reason":"tool_calls"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := os.ReadFile(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := runStream(t, tt.conv, in)
			if !bytes.Contains(out, []byte(tt.match)) {
				t.Errorf("output lacks %s:\n%s", tt.match, out)
			}
		})
	}
}

// TestStreamWithoutUsage: without includeUsage the chat stream has no
// usage chunk ("choices":[]) and still ends with a finish_reason and [DONE].
func TestStreamWithoutUsage(t *testing.T) {
	for _, path := range []string{"testdata/messages_to_chat_stream/thinking_then_text.sse", "testdata/messages_to_chat_stream/tool_use.sse"} {
		in, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out, terminated := runStream(t, NewMessagesToChatStream(callerModel, false), in)
		if bytes.Contains(out, []byte(`"choices":[]`)) || bytes.Contains(out, []byte(`"usage"`)) {
			t.Errorf("%s: a usage chunk unasked:\n%s", path, out)
		}
		if !terminated || !bytes.HasSuffix(out, []byte("\"}]}\n\ndata: [DONE]\n\n")) {
			t.Errorf("%s: not ended by a finish_reason and [DONE]:\n%s", path, out)
		}
	}
}

func TestStreamErrors(t *testing.T) {
	const (
		msgStart  = `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}`
		chatFirst = `{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`
	)
	type event struct{ name, data string }
	tests := []struct {
		name        string
		conv        func() StreamConverter
		events      []event
		unsupported string // the Field of the *UnsupportedError the last event gives
		malformed   bool   // the last event gives an error wrapping ErrMalformed
	}{
		{"anthropic server_tool_use block", func() StreamConverter { return NewMessagesToChatStream(callerModel, true) },
			[]event{{"message_start", msgStart}, {"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"s1","name":"code_execution","input":{}}}`}},
			"server and MCP tool calls (server_tool_use blocks)", false},
		{"anthropic tool_use without a name", func() StreamConverter { return NewMessagesToChatStream(callerModel, true) },
			[]event{{"message_start", msgStart}, {"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","input":{}}}`}},
			"", true},
		{"anthropic input_json_delta outside a tool_use block", func() StreamConverter { return NewMessagesToChatStream(callerModel, true) },
			[]event{{"message_start", msgStart}, {"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`}},
			"", true},
		{"anthropic input_json_delta for another block", func() StreamConverter { return NewMessagesToChatStream(callerModel, true) },
			[]event{{"message_start", msgStart}, {"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{}}}`},
				{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`}},
			"", true},
		{"anthropic partial_json not a string", func() StreamConverter { return NewMessagesToChatStream(callerModel, true) },
			[]event{{"message_start", msgStart}, {"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{}}}`},
				{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":{}}}`}},
			"", true},
		{"anthropic bad JSON", func() StreamConverter { return NewMessagesToChatStream(callerModel, true) },
			[]event{{"message_start", msgStart}, {"content_block_delta", `{"type":"content_block_delta",`}},
			"", true},
		{"anthropic text not a string", func() StreamConverter { return NewMessagesToChatStream(callerModel, true) },
			[]event{{"message_start", msgStart}, {"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":5}}`}},
			"", true},
		{"anthropic nameless bad JSON", func() StreamConverter { return NewMessagesToChatStream(callerModel, true) },
			[]event{{"", `not json`}},
			"", true},
		{"openai function_call delta", func() StreamConverter { return NewChatToMessagesStream(callerModel) },
			[]event{{"", chatFirst}, {"", `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"function_call":{"name":"f","arguments":""}},"finish_reason":null}]}`}},
			"functions", false},
		{"openai custom tool call", func() StreamConverter { return NewChatToMessagesStream(callerModel) },
			[]event{{"", chatFirst}, {"", `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"custom","custom":{"name":"f"}}]},"finish_reason":null}]}`}},
			`tool calls of type "custom"`, false},
		{"openai tool call without a name", func() StreamConverter { return NewChatToMessagesStream(callerModel) },
			[]event{{"", chatFirst}, {"", `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"arguments":"{}"}}]},"finish_reason":null}]}`}},
			"", true},
		{"openai tool call going back", func() StreamConverter { return NewChatToMessagesStream(callerModel) },
			[]event{{"", chatFirst},
				{"", `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}},{"index":1,"id":"c2","type":"function","function":{"name":"g","arguments":""}}]},"finish_reason":null}]}`},
				{"", `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":null}]}`}},
			"", true},
		{"openai tool call after text", func() StreamConverter { return NewChatToMessagesStream(callerModel) },
			[]event{{"", chatFirst},
				{"", `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}]}`},
				{"", `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`},
				{"", `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":null}]}`}},
			"", true},
		{"openai arguments not a string", func() StreamConverter { return NewChatToMessagesStream(callerModel) },
			[]event{{"", chatFirst}, {"", `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":{}}}]},"finish_reason":null}]}`}},
			"", true},
		{"openai second choice", func() StreamConverter { return NewChatToMessagesStream(callerModel) },
			[]event{{"", chatFirst}, {"", `{"id":"chatcmpl-1","choices":[{"index":1,"delta":{"content":"b"},"finish_reason":null}]}`}},
			"n > 1", false},
		{"openai bad JSON", func() StreamConverter { return NewChatToMessagesStream(callerModel) },
			[]event{{"", chatFirst}, {"", `{"id":`}},
			"", true},
		{"openai content not a string", func() StreamConverter { return NewChatToMessagesStream(callerModel) },
			[]event{{"", chatFirst}, {"", `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":["a"]},"finish_reason":null}]}`}},
			"", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.conv()
			var err error
			for i, ev := range tt.events {
				_, _, err = c.Event([]byte(ev.name), []byte(ev.data))
				if i < len(tt.events)-1 && err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
			}
			if tt.unsupported != "" {
				var ue *UnsupportedError
				if !errors.As(err, &ue) || ue.Field != tt.unsupported {
					t.Errorf("err = %v, want *UnsupportedError{%q}", err, tt.unsupported)
				}
			}
			if tt.malformed && !errors.Is(err, ErrMalformed) {
				t.Errorf("err = %v, want one wrapping ErrMalformed", err)
			}
			if c.Terminated() {
				t.Error("Terminated() after a failed event")
			}
		})
	}
}

func TestStreamAfterDone(t *testing.T) {
	tests := []struct {
		name     string
		conv     StreamConverter
		last     string // the terminal event's name and data
		lastData string
	}{
		{"anthropic to chat", NewMessagesToChatStream(callerModel, true), "message_stop", `{"type":"message_stop"}`},
		{"chat to anthropic", NewChatToMessagesStream(callerModel), "", "[DONE]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frames, done, err := tt.conv.Event([]byte(tt.last), []byte(tt.lastData))
			if err != nil || !done || !tt.conv.Terminated() {
				t.Fatalf("terminal event: done %v, err %v, terminated %v", done, err, tt.conv.Terminated())
			}
			// A terminal event alone still gives a complete, valid stream.
			if tt.last == "" {
				checkAnthropicStream(t, frames, true)
			} else {
				checkOpenAIStream(t, frames, true)
			}
			frames, done, err = tt.conv.Event([]byte(tt.last), []byte(tt.lastData))
			if frames != nil || !done || err != nil {
				t.Errorf("after done: frames %q, done %v, err %v; want nil, true, nil", frames, done, err)
			}
		})
	}
}

func TestStreamCut(t *testing.T) {
	// The upstream stream ends before its terminal event: the converter
	// must not claim it terminated.
	in, err := os.ReadFile("testdata/messages_to_chat_stream/basic.sse")
	if err != nil {
		t.Fatal(err)
	}
	cut := in[:bytes.Index(in, []byte("event: message_delta"))]
	c := NewMessagesToChatStream(callerModel, true)
	out, terminated := runStream(t, c, cut)
	if terminated {
		t.Error("Terminated() for a cut stream")
	}
	if bytes.Contains(out, []byte("[DONE]")) {
		t.Error("[DONE] written for a cut stream")
	}
}
