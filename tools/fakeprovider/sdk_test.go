package fakeprovider

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// The official SDKs decode the new routes' answers.

func openAISDK(t *testing.T, s *Server) openai.Client {
	return openai.NewClient(openaiopt.WithBaseURL(s.URL()+"/v1/"), openaiopt.WithAPIKey("sk-sdk"),
		openaiopt.WithMaxRetries(0), openaiopt.WithHTTPClient(client(t)))
}

func TestSDKCompletions(t *testing.T) {
	s := start(t, Options{Name: "sdk"})
	oa := openAISDK(t, s)
	ctx := context.Background()
	params := openai.CompletionNewParams{
		Model:  openai.CompletionNewParamsModelGPT3_5TurboInstruct,
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("say this is a test")},
	}
	comp, err := oa.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(comp.Choices) != 1 || comp.Choices[0].Text != completionText(DefaultChunks) || comp.Choices[0].FinishReason != "stop" ||
		comp.Usage.TotalTokens == 0 || comp.Model != "gpt-3.5-turbo-instruct" {
		t.Errorf("completion %s", comp.RawJSON())
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := oa.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	var finish string
	var usage int64
	for stream.Next() {
		ch := stream.Current()
		for _, c := range ch.Choices {
			text.WriteString(c.Text)
			if c.FinishReason != "" {
				finish = string(c.FinishReason)
			}
		}
		usage += ch.Usage.TotalTokens
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != completionText(DefaultChunks) || finish != "stop" || usage == 0 {
		t.Errorf("stream text %q finish %q usage %d", text.String(), finish, usage)
	}
}

func TestSDKModerations(t *testing.T) {
	s := start(t, Options{Name: "sdk"})
	oa := openAISDK(t, s)
	mod, err := oa.Moderations.New(context.Background(), openai.ModerationNewParams{
		Model: openai.ModerationModelOmniModerationLatest,
		Input: openai.ModerationNewParamsInputUnion{OfStringArray: []string{"hello", "this " + FlagMarker}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(mod.Results) != 2 || mod.Results[0].Flagged || !mod.Results[1].Flagged || !mod.Results[1].Categories.Violence ||
		mod.Results[1].CategoryScores.Violence != 0.98 || len(mod.Results[0].CategoryAppliedInputTypes.Hate) != 1 {
		t.Errorf("moderation %s", mod.RawJSON())
	}
}

func TestSDKImages(t *testing.T) {
	s := start(t, Options{Name: "sdk"})
	oa := openAISDK(t, s)
	img, err := oa.Images.Generate(context.Background(), openai.ImageGenerateParams{
		Model: openai.ImageModelGPTImage1, Prompt: "a red square", N: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Data) != 2 || img.Data[0].B64JSON == "" || img.Usage.TotalTokens == 0 || img.Usage.OutputTokens != 2*imageOutputTokens {
		t.Errorf("images %s", img.RawJSON())
	}
}

func TestSDKAudio(t *testing.T) {
	s := start(t, Options{Name: "sdk"})
	oa := openAISDK(t, s)
	ctx := context.Background()
	resp, err := oa.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{
		Model: openai.SpeechModelTTS1, Input: "hello", Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")},
	})
	if err != nil {
		t.Fatal(err)
	}
	audio, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.HasPrefix(audio, []byte("ID3")) || resp.Header.Get("Content-Type") != "audio/mpeg" {
		t.Errorf("speech: %v, %d bytes, content-type %q", err, len(audio), resp.Header.Get("Content-Type"))
	}

	tr, err := oa.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{
		Model: openai.AudioModelWhisper1,
		File:  openai.File(bytes.NewReader(audio), "speech.mp3", "audio/mpeg"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Text != completionText(DefaultChunks) {
		t.Errorf("transcription %s", tr.RawJSON())
	}
	var got Call
	for _, c := range s.Calls() {
		if strings.HasSuffix(c.Path, "/audio/transcriptions") {
			got = c
		}
	}
	if got.Model != "whisper-1" || got.FileSize != int64(len(audio)) || got.Key != "sk-sdk" {
		t.Errorf("transcription call: model %q file size %d (sent %d) key %q", got.Model, got.FileSize, len(audio), got.Key)
	}
}

func TestSDKResponses(t *testing.T) {
	s := start(t, Options{Name: "sdk"})
	oa := openAISDK(t, s)
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model:        "gpt-4o-mini",
		Instructions: openai.String("be brief"),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("hello there")},
	}
	r, err := oa.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "completed" || r.OutputText() != completionText(DefaultChunks) || r.Usage.TotalTokens == 0 || r.Usage.InputTokens != 4 {
		t.Errorf("response %s", r.RawJSON())
	}

	stream := oa.Responses.NewStreaming(ctx, params)
	var text strings.Builder
	var completed responses.Response
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			completed = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != completionText(DefaultChunks) || completed.OutputText() != text.String() || completed.Usage.OutputTokens != 2*DefaultChunks {
		t.Errorf("stream %v text %q completed %s", types, text.String(), completed.RawJSON())
	}

	t.Run("error rule", func(t *testing.T) {
		id := s.AddRule(Rule{Path: "/responses", Error: "openai.rate_limit"})
		defer s.RemoveRule(id)
		_, err := oa.Responses.New(ctx, params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" {
			t.Errorf("error %v", err)
		}
	})
	t.Run("error in stream", func(t *testing.T) {
		id := s.AddRule(Rule{Path: "/responses", ErrorInStream: true, ErrorAfterChunks: 1})
		defer s.RemoveRule(id)
		stream := oa.Responses.NewStreaming(ctx, params)
		var failed responses.Response
		for stream.Next() {
			if ev := stream.Current(); ev.Type == "response.failed" {
				failed = ev.AsResponseFailed().Response
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if failed.Status != "failed" || failed.Error.Code != "server_error" {
			t.Errorf("failed response %s", failed.RawJSON())
		}
	})
}

func TestSDKCountTokens(t *testing.T) {
	s := start(t, Options{Name: "sdk"})
	ac := anthropic.NewClient(anthropicopt.WithBaseURL(s.URL()+"/"), anthropicopt.WithAPIKey("sk-ant-sdk"),
		anthropicopt.WithMaxRetries(0), anthropicopt.WithHTTPClient(client(t)))
	n, err := ac.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{
		Model:    "claude-sonnet-4-20250514",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello, Claude"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	calls := s.Calls()
	if len(calls) != 1 || n.InputTokens != int64(countTokens(calls[0].Body)) || calls[0].Model != "claude-sonnet-4-20250514" || calls[0].Key != "sk-ant-sdk" {
		t.Errorf("count %d, calls %+v", n.InputTokens, calls)
	}
	id := s.AddRule(Rule{Error: "anthropic.overloaded"})
	defer s.RemoveRule(id)
	_, err = ac.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{
		Model:    "claude-sonnet-4-20250514",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello, Claude"))},
	})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 {
		t.Errorf("error %v", err)
	}
}
