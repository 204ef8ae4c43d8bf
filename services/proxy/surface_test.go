package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"switchyard.dev/services/proxy/internal/gwerror"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/servicetest"
	"switchyard.dev/tools/fakeprovider"
)

// surfaceFixture serves the wider API: a completion model, a moderation
// model and an image model on the OpenAI fake, and the chat models.
func surfaceFixture(t *testing.T) *fixture {
	return newFixture(t, func(c *config.Config) {
		c.Providers[0].Models = append(c.Providers[0].Models,
			config.Model{Name: "instruct", Upstream: "gpt-3.5-turbo-instruct", Kind: config.KindCompletion},
			config.Model{Name: "moderation", Upstream: "omni-moderation-latest", Kind: config.KindModeration},
			config.Model{Name: "painter", Upstream: "gpt-image-1", Kind: config.KindImage})
	})
}

func rawCall(t *testing.T, f *fixture, path, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// The wider routes through the OpenAI SDK, each failing over from a key
// the fake refuses (the hold then keeps the key out).
func TestWiderSurfaceThroughTheSDK(t *testing.T) {
	f := surfaceFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key"})
	client := openAIClient(f)
	ctx := context.Background()

	t.Run("completions", func(t *testing.T) {
		c, err := client.Completions.New(ctx, openai.CompletionNewParams{
			Model: "instruct", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say hi")}})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 || c.Choices[0].Text == "" || c.Usage.CompletionTokens == 0 {
			t.Fatalf("completion %+v", c)
		}
		stream := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
			Model: "instruct", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say hi")}})
		var text strings.Builder
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				text.WriteString(ch.Text)
			}
		}
		if err := stream.Err(); err != nil || text.Len() == 0 {
			t.Fatalf("stream %q: %v", text.String(), err)
		}
	})
	t.Run("moderations", func(t *testing.T) {
		m, err := client.Moderations.New(ctx, openai.ModerationNewParams{Model: "moderation",
			Input: openai.ModerationNewParamsInputUnion{OfString: openai.String("fakeprovider:flag")}})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Results) != 1 || !m.Results[0].Flagged {
			t.Fatalf("moderation %+v", m)
		}
	})
	t.Run("images", func(t *testing.T) {
		img, err := client.Images.Generate(ctx, openai.ImageGenerateParams{Model: "painter", Prompt: "a cat"})
		if err != nil {
			t.Fatal(err)
		}
		if len(img.Data) != 1 || img.Data[0].B64JSON == "" {
			t.Fatalf("image %+v", img)
		}
	})
	t.Run("responses", func(t *testing.T) {
		params := responses.ResponseNewParams{Model: "demo-model",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")}}
		r, err := client.Responses.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != "completed" || r.OutputText() == "" || r.Usage.OutputTokens == 0 {
			t.Fatalf("response %+v", r)
		}
		stream := client.Responses.NewStreaming(ctx, params)
		var text strings.Builder
		completed := false
		for stream.Next() {
			ev := stream.Current()
			switch ev.Type {
			case "response.output_text.delta":
				text.WriteString(ev.Delta)
			case "response.completed":
				completed = true
			}
		}
		if err := stream.Err(); err != nil || !completed || text.String() != r.OutputText() {
			t.Fatalf("stream %q completed %v (non-stream %q): %v", text.String(), completed, r.OutputText(), err)
		}
	})
	// Every route above was served by a2 after a1's refusal: a1 was called
	// once, then held.
	if n := len(f.openai.CallsFor("key-a1")); n != 1 {
		t.Errorf("the refused key was called %d times", n)
	}
}

