package provider

import (
	"net/http"
	"testing"
)

func TestURLAndAuth(t *testing.T) {
	tests := []struct {
		name, typ, base, version string
		op                       Op
		model                    string
		wantURL                  string
		wantHeader, wantValue    string
	}{
		{"openai chat", "openai", "", "", OpChat, "gpt-4o", "https://api.openai.com/v1/chat/completions", "Authorization", "Bearer s3cret"},
		{"openai embeddings", "openai", "http://127.0.0.1:9/v1/", "", OpEmbeddings, "e", "http://127.0.0.1:9/v1/embeddings", "Authorization", "Bearer s3cret"},
		{"gemini compat", "gemini", "", "", OpChat, "gemini-2.5-flash", "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions", "Authorization", "Bearer s3cret"},
		{"anthropic", "anthropic", "https://api.anthropic.com", "", OpChat, "claude", "https://api.anthropic.com/v1/messages", "X-Api-Key", "s3cret"},
		{"anthropic base with v1", "anthropic", "http://h/v1", "", OpModels, "", "http://h/v1/models", "Anthropic-Version", DefaultAnthropicVersion},
		{"azure deployment", "azure", "https://r.openai.azure.com", "2024-10-21", OpChat, "my gpt", "https://r.openai.azure.com/openai/deployments/my%20gpt/chat/completions?api-version=2024-10-21", "Api-Key", "s3cret"},
		{"azure embeddings", "azure", "https://r.openai.azure.com/", "2024-10-21", OpEmbeddings, "emb", "https://r.openai.azure.com/openai/deployments/emb/embeddings?api-version=2024-10-21", "Api-Key", "s3cret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New(tt.typ, tt.base, tt.version, map[string]string{"x-extra": "1"})
			if got := a.URL(tt.op, tt.model); got != tt.wantURL {
				t.Errorf("URL = %q, want %q", got, tt.wantURL)
			}
			h := http.Header{}
			a.Authorize(h, "s3cret")
			if got := h.Get(tt.wantHeader); got != tt.wantValue {
				t.Errorf("%s = %q, want %q", tt.wantHeader, got, tt.wantValue)
			}
			if h.Get("X-Extra") != "1" {
				t.Errorf("fixed header missing: %v", h)
			}
		})
	}
}

func TestSupports(t *testing.T) {
	if New("anthropic", "", "", nil).Supports(OpEmbeddings) {
		t.Error("anthropic has no embeddings")
	}
	if !New("openai", "", "", nil).Supports(OpEmbeddings) {
		t.Error("openai has embeddings")
	}
}

func TestTakesMaxCompletionTokens(t *testing.T) {
	tests := []struct {
		typ, version string
		want         bool
	}{
		{"openai", "", true},
		{"azure", "2024-10-21", true},
		{"azure", "2025-04-01-preview", true},
		{"azure", "2024-06-01", false}, // before the parameter existed on Azure
		{"vllm", "", false},
		{"groq", "", false},
		{"mistral", "", false},
		{"openai-compatible", "", false},
		{"anthropic", "", false},
	}
	for _, tt := range tests {
		if got := New(tt.typ, "http://127.0.0.1:1", tt.version, nil).TakesMaxCompletionTokens(); got != tt.want {
			t.Errorf("%s %s: %v, want %v", tt.typ, tt.version, got, tt.want)
		}
	}
}

func TestErrorIn200(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		status int
		isErr  bool
	}{
		{"openrouter numeric code", `{"error":{"code":502,"message":"Provider returned error","metadata":{"raw":"x"}}}`, 502, true},
		{"openrouter 429", `{"error":{"code":429,"message":"Rate limited"}}`, 429, true},
		{"string code", `{"error":{"code":"server_error","message":"boom"}}`, 502, true},
		{"null error", `{"id":"x","error":null,"choices":[]}`, 0, false},
		{"normal completion", `{"id":"chatcmpl-1","choices":[{"index":0}]}`, 0, false},
		{"not json", `hello`, 0, false},
		{"error string", ` {"error":"bad things"}`, 502, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, isErr := ErrorIn200([]byte(tt.body))
			if status != tt.status || isErr != tt.isErr {
				t.Errorf("ErrorIn200 = %d,%v want %d,%v", status, isErr, tt.status, tt.isErr)
			}
		})
	}
}

