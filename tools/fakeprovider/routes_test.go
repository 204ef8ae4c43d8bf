package fakeprovider

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

var bearer = map[string]string{"Authorization": "Bearer sk-routes"}

func completionBody(model string, stream, usage bool) string {
	b := map[string]any{"model": model, "prompt": "say this is a test", "max_tokens": 7}
	if stream {
		b["stream"] = true
	}
	if usage {
		b["stream_options"] = map[string]bool{"include_usage": true}
	}
	out, _ := json.Marshal(b)
	return string(out)
}

func responsesBody(model string, stream bool) string {
	out, _ := json.Marshal(map[string]any{
		"model": model, "stream": stream, "instructions": "be brief",
		"input": []map[string]any{{"role": "user", "content": []map[string]string{{"type": "input_text", "text": "hello there fake"}}}},
	})
	return string(out)
}

// transcriptionForm is a multipart/form-data body with a file of size bytes
// and the given fields.
func transcriptionForm(t *testing.T, size int, fields map[string]string) (body []byte, contentType string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	fw, err := mw.CreateFormFile("file", "speech.mp3")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(bytes.Repeat([]byte{0xAB}, size))
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	mw.Close()
	return b.Bytes(), mw.FormDataContentType()
}

func postForm(t *testing.T, c *http.Client, url string, body []byte, contentType string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer sk-routes")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestCompletionsNonStream(t *testing.T) {
	s := start(t, Options{Name: "cmpl"})
	c := client(t)
	resp := call(t, c, "POST", s.URL()+"/v1/completions", completionBody("gpt-3.5-turbo-instruct", false, false), bearer)
	body := readAll(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d %v: %s", resp.StatusCode, resp.Header, body)
	}
	var got struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Text         string          `json:"text"`
			Index        *int            `json:"index"`
			Logprobs     json.RawMessage `json:"logprobs"`
			FinishReason string          `json:"finish_reason"`
		} `json:"choices"`
		Usage chatUsage `json:"usage"`
	}
	decode(t, body, &got)
	if !strings.HasPrefix(got.ID, "cmpl-") || got.Object != "text_completion" || got.Created == 0 || got.Model != "gpt-3.5-turbo-instruct" {
		t.Errorf("envelope %s", body)
	}
	if len(got.Choices) != 1 || got.Choices[0].Text != completionText(DefaultChunks) || got.Choices[0].Index == nil ||
		string(got.Choices[0].Logprobs) != "null" || got.Choices[0].FinishReason != "stop" {
		t.Errorf("choices %s", body)
	}
	if u := got.Usage; u.PromptTokens != 5 || u.CompletionTokens != 2*DefaultChunks || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v", u)
	}
	if calls := s.Calls(); len(calls) != 1 || calls[0].Model != "gpt-3.5-turbo-instruct" || calls[0].Path != "/v1/completions" {
		t.Errorf("calls %+v", calls)
	}
}