func TestCountTokensThroughTheSDK(t *testing.T) {
	f := surfaceFixture(t)
	client := anthropicClient(f)
	n, err := client.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{
		Model:    "demo-claude",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens <= 0 {
		t.Fatalf("count %+v", n)
	}
	if c := f.anthropic.Calls(); len(c) != 1 || c[0].Path != "/v1/messages/count_tokens" || c[0].Model != "claude-upstream" {
		t.Fatalf("upstream calls %+v", c)
	}
}

// A Responses stream the upstream cuts before its terminal event ends with
// one error event in the Responses API's format; a request for a route no
// step of the model serves is refused before any call.
func TestResponsesEdges(t *testing.T) {
	f := surfaceFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Path: "/v1/responses", CutAfter: 2})
	st, _, body := rawCall(t, f, "/v1/responses", `{"model":"demo-model","stream":true,"input":"hi"}`)
	if st != 200 || strings.Contains(body, "response.completed") ||
		!strings.Contains(body, "event: error\ndata: {\"type\":\"error\",\"code\":\"stream_incomplete\"") {
		t.Fatalf("cut stream: %d\n%s", st, body)
	}
	consecutiveSequence(t, body)
	// translated from an Anthropic stream cut after two content events
	f.anthropic.AddRule(fakeprovider.Rule{CutAfter: 2})
	st, _, body = rawCall(t, f, "/v1/responses", `{"model":"fake-anthropic/demo-claude","stream":true,"input":"hi"}`)
	if st != 200 || !strings.Contains(body, `"code":"stream_incomplete"`) {
		t.Fatalf("cut translated stream: %d\n%s", st, body)
	}
	consecutiveSequence(t, body)
	f.anthropic.ClearRules()
	f.openai.ClearRules()
	// An upstream's refusal reaches a Responses caller in the Responses
	// API's error shape (OpenAI's), from a native Responses upstream and
	// translated from Anthropic's.
	f.openai.AddRule(fakeprovider.Rule{Path: "/v1/responses", Error: "openai.context_length", Times: 1})
	f.anthropic.AddRule(fakeprovider.Rule{Error: "anthropic.invalid_request", Times: 1})
	for _, model := range []string{"demo-model", "demo-claude"} {
		for _, stream := range []string{"false", "true"} {
			st, _, body := rawCall(t, f, "/v1/responses", `{"model":"`+model+`","stream":`+stream+`,"input":"hi"}`)
			var e struct {
				Error struct{ Message, Type, Code string }
			}
			if st != 400 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Message == "" || e.Error.Type != "invalid_request_error" ||
				strings.Contains(body, `"type":"error"`) || (model == "demo-model" && e.Error.Code != "context_length_exceeded") {
				t.Fatalf("%s (stream %s) refused upstream: %d %s", model, stream, st, body)
			}
			f.openai.AddRule(fakeprovider.Rule{Path: "/v1/responses", Error: "openai.context_length", Times: 1})
			f.anthropic.AddRule(fakeprovider.Rule{Error: "anthropic.invalid_request", Times: 1})
		}
	}
	f.openai.ClearRules()
	f.anthropic.ClearRules()
	// Stored conversation state cannot be translated for a provider
	// without the Responses API: refused before any call.
	before := len(f.anthropic.Calls())
	if st, _, body := rawCall(t, f, "/v1/responses", `{"model":"demo-claude","input":"hi","previous_response_id":"resp_1"}`); st != 400 ||
		!strings.Contains(body, gwerror.Unsupported) || len(f.anthropic.Calls()) != before {
		t.Fatalf("previous_response_id on an Anthropic model: %d %s", st, body)
	}
	if st, _, body := rawCall(t, f, "/v1/images/generations", `{"model":"demo-model","prompt":"a cat"}`); st != 400 || !strings.Contains(body, gwerror.UnsupportedForKind) {
		t.Fatalf("an image request to a chat model: %d %s", st, body)
	}
	if st, _, body := rawCall(t, f, "/v1/completions", `{"model":"instruct"}`); st != 400 || !strings.Contains(body, "prompt") {
		t.Fatalf("a completion without a prompt: %d %s", st, body)
	}
}