func TestEmptyChoices(t *testing.T) {
	if !CheckAnswer(FormatOpenAI, OpChat, FormatOpenAI, []byte(`{"id":"x","choices":[ ]}`)).NoChoices {
		t.Error("empty choices not seen")
	}
	if CheckAnswer(FormatOpenAI, OpChat, FormatOpenAI, []byte(`{"id":"x","choices":[{"index":0}]}`)).NoChoices {
		t.Error("choices seen as empty")
	}
	if CheckAnswer(FormatOpenAI, OpChat, FormatOpenAI, []byte(`{"object":"list","data":[]}`)).NoChoices {
		t.Error("no choices field is not empty choices")
	}
}

func TestInspectEvent(t *testing.T) {
	tests := []struct {
		name  string
		f     Format
		event string
		data  string
		want  EventKind
	}{
		{"done", FormatOpenAI, "", "[DONE]", EventTerminal},
		{"content", FormatOpenAI, "", `{"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}`, EventData},
		{"finish", FormatOpenAI, "", `{"choices":[{"delta":{},"finish_reason": "stop"}]}`, EventTerminal},
		{"openai error", FormatOpenAI, "", `{"error":{"message":"overloaded"}}`, EventError},
		{"message_stop", FormatAnthropic, "message_stop", `{"type":"message_stop"}`, EventTerminal},
		{"anthropic error", FormatAnthropic, "error", `{"type":"error"}`, EventError},
		{"anthropic delta", FormatAnthropic, "content_block_delta", `{"type":"content_block_delta"}`, EventData},
		{"openrouter mid-stream error", FormatOpenAI, "", `{"id":"gen-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}],"error":{"code":"server_error","message":"x"}}`, EventError},
		{"null error member", FormatOpenAI, "", `{"choices":[{"delta":{"content":"hi"},"finish_reason":null}],"error":null}`, EventData},
		{"the word error in content", FormatOpenAI, "", `{"choices":[{"delta":{"content":"\"error\""},"finish_reason":null}]}`, EventData},
		{"anthropic error without a name", FormatAnthropic, "", `{"type":"error","error":{"type":"overloaded_error","message":"x"}}`, EventError},
		{"openai-shaped error in an anthropic stream", FormatAnthropic, "", `{"error":{"message":"x","type":"invalid_request_error"}}`, EventError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := InspectEvent(tt.f, []byte(tt.event), []byte(tt.data)); got != tt.want {
				t.Errorf("InspectEvent = %d, want %d", got, tt.want)
			}
		})
	}
}

func BenchmarkInspectEvent(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hello"},"finish_reason":null}]}`)
	b.ReportAllocs()
	for b.Loop() {
		InspectEvent(FormatOpenAI, nil, data)
	}
}

// TestResponsesEventAllocs: reading a Responses API event's type, named or
// only in its data, allocates nothing (InspectEvent and IsPreamble run on
// every event a stream relays).
func TestResponsesEventAllocs(t *testing.T) {
	data := []byte(`{"type":"response.output_text.delta","delta":"hello"}`)
	for _, name := range [][]byte{nil, []byte("response.output_text.delta")} {
		if n := testing.AllocsPerRun(100, func() {
			InspectEvent(FormatResponses, name, data)
			IsPreamble(FormatResponses, name, data)
		}); n != 0 {
			t.Errorf("event name %q: %v allocations, want 0", name, n)
		}
	}
}