func TestCompletionsStream(t *testing.T) {
	s := start(t, Options{Name: "cmpl", Chunks: 3})
	c := client(t)
	for _, usage := range []bool{false, true} {
		t.Run(fmt.Sprint("usage=", usage), func(t *testing.T) {
			resp := call(t, c, "POST", s.URL()+"/v1/completions", completionBody("gpt-3.5-turbo-instruct", true, usage), bearer)
			defer resp.Body.Close()
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("content-type %q", resp.Header.Get("Content-Type"))
			}
			events, err := readSSE(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			// 3 content chunks + finish (+ usage) + [DONE]
			want := 3 + 1 + 1
			if usage {
				want++
			}
			if len(events) != want {
				t.Fatalf("%d events, want %d: %+v", len(events), want, events)
			}
			if events[len(events)-1].Data != "[DONE]" {
				t.Errorf("last event %q", events[len(events)-1].Data)
			}
			type chunk struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Model   string `json:"model"`
				Choices []struct {
					Text         string  `json:"text"`
					Index        int     `json:"index"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Usage json.RawMessage `json:"usage"`
			}
			var text strings.Builder
			for i, e := range events[:3] {
				var ch chunk
				decode(t, []byte(e.Data), &ch)
				if ch.Object != "text_completion" || !strings.HasPrefix(ch.ID, "cmpl-") || ch.Model != "gpt-3.5-turbo-instruct" ||
					len(ch.Choices) != 1 || ch.Choices[0].FinishReason != nil || ch.Choices[0].Text != chunkText(i) {
					t.Errorf("chunk %d: %s", i, e.Data)
				}
				if usage != (string(ch.Usage) == "null") {
					t.Errorf("chunk %d usage %q with include_usage %v", i, ch.Usage, usage)
				}
				text.WriteString(ch.Choices[0].Text)
			}
			if text.String() != completionText(3) {
				t.Errorf("text %q", text.String())
			}
			var fin chunk
			decode(t, []byte(events[3].Data), &fin)
			if len(fin.Choices) != 1 || fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "stop" || fin.Choices[0].Text != "" {
				t.Errorf("finish chunk %s", events[3].Data)
			}
			if usage {
				var u struct {
					Choices []any      `json:"choices"`
					Usage   *chatUsage `json:"usage"`
				}
				decode(t, []byte(events[4].Data), &u)
				if u.Choices == nil || len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 6 || u.Usage.PromptTokens != 5 {
					t.Errorf("usage chunk %s", events[4].Data)
				}
			}
		})
	}
}

func TestModerations(t *testing.T) {
	s := start(t, Options{Name: "modr"})
	c := client(t)
	tests := []struct {
		name, input string
		flagged     []bool
		kind        string
	}{
		{"string", `"I want to pet a kitten"`, []bool{false}, "text"},
		{"strings", `["one","two","three"]`, []bool{false, false, false}, "text"},
		{"flag marker", `["fine","this is ` + FlagMarker + `"]`, []bool{false, true}, "text"},
		{"multimodal", `[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]`, []bool{false}, "image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := call(t, c, "POST", s.URL()+"/v1/moderations", `{"model":"omni-moderation-latest","input":`+tt.input+`}`, bearer)
			body := readAll(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var got struct {
				ID      string `json:"id"`
				Model   string `json:"model"`
				Results []struct {
					Flagged                   bool                `json:"flagged"`
					Categories                map[string]bool     `json:"categories"`
					CategoryScores            map[string]float64  `json:"category_scores"`
					CategoryAppliedInputTypes map[string][]string `json:"category_applied_input_types"`
				} `json:"results"`
			}
			decode(t, body, &got)
			if !strings.HasPrefix(got.ID, "modr-") || got.Model != "omni-moderation-latest" || len(got.Results) != len(tt.flagged) {
				t.Fatalf("body %s", body)
			}
			for i, r := range got.Results {
				if r.Flagged != tt.flagged[i] || len(r.Categories) != len(moderationCategories) || len(r.CategoryScores) != len(moderationCategories) {
					t.Errorf("result %d: %+v", i, r)
				}
				for _, cat := range moderationCategories {
					if _, ok := r.Categories[cat]; !ok {
						t.Errorf("result %d lacks category %q", i, cat)
					}
					if sc := r.CategoryScores[cat]; sc <= 0 || sc >= 1 {
						t.Errorf("result %d score %s = %v", i, cat, sc)
					}
					if got := r.CategoryAppliedInputTypes[cat]; !slices.Equal(got, []string{tt.kind}) {
						t.Errorf("result %d applied input types %v", i, got)
					}
				}
				if r.Flagged != r.Categories["violence"] {
					t.Errorf("result %d flagged %v but violence %v", i, r.Flagged, r.Categories["violence"])
				}
			}
		})
	}
	resp := call(t, c, "POST", s.URL()+"/v1/moderations", `{"input":42}`, bearer)
	if readAll(t, resp); resp.StatusCode != 400 {
		t.Errorf("bad input: status %d", resp.StatusCode)
	}
}

func TestImages(t *testing.T) {
	s := start(t, Options{Name: "img"})
	c := client(t)
	tests := []struct {
		name, body string
		n          int
		url        bool
	}{
		{"gpt-image-1 b64", `{"model":"gpt-image-1","prompt":"a red square","n":2}`, 2, false},
		{"url requested", `{"model":"gpt-image-1","prompt":"a red square","response_format":"url"}`, 1, true},
		{"dall-e-3 defaults to url", `{"model":"dall-e-3","prompt":"a red square"}`, 1, true},
		{"dall-e-2 b64 requested", `{"model":"dall-e-2","prompt":"x","response_format":"b64_json","n":3}`, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := call(t, c, "POST", s.URL()+"/v1/images/generations", tt.body, bearer)
			body := readAll(t, resp)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var got struct {
				Created int64 `json:"created"`
				Data    []struct {
					B64JSON string `json:"b64_json"`
					URL     string `json:"url"`
				} `json:"data"`
				Usage struct {
					InputTokens        int `json:"input_tokens"`
					InputTokensDetails struct {
						TextTokens  int  `json:"text_tokens"`
						ImageTokens *int `json:"image_tokens"`
					} `json:"input_tokens_details"`
					OutputTokens int `json:"output_tokens"`
					TotalTokens  int `json:"total_tokens"`
				} `json:"usage"`
			}
			decode(t, body, &got)
			if got.Created == 0 || len(got.Data) != tt.n {
				t.Fatalf("body %s", body)
			}
			u := got.Usage
			if u.InputTokens == 0 || u.InputTokensDetails.TextTokens == 0 || u.InputTokensDetails.ImageTokens == nil ||
				u.OutputTokens != tt.n*imageOutputTokens || u.TotalTokens != u.InputTokens+u.OutputTokens {
				t.Errorf("usage %+v", u)
			}
			for _, d := range got.Data {
				var raw []byte
				if tt.url {
					if d.B64JSON != "" || !strings.HasPrefix(d.URL, s.URL()+"/_fake/images/") {
						t.Fatalf("data %+v", d)
					}
					raw = readAll(t, call(t, c, "GET", d.URL, "", nil))
				} else {
					if d.URL != "" {
						t.Fatalf("data %+v", d)
					}
					var err error
					if raw, err = base64.StdEncoding.DecodeString(d.B64JSON); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := png.Decode(bytes.NewReader(raw)); err != nil {
					t.Errorf("not a PNG: %v", err)
				}
			}
		})
	}
	if n := s.CountCalls(nil); n != len(tests) {
		t.Errorf("%d calls recorded, want %d (image fetches are not calls)", n, len(tests))
	}
}

func TestSpeech(t *testing.T) {
	const delay = 40 * time.Millisecond
	s := start(t, Options{Name: "tts", Chunks: 4, ChunkDelay: delay})
	c := client(t)
	tests := []struct {
		format, contentType, magic string
	}{
		{"", "audio/mpeg", "ID3"},
		{"mp3", "audio/mpeg", "ID3"},
		{"wav", "audio/wav", "RIFF"},
		{"opus", "audio/opus", "OggS"},
		{"flac", "audio/flac", "fLaC"},
		{"aac", "audio/aac", "\xff\xf1"},
		{"pcm", "audio/pcm", "\x00\x00"},
	}
	for _, tt := range tests {
		t.Run("format "+tt.format, func(t *testing.T) {
			body := `{"model":"tts-1","input":"hello","voice":"alloy"}`
			if tt.format != "" {
				body = `{"model":"tts-1","input":"hello","voice":"alloy","response_format":"` + tt.format + `"}`
			}
			began := time.Now()
			resp := call(t, c, "POST", s.URL()+"/v1/audio/speech", body, bearer)
			defer resp.Body.Close()
			first := time.Since(began)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tt.contentType {
				t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			if resp.ContentLength != -1 || !slices.Contains(resp.TransferEncoding, "chunked") {
				t.Errorf("not chunked: length %d, transfer-encoding %v", resp.ContentLength, resp.TransferEncoding)
			}
			audio, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(audio, []byte(tt.magic)) || len(audio) < 8*mp3FrameLen {
				t.Errorf("audio %d bytes starting %q", len(audio), audio[:min(8, len(audio))])
			}
			if total := time.Since(began); total < 3*delay || first >= 3*delay {
				t.Errorf("headers after %v, body after %v: want the audio sent as it comes (3 x %v)", first, total, delay)
			}
		})
	}
	if calls := s.Calls(); calls[0].Model != "tts-1" || calls[0].Path != "/v1/audio/speech" {
		t.Errorf("call %+v", calls[0])
	}
}

func TestTranscriptions(t *testing.T) {
	s := start(t, Options{Name: "stt", Chunks: 3})
	c := client(t)
	text := completionText(3)
	t.Run("json", func(t *testing.T) {
		s.ResetCalls()
		form, ct := transcriptionForm(t, 48000, map[string]string{"model": "whisper-1"})
		resp := postForm(t, c, s.URL()+"/v1/audio/transcriptions", form, ct)
		body := readAll(t, resp)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var got struct {
			Text  string `json:"text"`
			Usage struct {
				Type    string  `json:"type"`
				Seconds float64 `json:"seconds"`
			} `json:"usage"`
		}
		decode(t, body, &got)
		if got.Text != text || got.Usage.Type != "duration" || got.Usage.Seconds != 3 {
			t.Errorf("body %s", body)
		}
		calls := s.Calls()
		if len(calls) != 1 || calls[0].Model != "whisper-1" || calls[0].FileSize != 48000 || !bytes.Equal(calls[0].Body, form) || calls[0].Key != "sk-routes" {
			t.Errorf("call model %q file size %d body %d bytes", calls[0].Model, calls[0].FileSize, len(calls[0].Body))
		}
	})
	t.Run("json tokens usage", func(t *testing.T) {
		form, ct := transcriptionForm(t, 1000, map[string]string{"model": "gpt-4o-transcribe", "response_format": "json"})
		body := readAll(t, postForm(t, c, s.URL()+"/v1/audio/transcriptions", form, ct))
		var got struct {
			Text  string `json:"text"`
			Usage struct {
				Type         string `json:"type"`
				InputTokens  int    `json:"input_tokens"`
				OutputTokens int    `json:"output_tokens"`
				TotalTokens  int    `json:"total_tokens"`
			} `json:"usage"`
		}
		decode(t, body, &got)
		if got.Text != text || got.Usage.Type != "tokens" || got.Usage.OutputTokens != 6 || got.Usage.TotalTokens != got.Usage.InputTokens+6 {
			t.Errorf("body %s", body)
		}
	})
	t.Run("text", func(t *testing.T) {
		form, ct := transcriptionForm(t, 10, map[string]string{"model": "whisper-1", "response_format": "text"})
		resp := postForm(t, c, s.URL()+"/v1/audio/transcriptions", form, ct)
		body := readAll(t, resp)
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || string(body) != text+"\n" {
			t.Errorf("content-type %q body %q", resp.Header.Get("Content-Type"), body)
		}
	})
	t.Run("srt and vtt", func(t *testing.T) {
		for format, want := range map[string]string{"srt": "1\n00:00:00,000 --> 00:00:01,000\n", "vtt": "WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n"} {
			form, ct := transcriptionForm(t, 10, map[string]string{"model": "whisper-1", "response_format": format})
			body := string(readAll(t, postForm(t, c, s.URL()+"/v1/audio/transcriptions", form, ct)))
			if !strings.HasPrefix(body, want) || !strings.Contains(body, text) {
				t.Errorf("%s: %q", format, body)
			}
		}
	})
	t.Run("verbose_json", func(t *testing.T) {
		form, ct := transcriptionForm(t, 32000, map[string]string{"model": "whisper-1", "response_format": "verbose_json"})
		body := readAll(t, postForm(t, c, s.URL()+"/v1/audio/transcriptions", form, ct))
		var got struct {
			Task     string  `json:"task"`
			Language string  `json:"language"`
			Duration float64 `json:"duration"`
			Text     string  `json:"text"`
			Segments []struct {
				Text string  `json:"text"`
				End  float64 `json:"end"`
			} `json:"segments"`
		}
		decode(t, body, &got)
		if got.Task != "transcribe" || got.Language == "" || got.Duration != 2 || got.Text != text || len(got.Segments) != 1 || got.Segments[0].End != 2 {
			t.Errorf("body %s", body)
		}
	})
	t.Run("stream", func(t *testing.T) {
		form, ct := transcriptionForm(t, 10, map[string]string{"model": "gpt-4o-transcribe", "stream": "true"})
		resp := postForm(t, c, s.URL()+"/v1/audio/transcriptions", form, ct)
		defer resp.Body.Close()
		events, err := readSSE(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		var deltas strings.Builder
		for _, e := range events {
			var ev struct {
				Type  string `json:"type"`
				Delta string `json:"delta"`
				Text  string `json:"text"`
			}
			decode(t, []byte(e.Data), &ev)
			types = append(types, ev.Type)
			deltas.WriteString(ev.Delta)
			if ev.Type == "transcript.text.done" && ev.Text != text {
				t.Errorf("done text %q", ev.Text)
			}
		}
		want := []string{"transcript.text.delta", "transcript.text.delta", "transcript.text.delta", "transcript.text.done"}
		if !slices.Equal(types, want) || deltas.String() != text {
			t.Errorf("events %v text %q", types, deltas.String())
		}
	})
	t.Run("no file", func(t *testing.T) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		mw.WriteField("model", "whisper-1")
		mw.Close()
		resp := postForm(t, c, s.URL()+"/v1/audio/transcriptions", b.Bytes(), mw.FormDataContentType())
		body := readAll(t, resp)
		if resp.StatusCode != 400 || !strings.Contains(string(body), "body -> file") {
			t.Errorf("status %d body %s", resp.StatusCode, body)
		}
		if calls := s.Calls(); calls[len(calls)-1].Model != "whisper-1" {
			t.Errorf("model of a call without file %q", calls[len(calls)-1].Model)
		}
	})
}

func TestResponsesNonStream(t *testing.T) {
	s := start(t, Options{Name: "resp"})
	c := client(t)
	resp := call(t, c, "POST", s.URL()+"/v1/responses", responsesBody("gpt-4o-mini", false), bearer)
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var got struct {
		ID        string `json:"id"`
		Object    string `json:"object"`
		CreatedAt int64  `json:"created_at"`
		Status    string `json:"status"`
		Model     string `json:"model"`
		Error     any    `json:"error"`
		Output    []struct {
			Type    string `json:"type"`
			ID      string `json:"id"`
			Status  string `json:"status"`
			Role    string `json:"role"`
			Content []struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				Annotations []any  `json:"annotations"`
			} `json:"content"`
		} `json:"output"`
		Usage struct {
			InputTokens        int `json:"input_tokens"`
			InputTokensDetails struct {
				CachedTokens *int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
			OutputTokens        int `json:"output_tokens"`
			OutputTokensDetails struct {
				ReasoningTokens *int `json:"reasoning_tokens"`
			} `json:"output_tokens_details"`
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	decode(t, body, &got)
	if !strings.HasPrefix(got.ID, "resp_") || got.Object != "response" || got.CreatedAt == 0 || got.Status != "completed" ||
		got.Model != "gpt-4o-mini" || got.Error != nil {
		t.Errorf("envelope %s", body)
	}
	if len(got.Output) != 1 {
		t.Fatalf("output %s", body)
	}
	o := got.Output[0]
	if o.Type != "message" || !strings.HasPrefix(o.ID, "msg_") || o.Status != "completed" || o.Role != "assistant" ||
		len(o.Content) != 1 || o.Content[0].Type != "output_text" || o.Content[0].Text != completionText(DefaultChunks) || o.Content[0].Annotations == nil {
		t.Errorf("output %s", body)
	}
	u := got.Usage
	if u.InputTokens != 5 || u.OutputTokens != 2*DefaultChunks || u.TotalTokens != u.InputTokens+u.OutputTokens ||
		u.InputTokensDetails.CachedTokens == nil || u.OutputTokensDetails.ReasoningTokens == nil {
		t.Errorf("usage %+v", u)
	}
}

// responsesEventNames is the event order of a complete Responses stream
// with n deltas.
func responsesEventNames(n int) []string {
	names := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for range n {
		names = append(names, "response.output_text.delta")
	}
	return append(names, "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed")
}

// checkResponsesEvents checks that every event's data carries its name as
// "type" and consecutive sequence numbers from 0; it returns the names and
// the concatenated deltas.
func checkResponsesEvents(t *testing.T, events []sseEvent) (names []string, text string) {
	t.Helper()
	var b strings.Builder
	for i, e := range events {
		var ev struct {
			Type           string `json:"type"`
			SequenceNumber *int   `json:"sequence_number"`
			Delta          string `json:"delta"`
		}
		decode(t, []byte(e.Data), &ev)
		if ev.Type != e.Name || ev.SequenceNumber == nil || *ev.SequenceNumber != i {
			t.Errorf("event %d %q: %s", i, e.Name, e.Data)
		}
		names = append(names, e.Name)
		b.WriteString(ev.Delta)
	}
	return names, b.String()
}

func TestResponsesStream(t *testing.T) {
	s := start(t, Options{Name: "resp", Chunks: 3})
	c := client(t)
	resp := call(t, c, "POST", s.URL()+"/v1/responses", responsesBody("gpt-4o-mini", true), bearer)
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("content-type %q", resp.Header.Get("Content-Type"))
	}
	events, err := readSSE(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	names, text := checkResponsesEvents(t, events)
	if !slices.Equal(names, responsesEventNames(3)) {
		t.Fatalf("events %v", names)
	}
	if text != completionText(3) {
		t.Errorf("deltas %q", text)
	}
	var created, completed struct {
		Response struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Output []struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"output"`
			Usage *struct {
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		} `json:"response"`
	}
	decode(t, []byte(events[0].Data), &created)
	decode(t, []byte(events[len(events)-1].Data), &completed)
	if created.Response.Status != "in_progress" || created.Response.Usage != nil || len(created.Response.Output) != 0 {
		t.Errorf("response.created %s", events[0].Data)
	}
	if completed.Response.ID != created.Response.ID || completed.Response.Status != "completed" || completed.Response.Usage == nil ||
		completed.Response.Usage.OutputTokens != 6 || len(completed.Response.Output) != 1 || completed.Response.Output[0].Content[0].Text != completionText(3) {
		t.Errorf("response.completed %s", events[len(events)-1].Data)
	}
	var done struct {
		Text string `json:"text"`
	}
	decode(t, []byte(events[len(events)-4].Data), &done)
	if done.Text != completionText(3) {
		t.Errorf("output_text.done %s", events[len(events)-4].Data)
	}
}

func TestCountTokens(t *testing.T) {
	s := start(t, Options{Name: "count"})
	c := client(t)
	hdr := map[string]string{"x-api-key": "sk-ant-count", "anthropic-version": "2023-06-01"}
	body := `{"model":"claude-sonnet-4-20250514","messages":[{"role":"user","content":"Hello, Claude"}]}`
	resp := call(t, c, "POST", s.URL()+"/v1/messages/count_tokens", body, hdr)
	raw := readAll(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get("request-id") == "" {
		t.Fatalf("status %d headers %v: %s", resp.StatusCode, resp.Header, raw)
	}
	var got map[string]any
	decode(t, raw, &got)
	if len(got) != 1 || got["input_tokens"] != float64((len(body)+3)/4) {
		t.Errorf("body %s, want input_tokens %d", raw, (len(body)+3)/4)
	}
	calls := s.Calls()
	if len(calls) != 1 || calls[0].Model != "claude-sonnet-4-20250514" || calls[0].Key != "sk-ant-count" {
		t.Errorf("calls %+v", calls)
	}
}

// TestNewRoutesRules: rules apply to the new routes as they do to chat.
func TestNewRoutesRules(t *testing.T) {
	s := start(t, Options{Name: "rules"})
	c := client(t)
	stt, sttType := transcriptionForm(t, 100, map[string]string{"model": "whisper-1"})
	routes := []struct {
		name, path, body, contentType, model string
		hdr                                  map[string]string
		anthropic                            bool
	}{
		{"completions", "/v1/completions", completionBody("gpt-3.5-turbo-instruct", false, false), "", "gpt-3.5-turbo-instruct", bearer, false},
		{"completions stream", "/v1/completions", completionBody("gpt-3.5-turbo-instruct", true, false), "", "gpt-3.5-turbo-instruct", bearer, false},
		{"moderations", "/v1/moderations", `{"model":"omni-moderation-latest","input":"x"}`, "", "omni-moderation-latest", bearer, false},
		{"images", "/v1/images/generations", `{"model":"gpt-image-1","prompt":"x"}`, "", "gpt-image-1", bearer, false},
		{"speech", "/v1/audio/speech", `{"model":"tts-1","input":"x","voice":"alloy"}`, "", "tts-1", bearer, false},
		{"transcriptions", "/v1/audio/transcriptions", string(stt), sttType, "whisper-1", bearer, false},
		{"responses", "/v1/responses", responsesBody("gpt-4o", false), "", "gpt-4o", bearer, false},
		{"responses stream", "/v1/responses", responsesBody("gpt-4o", true), "", "gpt-4o", bearer, false},
		{"count_tokens", "/v1/messages/count_tokens", `{"model":"claude-3-5-haiku-latest","messages":[]}`, "", "claude-3-5-haiku-latest",
			map[string]string{"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"}, true},
	}
	do := func(ctx context.Context, path, body, contentType string, hdr map[string]string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return c.Do(req)
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			t.Run("error rule by model and path", func(t *testing.T) {
				s.ClearRules()
				s.ResetCalls()
				name := "openai.rate_limit"
				if rt.anthropic {
					name = "anthropic.rate_limit"
				}
				s.AddRule(Rule{ID: "other-path", Path: "/chat/completions", Error: "openai.server_error"})
				s.AddRule(Rule{ID: "limit", Model: rt.model, Path: rt.path, Error: name, RetryAfter: 4 * time.Second})
				resp, err := do(context.Background(), rt.path, rt.body, rt.contentType, rt.hdr)
				if err != nil {
					t.Fatal(err)
				}
				body := readAll(t, resp)
				if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "4" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Fatalf("status %d headers %v: %s", resp.StatusCode, resp.Header, body)
				}
				want := `"code":"rate_limit_exceeded"`
				if rt.anthropic {
					want = `{"type":"error","error":{"type":"rate_limit_error"`
				}
				if !strings.Contains(string(body), want) {
					t.Errorf("body %s lacks %s", body, want)
				}
				calls := s.Calls()
				if len(calls) != 1 || calls[0].Model != rt.model || calls[0].Rule != "limit" {
					t.Errorf("call model %q rule %q", calls[0].Model, calls[0].Rule)
				}
			})
			t.Run("status only answers the flavor's error", func(t *testing.T) {
				s.ClearRules()
				s.AddRule(Rule{Status: 503})
				resp, err := do(context.Background(), rt.path, rt.body, rt.contentType, rt.hdr)
				if err != nil {
					t.Fatal(err)
				}
				body := string(readAll(t, resp))
				want := `"type":"server_error"`
				if rt.anthropic {
					want = `"type":"overloaded_error"`
				}
				if resp.StatusCode != 503 || !strings.Contains(body, want) {
					t.Errorf("status %d body %s", resp.StatusCode, body)
				}
			})
			t.Run("latency", func(t *testing.T) {
				s.ClearRules()
				s.AddRule(Rule{FirstByteLatency: 80 * time.Millisecond})
				began := time.Now()
				resp, err := do(context.Background(), rt.path, rt.body, rt.contentType, rt.hdr)
				if err != nil {
					t.Fatal(err)
				}
				if readAll(t, resp); resp.StatusCode != 200 || time.Since(began) < 80*time.Millisecond {
					t.Errorf("status %d after %v", resp.StatusCode, time.Since(began))
				}
			})
			t.Run("reset", func(t *testing.T) {
				s.ClearRules()
				s.AddRule(Rule{Reset: true})
				resp, err := do(context.Background(), rt.path, rt.body, rt.contentType, rt.hdr)
				if err == nil {
					resp.Body.Close()
					t.Fatalf("status %d, want a connection error", resp.StatusCode)
				}
			})
			t.Run("hang", func(t *testing.T) {
				s.ClearRules()
				s.AddRule(Rule{Hang: true})
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				resp, err := do(ctx, rt.path, rt.body, rt.contentType, rt.hdr)
				if err == nil {
					resp.Body.Close()
					t.Fatalf("status %d, want the call to hang", resp.StatusCode)
				}
			})
		})
	}
	s.ClearRules()
}

func TestNewRoutesCutAfter(t *testing.T) {
	s := start(t, Options{Name: "cut"})
	c := client(t)
	t.Run("completions", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{CutAfter: 2})
		resp := call(t, c, "POST", s.URL()+"/v1/completions", completionBody("m", true, true), bearer)
		defer resp.Body.Close()
		events, err := readSSE(resp.Body)
		if err != nil {
			t.Fatalf("a cut stream must end cleanly: %v", err)
		}
		if len(events) != 2 {
			t.Fatalf("%d events: %+v", len(events), events)
		}
		for _, e := range events {
			if e.Data == "[DONE]" || strings.Contains(e.Data, `"finish_reason":"stop"`) {
				t.Errorf("terminal event in a cut stream: %s", e.Data)
			}
		}
	})
	t.Run("responses", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{CutAfter: 2})
		resp := call(t, c, "POST", s.URL()+"/v1/responses", responsesBody("m", true), bearer)
		defer resp.Body.Close()
		events, err := readSSE(resp.Body)
		if err != nil {
			t.Fatalf("a cut stream must end cleanly: %v", err)
		}
		names, text := checkResponsesEvents(t, events)
		if want := responsesEventNames(2)[:6]; !slices.Equal(names, want) {
			t.Errorf("events %v, want %v", names, want)
		}
		if text != completionText(2) {
			t.Errorf("text %q", text)
		}
	})
	t.Run("speech", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{CutAfter: 2, Chunks: 4})
		body := `{"model":"tts-1","input":"x","voice":"alloy"}`
		audio := readAll(t, call(t, c, "POST", s.URL()+"/v1/audio/speech", body, bearer))
		full := fakeAudio("mp3", 8)
		if !bytes.Equal(audio, full[:len(full)/2]) {
			t.Errorf("cut audio %d bytes, want the first half of %d", len(audio), len(full))
		}
	})
	t.Run("speech cut at start", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{CutAtStart: true})
		resp := call(t, c, "POST", s.URL()+"/v1/audio/speech", `{"model":"tts-1","input":"x","voice":"alloy"}`, bearer)
		audio := readAll(t, resp)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "audio/") || len(audio) != 0 {
			t.Errorf("%d %q, %d bytes: want the audio's headers and no byte", resp.StatusCode, resp.Header.Get("Content-Type"), len(audio))
		}
	})
	t.Run("stream cut at start, reset", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{CutAtStart: true, Reset: true})
		resp := call(t, c, "POST", s.URL()+"/v1/completions", completionBody("m", true, true), bearer)
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || err == nil || len(got) != 0 {
			t.Errorf("%d, %d bytes, read error %v: want the headers, no event, then a reset", resp.StatusCode, len(got), err)
		}
	})
	t.Run("speech reset", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{CutAfter: 1, Reset: true})
		resp := call(t, c, "POST", s.URL()+"/v1/audio/speech", `{"model":"tts-1","input":"x","voice":"alloy"}`, bearer)
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err == nil {
			t.Fatalf("audio ended cleanly after %d bytes, want a reset", len(got))
		}
		if !bytes.HasPrefix(got, []byte("ID3")) {
			t.Errorf("no audio before the reset: %d bytes", len(got))
		}
	})
	s.ClearRules()
}

