package fakeprovider

import (
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestChatNonStream(t *testing.T) {
	s := start(t, Options{Name: "wire"})
	c := client(t)
	tests := []struct {
		name, path, model, wantModel string
		hdr                          map[string]string
	}{
		{"openai", "/v1/chat/completions", "gpt-4o-mini", "gpt-4o-mini", map[string]string{"Authorization": "Bearer sk-1"}},
		{"no v1 prefix", "/chat/completions", "gpt-4o", "gpt-4o", map[string]string{"Authorization": "Bearer sk-1"}},
		{"azure", "/openai/deployments/prod-4o/chat/completions?api-version=2024-02-01", "", "prod-4o", map[string]string{"api-key": "az-1"}},
		{"gemini", "/v1beta/openai/chat/completions", "gemini-2.0-flash", "gemini-2.0-flash", map[string]string{"Authorization": "Bearer gm-1"}},
		{"openrouter", "/api/v1/chat/completions", "openai/gpt-4o", "openai/gpt-4o", map[string]string{"Authorization": "Bearer or-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := call(t, c, "POST", s.URL()+tt.path, chatBody(tt.model, false, false), tt.hdr)
			body := readAll(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content-type %q", ct)
			}
			if resp.Header.Get("x-request-id") == "" {
				t.Error("no x-request-id")
			}
			var got chatCompletion
			decode(t, body, &got)
			if got.Object != "chat.completion" || !strings.HasPrefix(got.ID, "chatcmpl-") || got.Model != tt.wantModel || got.Created == 0 {
				t.Errorf("envelope: %s", body)
			}
			if len(got.Choices) != 1 || got.Choices[0].Message.Role != "assistant" || got.Choices[0].FinishReason != "stop" {
				t.Fatalf("choices: %s", body)
			}
			if want := "chunk 0 chunk 1 chunk 2 chunk 3 chunk 4"; got.Choices[0].Message.Content != want {
				t.Errorf("content %q, want %q", got.Choices[0].Message.Content, want)
			}
			if u := got.Usage; u.PromptTokens == 0 || u.CompletionTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Errorf("usage %+v", u)
			}
		})
	}
}

func TestChatStream(t *testing.T) {
	s := start(t, Options{Name: "wire", Chunks: 4})
	c := client(t)
	tests := []struct {
		name, path string
		usage      bool
		preamble   int // chunks before the role chunk
	}{
		{"openai", "/v1/chat/completions", false, 0},
		{"openai with usage", "/v1/chat/completions", true, 0},
		{"azure", "/openai/deployments/d1/chat/completions?api-version=2024-02-01", false, 1},
		{"gemini", "/v1beta/openai/chat/completions", true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := call(t, c, "POST", s.URL()+tt.path, chatBody("gpt-4o-mini", true, tt.usage), nil)
			defer resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			if resp.Header.Get("x-request-id") == "" {
				t.Error("no x-request-id")
			}
			events, err := readSSE(resp.Body)
			if err != nil {
				t.Fatalf("read stream: %v", err)
			}
			// preamble + role + 4 content + finish (+ usage) + [DONE]
			want := tt.preamble + 1 + 4 + 1 + 1
			if tt.usage {
				want++
			}
			if len(events) != want {
				t.Fatalf("%d events, want %d: %+v", len(events), want, events)
			}
			if events[len(events)-1].Data != "[DONE]" {
				t.Errorf("last event %q, want [DONE]", events[len(events)-1].Data)
			}
			var role chatChunk
			decode(t, []byte(events[tt.preamble].Data), &role)
			if role.Object != "chat.completion.chunk" || role.Choices[0].Delta.Role != "assistant" {
				t.Errorf("first chunk: %s", events[tt.preamble].Data)
			}
			finishIdx := tt.preamble + 5
			var fin struct {
				Choices []struct {
					Delta        map[string]any `json:"delta"`
					FinishReason *string        `json:"finish_reason"`
				} `json:"choices"`
			}
			decode(t, []byte(events[finishIdx].Data), &fin)
			if len(fin.Choices) != 1 || fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "stop" || len(fin.Choices[0].Delta) != 0 {
				t.Errorf("finish chunk: %s", events[finishIdx].Data)
			}
			if tt.usage {
				var u struct {
					Choices []any      `json:"choices"`
					Usage   *chatUsage `json:"usage"`
				}
				decode(t, []byte(events[finishIdx+1].Data), &u)
				if len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 8 {
					t.Errorf("usage chunk: %s", events[finishIdx+1].Data)
				}
			}
			if got := chatText(t, events); got != completionText(4) {
				t.Errorf("streamed text %q, want %q", got, completionText(4))
			}
		})
	}
}

