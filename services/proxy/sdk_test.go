package proxy

import (
	"context"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaiopt "github.com/openai/openai-go/v3/option"
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