func TestNewRoutesErrorInStream(t *testing.T) {
	s := start(t, Options{Name: "sse-error"})
	c := client(t)
	t.Run("responses: response.failed", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{ErrorInStream: true, ErrorAfterChunks: 2, Error: "openai.rate_limit"})
		resp := call(t, c, "POST", s.URL()+"/v1/responses", responsesBody("gpt-4o", true), bearer)
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		events, err := readSSE(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		names, text := checkResponsesEvents(t, events)
		want := append(responsesEventNames(2)[:6], "response.failed")
		if !slices.Equal(names, want) || text != completionText(2) {
			t.Fatalf("events %v text %q", names, text)
		}
		var failed struct {
			Response struct {
				Status string `json:"status"`
				Error  struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			} `json:"response"`
		}
		decode(t, []byte(events[len(events)-1].Data), &failed)
		if failed.Response.Status != "failed" || failed.Response.Error.Code != "rate_limit_exceeded" || !strings.Contains(failed.Response.Error.Message, "Rate limit reached for gpt-4o") {
			t.Errorf("response.failed %s", events[len(events)-1].Data)
		}
	})
	t.Run("responses: default error", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{ErrorInStream: true})
		resp := call(t, c, "POST", s.URL()+"/v1/responses", responsesBody("gpt-4o", true), bearer)
		defer resp.Body.Close()
		events, _ := readSSE(resp.Body)
		last := events[len(events)-1]
		if last.Name != "response.failed" || !strings.Contains(last.Data, `"code":"server_error"`) {
			t.Errorf("last event %+v", last)
		}
	})
	t.Run("completions", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{ErrorInStream: true, ErrorAfterChunks: 1})
		resp := call(t, c, "POST", s.URL()+"/v1/completions", completionBody("m", true, false), bearer)
		defer resp.Body.Close()
		events, _ := readSSE(resp.Body)
		if len(events) != 2 || !strings.HasPrefix(events[1].Data, `{"error":{`) || !strings.Contains(events[1].Data, "server_error") {
			t.Errorf("events %+v", events)
		}
	})
	t.Run("non-stream responses gets a plain error", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{ErrorInStream: true, Error: "openai.server_error"})
		resp := call(t, c, "POST", s.URL()+"/v1/responses", responsesBody("gpt-4o", false), bearer)
		if readAll(t, resp); resp.StatusCode != 500 {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
	t.Run("speech gets a plain error", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{ErrorInStream: true, Error: "openai.server_error"})
		resp := call(t, c, "POST", s.URL()+"/v1/audio/speech", `{"model":"tts-1","input":"x","voice":"alloy"}`, bearer)
		if body := readAll(t, resp); resp.StatusCode != 500 || !json.Valid(body) {
			t.Errorf("status %d body %q", resp.StatusCode, body)
		}
	})
	s.ClearRules()
}