func TestMessages(t *testing.T) {
	s := start(t, Options{Name: "anthropic"})
	c := client(t)
	hdr := map[string]string{"x-api-key": "sk-ant-1", "anthropic-version": "2023-06-01"}

	t.Run("non-stream", func(t *testing.T) {
		resp := call(t, c, "POST", s.URL()+"/v1/messages", messagesBody("claude-3-5-haiku-latest", false), hdr)
		body := readAll(t, resp)
		if resp.StatusCode != 200 || resp.Header.Get("request-id") == "" || resp.Header.Get("x-request-id") == "" {
			t.Fatalf("status %d headers %v: %s", resp.StatusCode, resp.Header, body)
		}
		var m map[string]any
		decode(t, body, &m)
		want := map[string]any{
			"type": "message", "role": "assistant", "model": "claude-3-5-haiku-latest",
			"stop_reason": "end_turn", "stop_sequence": nil,
			"content": []any{map[string]any{"type": "text", "text": completionText(DefaultChunks)}},
			"usage":   map[string]any{"input_tokens": 4.0, "output_tokens": 10.0},
		}
		for k, v := range want {
			if !reflect.DeepEqual(m[k], v) {
				t.Errorf("%s = %#v, want %#v", k, m[k], v)
			}
		}
		if id, _ := m["id"].(string); !strings.HasPrefix(id, "msg_") {
			t.Errorf("id %q", id)
		}
	})

	t.Run("stream", func(t *testing.T) {
		resp := call(t, c, "POST", s.URL()+"/v1/messages", messagesBody("claude-3-5-haiku-latest", true), hdr)
		defer resp.Body.Close()
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("content-type %q", resp.Header.Get("Content-Type"))
		}
		events, err := readSSE(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range events {
			names = append(names, e.Name)
			var typ struct {
				Type string `json:"type"`
			}
			decode(t, []byte(e.Data), &typ)
			if typ.Type != e.Name {
				t.Errorf("event %s has type %q", e.Name, typ.Type)
			}
		}
		want := []string{"message_start", "content_block_start", "ping",
			"content_block_delta", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_delta",
			"content_block_stop", "message_delta", "message_stop"}
		if !slices.Equal(names, want) {
			t.Fatalf("events %v, want %v", names, want)
		}
		if got := messageText(t, events); got != completionText(DefaultChunks) {
			t.Errorf("text %q", got)
		}
		var md struct {
			Delta struct {
				StopReason string `json:"stop_reason"`
			} `json:"delta"`
			Usage struct {
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		}
		decode(t, []byte(events[9].Data), &md)
		if md.Delta.StopReason != "end_turn" || md.Usage.OutputTokens != 10 {
			t.Errorf("message_delta %s", events[9].Data)
		}
	})
}

func TestEmbeddings(t *testing.T) {
	s := start(t, Options{Name: "emb"})
	c := client(t)
	tests := []struct {
		name, path, body string
		n, dim           int
		base64           bool
	}{
		{"string", "/v1/embeddings", `{"model":"text-embedding-3-small","input":"hello world"}`, 1, embeddingDim, false},
		{"array", "/v1/embeddings", `{"model":"text-embedding-3-small","input":["hello world","bye"]}`, 2, embeddingDim, false},
		{"tokens", "/v1/embeddings", `{"model":"text-embedding-3-small","input":[1,2,3]}`, 1, embeddingDim, false},
		{"dimensions", "/v1/embeddings", `{"model":"text-embedding-3-small","input":"hello world","dimensions":4}`, 1, 4, false},
		{"base64", "/v1/embeddings", `{"model":"text-embedding-3-small","input":"hello world","encoding_format":"base64"}`, 1, embeddingDim, true},
		{"azure", "/openai/deployments/emb/embeddings?api-version=2024-02-01", `{"input":"hello world"}`, 1, embeddingDim, false},
		{"gemini", "/v1beta/openai/embeddings", `{"model":"text-embedding-004","input":["hello world"]}`, 1, embeddingDim, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := call(t, c, "POST", s.URL()+tt.path, tt.body, nil)
			body := readAll(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var got struct {
				Object string `json:"object"`
				Data   []struct {
					Object    string          `json:"object"`
					Index     int             `json:"index"`
					Embedding json.RawMessage `json:"embedding"`
				} `json:"data"`
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
				} `json:"usage"`
			}
			decode(t, body, &got)
			if got.Object != "list" || len(got.Data) != tt.n || got.Usage.PromptTokens == 0 {
				t.Fatalf("body %s", body)
			}
			for i, d := range got.Data {
				if d.Object != "embedding" || d.Index != i {
					t.Errorf("data[%d] = %s", i, body)
				}
				if tt.base64 {
					var s string
					decode(t, d.Embedding, &s)
					raw, err := base64.StdEncoding.DecodeString(s)
					if err != nil || len(raw) != 4*tt.dim {
						t.Errorf("base64 embedding %q: %v", s, err)
					}
					continue
				}
				var vec []float32
				decode(t, d.Embedding, &vec)
				if len(vec) != tt.dim {
					t.Errorf("dim %d, want %d", len(vec), tt.dim)
				}
				if i == 0 && !tt.base64 && strings.Contains(tt.body, `"hello world"`) && !slices.Equal(vec, Embed("hello world", tt.dim)) {
					t.Errorf("embedding of %q is not deterministic: %v", "hello world", vec)
				}
			}
		})
	}
}