func TestIsPreamble(t *testing.T) {
	tests := []struct {
		name  string
		f     Format
		event string
		data  string
		want  bool
	}{
		{"openai role chunk", FormatOpenAI, "", `{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, true},
		{"openai role null content", FormatOpenAI, "", `{"choices":[{"delta":{"role":"assistant","content":null}}]}`, true},
		{"openai content", FormatOpenAI, "", `{"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}`, false},
		{"openai role with content", FormatOpenAI, "", `{"choices":[{"delta":{"role":"assistant","content":"hi"}}]}`, false},
		{"message_start", FormatAnthropic, "message_start", `{}`, true},
		{"ping", FormatAnthropic, "ping", `{}`, true},
		{"text block start", FormatAnthropic, "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, true},
		{"delta", FormatAnthropic, "content_block_delta", `{}`, false},
		{"responses created", FormatResponses, "response.created", `{"type":"response.created","sequence_number":0}`, true},
		{"responses message item", FormatResponses, "response.output_item.added", `{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`, true},
		{"responses reasoning item", FormatResponses, "response.output_item.added", `{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`, true},
		{"responses function call item", FormatResponses, "response.output_item.added", `{"type":"response.output_item.added","output_index":0,"item":{"id":"fc_1","type":"function_call","name":"f","call_id":"c","arguments":""}}`, false},
		{"responses content part", FormatResponses, "response.content_part.added", `{"type":"response.content_part.added","item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`, true},
		{"responses text delta", FormatResponses, "response.output_text.delta", `{"type":"response.output_text.delta","delta":"hi"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsPreamble(tt.f, []byte(tt.event), []byte(tt.data)); got != tt.want {
				t.Errorf("IsPreamble = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOperationsBeyondChat(t *testing.T) {
	oa := New("openai", "", "", nil)
	an := New("anthropic", "", "", nil)
	az := New("azure", "https://x.openai.azure.com", "2024-10-21", nil)
	for _, tt := range []struct {
		a    *Adapter
		op   Op
		url  string
		ok   bool
		resp string
	}{
		{oa, OpCompletions, "https://api.openai.com/v1/completions", true, `{"choices":[]}`},
		{oa, OpModerations, "https://api.openai.com/v1/moderations", true, `{"results":[]}`},
		{oa, OpImages, "https://api.openai.com/v1/images/generations", true, `{"data":[]}`},
		{oa, OpCountTokens, "", false, ``},
		{an, OpCountTokens, "https://api.anthropic.com/v1/messages/count_tokens", true, `{"input_tokens":12}`},
		{an, OpCompletions, "", false, ``},
		{an, OpImages, "", false, ``},
		{az, OpCompletions, "https://x.openai.azure.com/openai/deployments/inst/completions?api-version=2024-10-21", true, `{"choices":[]}`},
		{az, OpImages, "https://x.openai.azure.com/openai/deployments/inst/images/generations?api-version=2024-10-21", true, `{"data":[]}`},
		{az, OpModerations, "", false, ``},
	} {
		if got := tt.a.Supports(tt.op); got != tt.ok {
			t.Errorf("%s op %d: Supports = %v, want %v", tt.a.Type(), tt.op, got, tt.ok)
		}
		if !tt.ok {
			continue
		}
		if got := tt.a.URL(tt.op, "inst"); got != tt.url {
			t.Errorf("%s op %d: URL = %s, want %s", tt.a.Type(), tt.op, got, tt.url)
		}
		if err := CheckAnswer(tt.a.Format(), tt.op, tt.a.Format(), []byte(tt.resp)).Invalid; err != nil {
			t.Errorf("%s op %d: %s is not valid: %v", tt.a.Type(), tt.op, tt.resp, err)
		}
		if err := CheckAnswer(tt.a.Format(), tt.op, tt.a.Format(), []byte(`{"unrelated":1}`)).Invalid; err == nil {
			t.Errorf("%s op %d: an unrelated object passes", tt.a.Type(), tt.op)
		}
	}
}

func TestEndsStream(t *testing.T) {
	tests := []struct {
		name string
		f    Format
		data string
		want bool
	}{
		{"done", FormatOpenAI, "[DONE]", true},
		{"finish_reason: the usage chunk may follow", FormatOpenAI, `{"choices":[{"delta":{},"finish_reason":"stop"}]}`, false},
		{"message_stop", FormatAnthropic, `{"type":"message_stop"}`, true},
		{"response.completed", FormatResponses, `{"type":"response.completed"}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EndsStream(tt.f, []byte(tt.data)); got != tt.want {
				t.Errorf("EndsStream = %v, want %v", got, tt.want)
			}
		})
	}
}