// A provider that allows unlisted models serves "<provider>/<model>" of a
// model its configuration does not list; one that does not answers 404.
func TestUnlistedModels(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Providers[0].AllowUnlistedModels = true })
	st, h, body := rawCall(t, f, "/v1/chat/completions", `{"model":"fake-openai/brand-new-model","messages":[{"role":"user","content":"hi"}]}`)
	if st != 200 || h.Get(headerModel) != "brand-new-model" {
		t.Fatalf("unlisted model: %d %s", st, body)
	}
	if c := f.openai.Calls(); c[len(c)-1].Model != "brand-new-model" {
		t.Fatalf("sent as %q", c[len(c)-1].Model)
	}
	// A caller's model name with a line break cannot split the response's
	// headers.
	st, h, body = rawCall(t, f, "/v1/chat/completions", `{"model":"fake-openai/brand\r\nX-Injected: 1","messages":[{"role":"user","content":"hi"}]}`)
	if st != 200 || h.Get(headerModel) == "" || h.Get("X-Injected") != "" || strings.ContainsAny(h.Get(headerModel), "\r\n") {
		t.Fatalf("a model name split the headers: %d %v %s", st, h, body)
	}
	// Callers name these models: no metric series per name.
	m, err := servicetest.Scrape(f.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(m, "brand-new-model") || !strings.Contains(m, `model="fake-openai/*"`) ||
		!strings.Contains(m, `switchyard_tokens_total{client="team",kind="output",model="*",provider="fake-openai"}`) {
		var lines []string
		for l := range strings.Lines(m) {
			if strings.Contains(l, "fake-openai") {
				lines = append(lines, l)
			}
		}
		t.Errorf("metrics of an unlisted model:\n%s", strings.Join(lines, ""))
	}
	if st, _, body := rawCall(t, f, "/v1/chat/completions", `{"model":"fake-anthropic/brand-new-model","messages":[{"role":"user","content":"hi"}]}`); st != 404 {
		t.Fatalf("a provider without allow_unlisted_models: %d %s", st, body)
	}
	if st, _, _ := rawCall(t, f, "/v1/chat/completions", `{"model":"brand-new-model","messages":[{"role":"user","content":"hi"}]}`); st != 404 {
		t.Fatalf("a bare unlisted name: %d", st)
	}
}

// Audio through the OpenAI SDK: speech comes back as the upstream's audio
// bytes, relayed as they arrive; a transcription's form reaches the
// upstream with the model renamed to its upstream name; both fail over
// from a refused key.
func TestAudioThroughTheSDK(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Providers[0].Models = append(c.Providers[0].Models,
			config.Model{Name: "voice", Upstream: "tts-1", Kind: config.KindSpeech},
			config.Model{Name: "ears", Upstream: "whisper-1", Kind: config.KindTranscript})
	})
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key"})
	client := openAIClient(f)
	ctx := context.Background()

	resp, err := client.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "voice", Input: "hello there",
		Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")}})
	if err != nil {
		t.Fatal(err)
	}
	audio, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "audio/") || !strings.HasPrefix(string(audio), "ID3") {
		t.Fatalf("speech: %d %s %d bytes %q (%v)", resp.StatusCode, resp.Header.Get("Content-Type"), len(audio), audio[:min(len(audio), 8)], err)
	}
	if c := f.openai.Calls(); c[len(c)-1].Model != "tts-1" {
		t.Fatalf("speech sent as %q", c[len(c)-1].Model)
	}

	tr, err := client.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{Model: "ears",
		File: openai.File(strings.NewReader("RIFF....WAVEfmt fake audio"), "hello.wav", "audio/wav")})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Text == "" {
		t.Fatalf("transcription %+v", tr)
	}
	last := f.openai.Calls()[len(f.openai.Calls())-1]
	if last.Model != "whisper-1" || last.FileSize == 0 || last.Key != "key-a2" {
		t.Fatalf("transcription upstream call: model %q file %d key %s", last.Model, last.FileSize, last.Key)
	}

	// A form naming the model twice is refused before any call.
	body := "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nears\r\n--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nother\r\n" +
		"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nxx\r\n--b--\r\n"
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/audio/transcriptions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
	before := len(f.openai.Calls())
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r2.Body)
	r2.Body.Close()
	if r2.StatusCode != 400 || !strings.Contains(string(b), gwerror.DuplicateKey) || len(f.openai.Calls()) != before {
		t.Fatalf("two models in a form: %d %s", r2.StatusCode, b)
	}
}