func TestModels(t *testing.T) {
	s := start(t, Options{Name: "models", Models: []string{"m-a", "m-b"}})
	c := client(t)
	t.Run("openai", func(t *testing.T) {
		for _, path := range []string{"/v1/models", "/models", "/v1beta/openai/models"} {
			body := readAll(t, call(t, c, "GET", s.URL()+path, "", map[string]string{"Authorization": "Bearer k"}))
			var got struct {
				Object string        `json:"object"`
				Data   []openAIModel `json:"data"`
			}
			decode(t, body, &got)
			if got.Object != "list" || len(got.Data) != 2 || got.Data[0].Object != "model" || !strings.HasSuffix(got.Data[1].ID, "m-b") {
				t.Errorf("%s: %s", path, body)
			}
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		body := readAll(t, call(t, c, "GET", s.URL()+"/v1/models", "", map[string]string{"x-api-key": "k", "anthropic-version": "2023-06-01"}))
		var got struct {
			Data    []anthropicModel `json:"data"`
			HasMore *bool            `json:"has_more"`
			FirstID string           `json:"first_id"`
			LastID  string           `json:"last_id"`
		}
		decode(t, body, &got)
		if len(got.Data) != 2 || got.Data[0].Type != "model" || got.Data[0].DisplayName == "" || got.Data[0].CreatedAt == "" ||
			got.HasMore == nil || *got.HasMore || got.FirstID != "m-a" || got.LastID != "m-b" {
			t.Errorf("anthropic models: %s", body)
		}
	})
}

func TestUnknownPathAndBadJSON(t *testing.T) {
	s := start(t, Options{Name: "bad"})
	c := client(t)
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"unknown path", "POST", "/v1/nope", `{}`, 404, ""},
		{"bad json openai", "POST", "/v1/chat/completions", `{nope`, 400, ""},
		{"bad json anthropic", "POST", "/v1/messages", `{nope`, 400, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := call(t, c, tt.method, s.URL()+tt.path, tt.body, nil)
			body := readAll(t, resp)
			if resp.StatusCode != tt.status || !json.Valid(body) {
				t.Fatalf("status %d body %s", resp.StatusCode, body)
			}
			if tt.code != "" && !strings.Contains(string(body), tt.code) {
				t.Errorf("body %s lacks %s", body, tt.code)
			}
		})
	}
	if n := s.CountCalls(nil); n != len(tests) {
		t.Errorf("recorded %d calls, want %d", n, len(tests))
	}
}

func TestHandlerWithoutListener(t *testing.T) {
	s := New(Options{Name: "inproc"})
	defer s.Close()
	if s.URL() != "" || s.Addr() != "" {
		t.Errorf("URL %q Addr %q for a server that does not listen", s.URL(), s.Addr())
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(chatBody("gpt-4o", false, false)))
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), completionText(DefaultChunks)) {
		t.Errorf("status %d body %s", rec.Code, rec.Body.String())
	}
}
