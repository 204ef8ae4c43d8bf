package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

func openAIClient(f *fixture) openai.Client {
	return openai.NewClient(openaiopt.WithBaseURL(f.url+"/v1/"), openaiopt.WithAPIKey(clientSecret), openaiopt.WithMaxRetries(0))
}

func anthropicClient(f *fixture) anthropic.Client {
	return anthropic.NewClient(anthropicopt.WithBaseURL(f.url+"/"), anthropicopt.WithAPIKey(clientSecret), anthropicopt.WithMaxRetries(0))
}

func TestOpenAISDK(t *testing.T) {
	f := newFixture(t)
	client := openAIClient(f)
	ctx := context.Background()
	for _, model := range []string{"demo-chat", "demo-claude"} {
		t.Run(model, func(t *testing.T) {
			params := openai.ChatCompletionNewParams{
				Model:    model,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
			}
			comp, err := client.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if len(comp.Choices) != 1 || comp.Choices[0].Message.Content == "" {
				t.Fatalf("completion %+v", comp)
			}
			stream := client.Chat.Completions.NewStreaming(ctx, params)
			var text strings.Builder
			for stream.Next() {
				for _, ch := range stream.Current().Choices {
					text.WriteString(ch.Delta.Content)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if text.String() != comp.Choices[0].Message.Content {
				t.Errorf("stream text %q != non-stream %q", text.String(), comp.Choices[0].Message.Content)
			}
		})
	}
	emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "demo-embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")},
	})
	if err != nil || len(emb.Data) != 1 || len(emb.Data[0].Embedding) == 0 {
		t.Fatalf("embeddings: %v %+v", err, emb)
	}
	// A gateway error surfaces as an SDK error with the status.
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "nope",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	var apiErr *openai.Error
	if !errorsAs(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Errorf("unknown model: %v", err)
	}
}

func TestAnthropicSDK(t *testing.T) {
	f := newFixture(t)
	client := anthropicClient(f)
	ctx := context.Background()
	for _, model := range []string{"demo-claude", "demo-chat"} {
		t.Run(model, func(t *testing.T) {
			params := anthropic.MessageNewParams{
				Model:     anthropic.Model(model),
				MaxTokens: 64,
				Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
			}
			msg, err := client.Messages.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if len(msg.Content) == 0 || msg.Content[0].Text == "" {
				t.Fatalf("message %+v", msg)
			}
			stream := client.Messages.NewStreaming(ctx, params)
			var acc anthropic.Message
			for stream.Next() {
				if err := acc.Accumulate(stream.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if len(acc.Content) == 0 || acc.Content[0].Text != msg.Content[0].Text {
				t.Errorf("stream text %+v != non-stream %q", acc.Content, msg.Content[0].Text)
			}
		})
	}
}

// An upstream's refusal in a looser shape than OpenAI's (Gemini's array,
// Mistral's flat body, a Responses stream's error event before any
// content) reaches an OpenAI SDK caller with its message and code: before,
// the body was relayed as it came and the SDK's error had neither.
func TestOpenAISDKReadsProviderErrors(t *testing.T) {
	answer := func(status int, ctype, body string) string {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", ctype)
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(up.Close)
		return up.URL
	}
	chat := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	for _, tc := range []struct {
		name, typ, url, message, code string
		responses                     bool
	}{
		{"gemini array", "gemini", answer(400, "application/json", `[{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"foo\"","status":"INVALID_ARGUMENT"}}]`),
			`Invalid JSON payload received. Unknown name "foo"`, "INVALID_ARGUMENT", false},
		{"mistral flat", "mistral", answer(400, "application/json", `{"object":"error","message":"Prompt contains 40136 tokens, too large","type":"invalid_request_error","param":null,"code":null}`),
			"Prompt contains 40136 tokens, too large", "", false},
		{"responses error event", "openai", serveStream(t, "event: error\ndata: {\"type\":\"error\",\"code\":\"context_length_exceeded\",\"message\":\"Your input exceeds the context window of this model.\",\"param\":\"input\",\"sequence_number\":0}\n\n"),
			"Your input exceeds the context window of this model.", "context_length_exceeded", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := oneProviderFixture(t, tc.typ, tc.url, "sk-stub")
			c := openAIClient(f)
			var err error
			if tc.responses {
				st := c.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "m",
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
				for st.Next() {
				}
				err = st.Err()
			} else {
				_, err = c.Chat.Completions.New(context.Background(), chat)
			}
			var ae *openai.Error
			if !errorsAs(err, &ae) || ae.StatusCode != 400 || ae.Message != tc.message || ae.Code != tc.code {
				t.Fatalf("SDK error %v: %+v", err, ae)
			}
		})
	}
}