// The Responses API on providers without it: translated to chat (OpenAI
// format) or to messages (Anthropic), answered as a Response object or the
// Responses API's events, through the OpenAI SDK, with function tools.
func TestResponsesTranslated(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Providers[0].Type = "groq" // OpenAI format, no Responses API here
	})
	client := openAIClient(f)
	ctx := context.Background()
	for _, model := range []string{"demo-model", "demo-claude"} {
		t.Run(model, func(t *testing.T) {
			params := responses.ResponseNewParams{Model: model, Instructions: openai.String("be brief"),
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")}}
			r, err := client.Responses.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != "completed" || r.OutputText() == "" || r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 {
				t.Fatalf("response %+v", r)
			}
			stream := client.Responses.NewStreaming(ctx, params)
			var text strings.Builder
			var types []string
			for stream.Next() {
				ev := stream.Current()
				types = append(types, ev.Type)
				if ev.Type == "response.output_text.delta" {
					text.WriteString(ev.Delta)
				}
				if ev.Type == "response.completed" && ev.Response.Usage.OutputTokens == 0 {
					t.Errorf("completed without usage: %+v", ev.Response.Usage)
				}
			}
			if err := stream.Err(); err != nil || text.String() != r.OutputText() {
				t.Fatalf("stream %q (non-stream %q): %v", text.String(), r.OutputText(), err)
			}
			if len(types) < 4 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
				t.Fatalf("event types %v", types)
			}
		})
	}
	if c := f.anthropic.Calls(); len(c) == 0 || c[len(c)-1].Path != "/v1/messages" {
		t.Fatalf("anthropic calls %+v", c)
	}
	if c := f.openai.Calls(); len(c) == 0 || c[len(c)-1].Path != "/v1/chat/completions" {
		t.Fatalf("openai-format calls %+v", c)
	}
}

// Streams cut short: a legacy completions stream ends with one error event
// in the OpenAI format, a speech answer with what arrived and no final
// chunk (the request counted as a stream cut, not as served).
func TestWiderSurfaceCutStreams(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Providers[0].Models = append(c.Providers[0].Models,
			config.Model{Name: "instruct", Upstream: "gpt-3.5-turbo-instruct", Kind: config.KindCompletion},
			config.Model{Name: "voice", Upstream: "tts-1", Kind: config.KindSpeech})
	})
	f.openai.AddRule(fakeprovider.Rule{Path: "/v1/completions", CutAfter: 2})
	st, _, body := rawCall(t, f, "/v1/completions", `{"model":"instruct","prompt":"hi","stream":true}`)
	if st != 200 || strings.Contains(body, "[DONE]") || !strings.Contains(body, `"code":"stream_incomplete"`) {
		t.Fatalf("cut completions stream: %d\n%s", st, body)
	}
	f.openai.AddRule(fakeprovider.Rule{Path: "/v1/audio/speech", CutAfter: 1, Reset: true})
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/audio/speech", strings.NewReader(`{"model":"voice","input":"hello","voice":"alloy"}`))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	audio, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The caller's body ends without its last chunk: its client reports
	// the cut instead of a shorter file that looks whole.
	if resp.StatusCode != 200 || len(audio) == 0 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut speech: %d, %d bytes, read error %v (want unexpected EOF)", resp.StatusCode, len(audio), err)
	}
}

