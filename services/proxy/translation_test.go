package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"switchyard.dev/shared/config"
)

// recorder is an upstream that answers every request with one body and
// keeps the last request's body.
type recorder struct {
	mu   sync.Mutex
	body []byte
}

func (rc *recorder) last() []byte {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.body
}

// startRecorder serves answer (status 200, contentType) to every request.
func startRecorder(t *testing.T, contentType, answer string) (*recorder, string) {
	t.Helper()
	rc := &recorder{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.body = b
		rc.mu.Unlock()
		w.Header().Set("Content-Type", contentType)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(up.Close)
	return rc, up.URL
}

const chatAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`

// An Anthropic request (which always has max_tokens) or a Responses request
// translated for OpenAI or Azure names its limit max_completion_tokens:
// their reasoning models refuse max_tokens with a 400 that does not fail
// over. Other OpenAI-compatible servers keep max_tokens.
func TestTranslatedMaxCompletionTokens(t *testing.T) {
	for _, tt := range []struct {
		name, typ, version string
		want, not          string
	}{
		{"openai", "openai", "", "max_completion_tokens", "max_tokens"},
		{"azure", "azure", "2024-10-21", "max_completion_tokens", "max_tokens"},
		{"azure before 2024-09-01", "azure", "2024-06-01", "max_tokens", "max_completion_tokens"},
		{"vllm", "vllm", "", "max_tokens", "max_completion_tokens"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc, base := startRecorder(t, "application/json", chatAnswer)
			f := oneProviderFixture(t, tt.typ, base, "sk-stub", func(p *config.Provider) { p.APIVersion = tt.version })
			check := func(what string) {
				t.Helper()
				var got map[string]any
				if err := json.Unmarshal(rc.last(), &got); err != nil {
					t.Fatalf("%s: upstream body %q: %v", what, rc.last(), err)
				}
				if got[tt.want] != float64(1024) || got[tt.not] != nil {
					t.Errorf("%s: upstream body %s, want %s 1024 and no %s", what, rc.last(), tt.want, tt.not)
				}
			}
			client := anthropicClient(f)
			_, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 1024,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
			if err != nil {
				t.Fatal(err)
			}
			check("messages")
			if tt.typ == "openai" {
				return // serves the Responses API itself
			}
			if status, _, b := f.call(t, "/v1/responses", `{"model":"m","input":"hello","max_output_tokens":1024}`); status != 200 {
				t.Fatalf("responses: status %d: %s", status, b)
			}
			check("responses")
		})
	}
}

// TestTranslatedStreamUsage: an OpenAI caller served by an Anthropic stream
// gets the usage chunk ("choices":[]) only when it asked
// (stream_options.include_usage), as from OpenAI: the stream's shape does
// not depend on the step that served. The record has the provider's counts
// either way, and a Responses stream, which needs the usage for
// response.completed, still gets it.
func TestTranslatedStreamUsage(t *testing.T) {
	mf := newMeterFixture(t)
	usageChunks := func(body string) int {
		t.Helper()
		resp, events := mf.stream(t, "/v1/chat/completions", body)
		if resp.StatusCode != 200 || len(events) == 0 || events[len(events)-1].data != "[DONE]" {
			t.Fatalf("status %d, events %+v", resp.StatusCode, events)
		}
		n := 0
		for _, ev := range events {
			if strings.Contains(ev.data, `"choices":[]`) {
				n++
			}
		}
		return n
	}
	if n := usageChunks(`{"model":"demo-claude","stream":true,"messages":[{"role":"user","content":"hello"}]}`); n != 0 {
		t.Errorf("a caller that did not ask got %d usage chunks", n)
	}
	if n := usageChunks(`{"model":"demo-claude","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`); n != 1 {
		t.Errorf("a caller that asked got %d usage chunks, want 1", n)
	}
	resp, events := mf.stream(t, "/v1/responses", `{"model":"demo-claude","stream":true,"input":"hello"}`)
	var completed struct {
		Response struct {
			Usage struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		} `json:"response"`
	}
	if n := len(events); resp.StatusCode != 200 || n == 0 || events[n-1].name != "response.completed" {
		t.Fatalf("responses: status %d, events %+v", resp.StatusCode, events)
	}
	if err := json.Unmarshal([]byte(events[len(events)-1].data), &completed); err != nil || completed.Response.Usage.InputTokens == 0 || completed.Response.Usage.OutputTokens == 0 {
		t.Errorf("response.completed without usage (%v): %s", err, events[len(events)-1].data)
	}
	for i, rec := range mf.records(t, 3) {
		if rec.TokensEstimated || rec.Tokens.Input == 0 || rec.Tokens.Output == 0 || !rec.StreamCompleted {
			t.Errorf("record %d: %+v", i, rec)
		}
	}
}
