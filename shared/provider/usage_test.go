package provider

import (
	"testing"

	"switchyard.dev/shared/usage"
)

func TestResponseUsage(t *testing.T) {
	tests := []struct {
		name string
		f    Format
		body string
		want usage.Tokens
		ok   bool
	}{
		{"openai chat with details", FormatOpenAI,
			`{"id":"chatcmpl-1","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":300,"total_tokens":1500,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":256,"audio_tokens":0}}}`,
			usage.Tokens{Input: 176, CachedInput: 1024, Output: 44, Reasoning: 256}, true},
		{"openai embeddings", FormatOpenAI,
			`{"object":"list","data":[],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`,
			usage.Tokens{Input: 8}, true},
		{"anthropic with cache", FormatAnthropic,
			`{"id":"msg_1","type":"message","usage":{"input_tokens":21,"cache_creation_input_tokens":188086,"cache_read_input_tokens":0,"output_tokens":393}}`,
			usage.Tokens{Input: 21, CacheWrite: 188086, Output: 393}, true},
		{"no usage", FormatOpenAI, `{"id":"x","choices":[]}`, usage.Tokens{}, false},
		{"usage null", FormatOpenAI, `{"id":"x","usage":null}`, usage.Tokens{}, false},
		{"float counts", FormatOpenAI, `{"usage":{"prompt_tokens":10.0,"completion_tokens":2}}`, usage.Tokens{Input: 10, Output: 2}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := responseUsage(tt.f, []byte(tt.body)) // a response's usage object, as CheckAnswer reads it
			if ok != tt.ok || got != tt.want {
				t.Errorf("got %+v %v, want %+v %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestEventUsage(t *testing.T) {
	t.Run("openai usage chunk", func(t *testing.T) {
		var tok usage.Tokens
		ok, only := EventUsage(FormatOpenAI, nil, []byte(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],"usage":null}`), &tok)
		if ok || only {
			t.Fatalf("content chunk with usage null: %v %v", ok, only)
		}
		ok, only = EventUsage(FormatOpenAI, nil, []byte(`{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`), &tok)
		if !ok || !only || tok != (usage.Tokens{Input: 9, Output: 12}) {
			t.Fatalf("usage chunk: %v %v %+v", ok, only, tok)
		}
	})
	t.Run("usage on the last content chunk (Mistral, Gemini)", func(t *testing.T) {
		var tok usage.Tokens
		ok, only := EventUsage(FormatOpenAI, nil, []byte(`{"id":"c","object":"chat.completion.chunk","model":"mistral-small-latest","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"total_tokens":17,"completion_tokens":10}}`), &tok)
		if !ok || only || tok != (usage.Tokens{Input: 7, Output: 10}) {
			t.Fatalf("%v %v %+v", ok, only, tok)
		}
	})
	t.Run("anthropic start and delta", func(t *testing.T) {
		var tok usage.Tokens
		ok, _ := EventUsage(FormatAnthropic, []byte("message_start"), []byte(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4","stop_reason":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":100,"output_tokens":1}}}`), &tok)
		if !ok || tok != (usage.Tokens{Input: 25, CachedInput: 100, Output: 1}) {
			t.Fatalf("message_start: %v %+v", ok, tok)
		}
		if ok, _ := EventUsage(FormatAnthropic, []byte("content_block_delta"), []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"usage"}}`), &tok); ok {
			t.Fatal("a text delta saying usage is not usage")
		}
		ok, _ = EventUsage(FormatAnthropic, []byte("message_delta"), []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`), &tok)
		if !ok || tok != (usage.Tokens{Input: 25, CachedInput: 100, Output: 15}) {
			t.Fatalf("message_delta: %v %+v", ok, tok)
		}
	})
	t.Run("anthropic without event names", func(t *testing.T) {
		var tok usage.Tokens
		EventUsage(FormatAnthropic, nil, []byte(`{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}`), &tok)
		EventUsage(FormatAnthropic, nil, []byte(`{"type":"message_delta","usage":{"output_tokens":4}}`), &tok)
		if tok != (usage.Tokens{Input: 3, Output: 4}) {
			t.Fatalf("%+v", tok)
		}
	})
}

func TestStreamUsageOption(t *testing.T) {
	tests := []struct {
		typ, version string
		option       bool
		rejects      bool
	}{
		{"openai", "", true, false},
		{"groq", "", true, false},
		{"gemini", "", true, false},
		{"vllm", "", true, false},
		{"mistral", "", false, true},
		{"anthropic", "", false, false},
		{"azure", "2024-06-01", false, true},
		{"azure", "2024-10-21", true, false},
	}
	for _, tt := range tests {
		a := New(tt.typ, "http://127.0.0.1:1", tt.version, nil)
		if a.StreamUsageOption() != tt.option || a.RejectsStreamOptions() != tt.rejects {
			t.Errorf("%s %s: option %v rejects %v, want %v %v", tt.typ, tt.version, a.StreamUsageOption(), a.RejectsStreamOptions(), tt.option, tt.rejects)
		}
	}
}

func BenchmarkEventUsage(b *testing.B) {
	content := []byte(`{"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_4d06d0f0f5","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}],"usage":null}`)
	last := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`)
	var tok usage.Tokens
	b.Run("content chunk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			EventUsage(FormatOpenAI, nil, content, &tok)
		}
	})
	b.Run("usage chunk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			EventUsage(FormatOpenAI, nil, last, &tok)
		}
	})
}