func TestNewRoutesStrictModels(t *testing.T) {
	s := start(t, Options{Name: "strict", StrictModels: true})
	c := client(t)
	for _, path := range []string{"/v1/completions", "/v1/moderations", "/v1/images/generations", "/v1/audio/speech", "/v1/responses"} {
		resp := call(t, c, "POST", s.URL()+path, `{"model":"nope","input":"x","prompt":"x","voice":"alloy"}`, bearer)
		if body := readAll(t, resp); resp.StatusCode != 404 || !strings.Contains(string(body), "model_not_found") {
			t.Errorf("%s: status %d body %s", path, resp.StatusCode, body)
		}
	}
	resp := call(t, c, "POST", s.URL()+"/v1/messages/count_tokens", `{"model":"nope","messages":[]}`, map[string]string{"x-api-key": "k"})
	if body := readAll(t, resp); resp.StatusCode != 404 || !strings.Contains(string(body), "not_found_error") {
		t.Errorf("count_tokens: status %d body %s", resp.StatusCode, body)
	}
	// The default models cover the new routes.
	for _, m := range []string{"gpt-3.5-turbo-instruct", "omni-moderation-latest", "gpt-image-1", "tts-1", "whisper-1"} {
		if !s.models[m] {
			t.Errorf("%s is not a default model", m)
		}
	}
}