// An answer that fails before its first content (a speech answer or a
// legacy completions stream cut, or reset, right after its headers, with no
// byte of body; a chat stream after its role chunk, which is held back) has
// reached nobody yet: the attempt fails and another key serves the whole
// answer.
func TestAnswerFailsBeforeFirstByte(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Providers[0].Models = append(c.Providers[0].Models,
			config.Model{Name: "voice", Upstream: "tts-1", Kind: config.KindSpeech},
			config.Model{Name: "instruct", Upstream: "gpt-3.5-turbo-instruct", Kind: config.KindCompletion})
	})
	speech := `{"model":"voice","input":"hello","voice":"alloy"}`
	_, _, whole := rawCall(t, f, "/v1/audio/speech", speech)
	if len(whole) == 0 {
		t.Fatal("no audio without a rule")
	}
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("speech, reset %v", reset), func(t *testing.T) {
			f.openai.ClearRules()
			f.openai.ResetCalls()
			f.openai.AddRule(fakeprovider.Rule{Path: "/v1/audio/speech", CutAtStart: true, Reset: reset, Times: 1})
			st, h, audio := rawCall(t, f, "/v1/audio/speech", speech)
			if st != 200 || audio != whole || h.Get(headerAttempts) != "2" {
				t.Fatalf("%d, %d bytes of %d, attempts %q", st, len(audio), len(whole), h.Get(headerAttempts))
			}
			if n := len(f.openai.Calls()); n != 2 {
				t.Errorf("%d upstream calls, want 2", n)
			}
		})
		for _, st := range []struct{ name, path, body string }{
			{"completions stream", "/v1/completions", `{"model":"instruct","prompt":"hi","stream":true}`},
			{"chat stream", "/v1/chat/completions", `{"model":"demo-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		} {
			t.Run(fmt.Sprintf("%s, reset %v", st.name, reset), func(t *testing.T) {
				f.openai.ClearRules()
				f.openai.ResetCalls()
				f.openai.AddRule(fakeprovider.Rule{Path: st.path, CutAtStart: true, Reset: reset, Times: 1})
				status, h, body := rawCall(t, f, st.path, st.body)
				if status != 200 || !strings.Contains(body, "[DONE]") || strings.Contains(body, "stream_incomplete") || h.Get(headerAttempts) != "2" {
					t.Fatalf("%d, attempts %q:\n%s", status, h.Get(headerAttempts), body)
				}
				if n := len(f.openai.Calls()); n != 2 {
					t.Errorf("%d upstream calls, want 2", n)
				}
			})
		}
	}
}

// consecutiveSequence checks that the events of a Responses API stream
// are numbered 0, 1, 2... the gateway's own error event included.
func consecutiveSequence(t *testing.T, body string) {
	t.Helper()
	want := 0
	for _, line := range strings.Split(body, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type string `json:"type"`
			Seq  *int   `json:"sequence_number"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Seq == nil {
			t.Fatalf("event without a sequence_number: %s", data)
		}
		if *ev.Seq != want {
			t.Fatalf("%s numbered %d, want %d:\n%s", ev.Type, *ev.Seq, want, body)
		}
		want++
	}
}

// A provider's refusal of an unlisted model (a typo, a model the account
// lacks) holds nothing: callers name these models. The request still
// tries the provider's other keys (one key may lack a model another has),
// and when every key refused, the caller gets the provider's own answer
// in the endpoint's format, again on the next call, not a 503.
func TestUnlistedModelRefusalHoldsNothing(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Providers[0].AllowUnlistedModels = true })
	f.openai.AddRule(fakeprovider.Rule{Model: "gpt-4o-mnii", Error: "openai.model_not_found"})
	f.openai.AddRule(fakeprovider.Rule{Model: "gpt-new", Key: "key-a1", Error: "openai.model_not_found"})
	const typo = `{"model":"fake-openai/gpt-4o-mnii","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name, path, body string
		status           int
		code             string
		anthropic        bool
		calls            int
	}{
		{"typo", "/v1/chat/completions", typo, 404, "model_not_found", false, 2},
		{"typo again", "/v1/chat/completions", typo, 404, "model_not_found", false, 2},
		{"typo on messages", "/v1/messages", typo, 404, "", true, 2},
		{"one key lacks it", "/v1/chat/completions", `{"model":"fake-openai/gpt-new","messages":[{"role":"user","content":"hi"}]}`, 200, "", false, 0},
		{"one key lacks it again", "/v1/chat/completions", `{"model":"fake-openai/gpt-new","messages":[{"role":"user","content":"hi"}]}`, 200, "", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.openai.ResetCalls()
			status, _, body := f.call(t, tt.path, tt.body)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, body)
			}
			if tt.code != "" && errorCode(t, body) != tt.code {
				t.Errorf("code %q, want the provider's %q: %s", errorCode(t, body), tt.code, body)
			}
			if m := decode(t, body); status != 200 && tt.anthropic != (m["type"] == "error") {
				t.Errorf("not in the endpoint's format: %s", body)
			}
			if tt.calls > 0 && len(f.openai.Calls()) != tt.calls {
				t.Errorf("%d upstream calls, want %d (every key)", len(f.openai.Calls()), tt.calls)
			}
			for _, h := range f.svc.engine.Holds() {
				t.Errorf("hold %s (%s) recorded for a caller's model", h.ID, h.Class)
			}
		})
	}
}
