package translate

import "testing"

// The benchmarks measure the steady state of a stream: one text delta event
// through a converter that has seen the stream's start.

func BenchmarkMessagesToChatStreamEvent(b *testing.B) {
	c := NewMessagesToChatStream(callerModel, true)
	start := []byte(`{"type":"message_start","message":{"id":"msg_01Xq8Vh3d9K2","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}`)
	if _, _, err := c.Event([]byte("message_start"), start); err != nil {
		b.Fatal(err)
	}
	name := []byte("content_block_delta")
	data := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" a few more \"words\" of the answer,\n"}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := c.Event(name, data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkChatToMessagesStreamEvent(b *testing.B) {
	c := NewChatToMessagesStream(callerModel)
	first := []byte(`{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`)
	if _, _, err := c.Event(nil, first); err != nil {
		b.Fatal(err)
	}
	data := []byte(`{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":" a few more \"words\" of the answer,\n"},"logprobs":null,"finish_reason":null}],"usage":null}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := c.Event(nil, data); err != nil {
			b.Fatal(err)
		}
	}
}

// The tool benchmarks measure one piece of a tool call's arguments.

func BenchmarkMessagesToChatStreamToolEvent(b *testing.B) {
	c := NewMessagesToChatStream(callerModel, true)
	for _, ev := range [][2]string{
		{"message_start", `{"type":"message_start","message":{"id":"msg_01Xq8Vh3d9K2","type":"message","role":"assistant","content":[],"usage":{"input_tokens":25,"output_tokens":1}}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}`},
	} {
		if _, _, err := c.Event([]byte(ev[0]), []byte(ev[1])); err != nil {
			b.Fatal(err)
		}
	}
	name := []byte("content_block_delta")
	data := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := c.Event(name, data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkChatToMessagesStreamToolEvent(b *testing.B) {
	c := NewChatToMessagesStream(callerModel)
	first := []byte(`{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]}`)
	if _, _, err := c.Event(nil, first); err != nil {
		b.Fatal(err)
	}
	data := []byte(`{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"location\": \"San Fra"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := c.Event(nil, data); err != nil {
			b.Fatal(err)
		}
	}
}
