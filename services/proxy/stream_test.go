package proxy

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

const streamBody = `{"model":"demo-chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`

func TestStreamRelayedChunkByChunk(t *testing.T) {
	f := newFixture(t)
	const delay = 60 * time.Millisecond
	f.openai.AddRule(fakeprovider.Rule{ChunkDelay: delay, Chunks: 5})
	resp, events := f.stream(t, "/v1/chat/completions", streamBody)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for name, want := range map[string]string{"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
		"X-Switchyard-Provider": "fake-openai", "X-Switchyard-Model": "demo-model", "X-Switchyard-Attempts": "1"} {
		if got := resp.Header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if resp.Header.Get("X-Switchyard-Key-Id") == "" || !strings.HasPrefix(resp.Header.Get("X-Request-Id"), "req_") {
		t.Errorf("key id %q, request id %q", resp.Header.Get("X-Switchyard-Key-Id"), resp.Header.Get("X-Request-Id"))
	}
	if len(events) < 7 || events[len(events)-1].data != "[DONE]" {
		t.Fatalf("events: %+v", events)
	}
	var text strings.Builder
	var contentAt []time.Time
	for _, ev := range events[:len(events)-1] {
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev.data), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", ev.data, err)
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "" {
			text.WriteString(chunk.Choices[0].Delta.Content)
			contentAt = append(contentAt, ev.at)
		}
	}
	if len(contentAt) != 5 {
		t.Fatalf("%d content chunks, want 5", len(contentAt))
	}
	// Relayed as they came: each content chunk arrives about one delay
	// after the previous one, not all together at the end.
	for i := 1; i < len(contentAt); i++ {
		if gap := contentAt[i].Sub(contentAt[i-1]); gap < delay/2 {
			t.Errorf("chunk %d arrived %v after chunk %d: buffered", i, gap, i-1)
		}
	}
	if text.Len() == 0 {
		t.Error("no text")
	}
}

func TestTruncatedStreamEndsWithOneErrorEvent(t *testing.T) {
	tests := []struct {
		name, path, body string
		anthropic        bool
	}{
		{"openai", "/v1/chat/completions", streamBody, false},
		{"anthropic", "/v1/messages", `{"model":"fake-anthropic/demo-claude","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.openai.AddRule(fakeprovider.Rule{CutAfter: 2})
			f.anthropic.AddRule(fakeprovider.Rule{CutAfter: 2})
			resp, events := f.stream(t, tt.path, tt.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			errorsSeen := 0
			for _, ev := range events {
				if strings.Contains(ev.data, `"error"`) {
					errorsSeen++
				}
				if ev.data == "[DONE]" || ev.name == "message_stop" {
					t.Errorf("terminal event relayed for a cut stream: %+v", ev)
				}
			}
			last := events[len(events)-1]
			if errorsSeen != 1 || !strings.Contains(last.data, `"code":"stream_incomplete"`) {
				t.Fatalf("want one final stream_incomplete error, got %d: %+v", errorsSeen, events)
			}
			if tt.anthropic && last.name != "error" {
				t.Errorf("anthropic error event named %q", last.name)
			}
		})
	}
}

func TestStreamFailsOverBeforeFirstByte(t *testing.T) {
	f := newFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.server_error", ErrorInStream: true})
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a2", Reset: true})
	resp, events := f.stream(t, "/v1/chat/completions", streamBody)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if resp.Header.Get("X-Switchyard-Provider") != "fake-anthropic" {
		t.Errorf("served by %q", resp.Header.Get("X-Switchyard-Provider"))
	}
	if events[len(events)-1].data != "[DONE]" {
		t.Errorf("translated stream does not end with [DONE]: %+v", events)
	}
	for _, ev := range events {
		if strings.Contains(ev.data, "error") {
			t.Errorf("error relayed: %s", ev.data)
		}
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Timeouts.StreamIdle = 100 * time.Millisecond })
	// chunks a minute apart: without the idle timeout the stream would
	// last minutes, so 10 s is a correctness deadline with room for -race
	f.openai.AddRule(fakeprovider.Rule{ChunkDelay: time.Minute, Chunks: 3})
	start := time.Now()
	_, events := f.stream(t, "/v1/chat/completions", streamBody)
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("idle stream took %v to end", el)
	}
	last := events[len(events)-1]
	if !strings.Contains(last.data, "stream_incomplete") {
		t.Errorf("last event %+v", last)
	}
}

func TestAnthropicStreamToOpenAICaller(t *testing.T) {
	f := newFixture(t)
	resp, events := f.stream(t, "/v1/chat/completions",
		`{"model":"demo-claude","stream":true,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || len(events) < 3 || events[len(events)-1].data != "[DONE]" {
		t.Fatalf("status %d events %+v", resp.StatusCode, events)
	}
	calls := f.anthropic.Calls()
	if len(calls) != 1 || !calls[0].Stream {
		t.Fatalf("calls %+v", calls)
	}
	var req struct {
		System   any `json:"system"`
		Messages []any
	}
	_ = json.Unmarshal(calls[0].Body, &req)
	if req.System == nil || len(req.Messages) != 1 {
		t.Errorf("translated request %s", calls[0].Body)
	}
}

func TestOpenAIStreamToAnthropicCaller(t *testing.T) {
	f := newFixture(t)
	resp, events := f.stream(t, "/v1/messages",
		`{"model":"fake-openai/demo-model","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || len(events) < 4 {
		t.Fatalf("status %d events %+v", resp.StatusCode, events)
	}
	if events[0].name != "message_start" || events[len(events)-1].name != "message_stop" {
		t.Errorf("events %+v", events)
	}
}

func TestErrorAfterFirstContentIsRelayedOnce(t *testing.T) {
	f := newFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error", ErrorInStream: true, ErrorAfterChunks: 2})
	resp, events := f.stream(t, "/v1/chat/completions", streamBody)
	if resp.StatusCode != 200 || resp.Header.Get("X-Switchyard-Provider") != "fake-openai" {
		t.Fatalf("status %d provider %q", resp.StatusCode, resp.Header.Get("X-Switchyard-Provider"))
	}
	errs := 0
	for _, ev := range events {
		if strings.Contains(ev.data, `"error"`) {
			errs++
		}
	}
	if errs != 1 || strings.Contains(events[len(events)-1].data, "stream_incomplete") {
		t.Errorf("want the upstream's error event once and no stream_incomplete: %+v", events)
	}
}

// TestUntranslatableOpening: a stream whose opening event the caller's
// format cannot carry ends at once with the error that names it, and it
// does not count against its target (a good answer for a native caller):
// no retry, no failover, no hold.
func TestUntranslatableOpening(t *testing.T) {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	body := ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}`) +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"code_execution","input":{}}}`)
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	defer up.Close()
	f := oneProviderFixture(t, "anthropic", up.URL, "sk-stub")
	for range 6 {
		resp, events := f.stream(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != http.StatusOK || len(events) == 0 || !strings.Contains(events[len(events)-1].data, `"code":"unsupported_translation"`) ||
			!strings.Contains(events[len(events)-1].data, "server_tool_use") {
			t.Fatalf("%d %v", resp.StatusCode, events)
		}
	}
	if n := calls.Load(); n != 6 {
		t.Errorf("%d upstream calls for 6 requests, want one each", n)
	}
	if h := f.svc.engine.Holds(); len(h) != 0 {
		t.Errorf("holds %+v: the target's answer counted against it", h)
	}
}

// TestUntranslatableEventEndsTheStream: an upstream event the caller's
// format cannot carry (an Anthropic server tool block, for an OpenAI
// caller) ends the relayed stream with an error event that says so, not an
// answer that looks whole with the block left out.
func TestUntranslatableEventEndsTheStream(t *testing.T) {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	body := ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}`) +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me run it."}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"code_execution","input":{}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"code\":\"1+1\"}"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":1}`) +
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":20}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
	f := oneProviderFixture(t, "anthropic", serveStream(t, body), "sk-ant-test")
	resp, events := f.stream(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusOK || len(events) < 2 {
		t.Fatalf("%d, %d events", resp.StatusCode, len(events))
	}
	var text strings.Builder
	for _, e := range events[:len(events)-1] {
		if strings.Contains(e.data, "[DONE]") || strings.Contains(e.data, `"finish_reason":"stop"`) {
			t.Fatalf("the stream looks whole: %s", e.data)
		}
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		if json.Unmarshal([]byte(e.data), &c) == nil && len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
		}
	}
	if text.String() != "Let me run it." {
		t.Errorf("relayed text %q", text.String())
	}
	if last := events[len(events)-1].data; !strings.Contains(last, `"code":"unsupported_translation"`) || !strings.Contains(last, "cannot carry") {
		t.Fatalf("last event %s, want the error that ends it", last)
	}
}

// TestStreamedAnswerToolDropsText: a chat or Responses caller asking for a
// json_schema answer, with thinking, from an Anthropic provider whose model
// writes text before calling the json_response tool gets the tool's JSON
// alone as the streamed answer, as the non-stream answer gives it.
func TestStreamedAnswerToolDropsText(t *testing.T) {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	body := ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}`) +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Sure: "}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"json_response","input":{}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"ok\":true}"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":1}`) +
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":20}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
	f := oneProviderFixture(t, "anthropic", serveStream(t, body), "sk-ant-test")
	for _, tt := range []struct{ path, body, field string }{
		{"/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":4096,"reasoning_effort":"low","messages":[{"role":"user","content":"hi"}],` +
			`"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object"}}}}`, "content"},
		{"/v1/responses", `{"model":"m","stream":true,"max_output_tokens":4096,"reasoning":{"effort":"low"},"input":"hi",` +
			`"text":{"format":{"type":"json_schema","name":"r","schema":{"type":"object"}}}}`, "delta"},
	} {
		resp, events := f.stream(t, tt.path, tt.body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v", tt.path, resp.StatusCode, events)
		}
		var text strings.Builder
		for _, e := range events {
			var c struct {
				Choices []struct{ Delta struct{ Content string } }
				Type    string
				Delta   string
			}
			if json.Unmarshal([]byte(e.data), &c) != nil {
				continue
			}
			if len(c.Choices) > 0 {
				text.WriteString(c.Choices[0].Delta.Content)
			}
			if c.Type == "response.output_text.delta" {
				text.WriteString(c.Delta)
			}
		}
		if text.String() != `{"ok":true}` {
			t.Errorf("%s: streamed answer %q, want the tool's JSON alone", tt.path, text.String())
		}
	}
}

// TestStreamDeadlines: a stream being relayed is bounded by its idle
// timeout (none with timeouts.stream_idle 0, which cut every stream at its
// first pause) and timeouts.request, not by the caller's SDK timeout
// (X-Stainless-Timeout, the SDK's wait for the answer to begin).
func TestStreamDeadlines(t *testing.T) {
	streamBody := `{"model":"demo-chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	t.Run("stream_idle 0", func(t *testing.T) {
		f := newFixture(t, func(c *config.Config) { c.Timeouts.StreamIdle = 0 })
		f.openai.AddRule(fakeprovider.Rule{ChunkDelay: 50 * time.Millisecond, Chunks: 5})
		status, _, body := f.call(t, "/v1/chat/completions", streamBody)
		if status != 200 || !strings.Contains(string(body), "[DONE]") || strings.Contains(string(body), "stream_incomplete") {
			t.Fatalf("%d %s", status, body)
		}
	})
	t.Run("the SDK's timeout", func(t *testing.T) {
		f := newFixture(t)
		f.openai.AddRule(fakeprovider.Rule{ChunkDelay: 100 * time.Millisecond, Chunks: 6})
		status, _, body := f.call(t, "/v1/chat/completions", streamBody, "X-Stainless-Timeout", "0.3")
		if status != 200 || !strings.Contains(string(body), "[DONE]") || strings.Contains(string(body), "stream_incomplete") {
			t.Fatalf("%d %s", status, body)
		}
	})
	t.Run("the provider's timeouts.request", func(t *testing.T) {
		f := newFixture(t, func(c *config.Config) { c.Providers[0].Timeouts.Request = 300 * time.Millisecond })
		f.openai.AddRule(fakeprovider.Rule{ChunkDelay: 100 * time.Millisecond, Chunks: 20})
		status, _, body := f.call(t, "/v1/chat/completions", streamBody)
		if status != 200 || strings.Contains(string(body), "[DONE]") || !strings.Contains(string(body), "timeouts.request") {
			t.Fatalf("stream: %d %s", status, body)
		}
		f.openai.ClearRules()
		f.openai.AddRule(fakeprovider.Rule{FirstByteLatency: 5 * time.Second})
		started := time.Now()
		before := len(f.openai.Calls())
		status, h, body := f.call(t, "/v1/chat/completions", `{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`)
		if status == 200 || time.Since(started) > 3*time.Second || h.Get(headerAttempts) != "1" || len(f.openai.Calls())-before != 1 {
			t.Fatalf("a slow answer: %d after %s, %s attempts, %d calls: %s", status, time.Since(started), h.Get(headerAttempts), len(f.openai.Calls())-before, body)
		}
		// A chain moves to its next step once the provider's time is up.
		status, h, body = f.call(t, "/v1/chat/completions", `{"model":"demo-chat","messages":[{"role":"user","content":"hi"}]}`)
		if status != 200 || h.Get(headerProvider) != "fake-anthropic" || h.Get(headerAttempts) != "2" {
			t.Fatalf("a chain: %d by %q after %s attempts: %s", status, h.Get(headerProvider), h.Get(headerAttempts), body)
		}
	})
	t.Run("the provider's timeouts.request, speech", func(t *testing.T) {
		// speech is relayed as streams are: bounded by it too
		f := newFixture(t, func(c *config.Config) {
			c.Providers[0].Timeouts.Request = 300 * time.Millisecond
			c.Providers[0].Models = append(c.Providers[0].Models, config.Model{Name: "voice", Upstream: "tts-1", Kind: config.KindSpeech})
		})
		f.openai.AddRule(fakeprovider.Rule{Path: "/v1/audio/speech", ChunkDelay: 100 * time.Millisecond, Chunks: 20})
		req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/audio/speech", strings.NewReader(`{"model":"voice","input":"hello","voice":"alloy"}`))
		req.Header.Set("Authorization", "Bearer "+clientSecret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) || time.Since(started) > 1500*time.Millisecond {
			t.Fatalf("speech past the provider's timeouts.request: %d, read error %v after %s", resp.StatusCode, err, time.Since(started))
		}
	})
	t.Run("timeouts.request", func(t *testing.T) {
		f := newFixture(t, func(c *config.Config) { c.Timeouts.Request = 300 * time.Millisecond })
		f.openai.AddRule(fakeprovider.Rule{ChunkDelay: 100 * time.Millisecond, Chunks: 20})
		status, _, body := f.call(t, "/v1/chat/completions", streamBody)
		if status != 200 || strings.Contains(string(body), "[DONE]") || !strings.Contains(string(body), "timeouts.request") {
			t.Fatalf("%d %s", status, body)
		}
	})
}

// TestKeepAliveAfterContent: a content event followed in the same read by
// a keep-alive comment reaches the caller at once, not with the next event
// (the comment made the relay think another event was ready to go out with
// it).
func TestKeepAliveAfterContent(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"))
		_, _ = w.Write([]byte(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"A"},"finish_reason":null}]}` + "\n\n: keep-alive\n\n"))
		w.(http.Flusher).Flush()
		select { // the next event: after 2 s (content held back until then fails the test)
		case <-release:
		case <-time.After(2 * time.Second):
		}
		_, _ = w.Write([]byte(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"))
	}))
	defer up.Close()
	f := oneProviderFixture(t, "openai-compatible", up.URL, "sk-stub")
	defer close(release)
	start := time.Now()
	_, events := f.stream(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if len(events) < 2 || !strings.Contains(events[1].data, `"A"`) {
		t.Fatalf("events %+v", events)
	}
	if d := events[1].at.Sub(start); d > time.Second {
		t.Fatalf("the content reached the caller after %v, with the upstream's next event", d)
	}
}

// TestResponsesStreamCutAtStartFailsOver: a Responses API stream that ends
// after its opening events (created, in_progress, the message item and its
// empty content part) has sent the caller nothing yet: it fails over.
func TestResponsesStreamCutAtStartFailsOver(t *testing.T) {
	f := newFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Path: "/v1/responses", CutAtStart: true, Times: 1})
	status, h, body := f.call(t, "/v1/responses", `{"model":"demo-model","stream":true,"input":"hi"}`)
	if status != 200 || strings.Contains(string(body), "stream_incomplete") || h.Get(headerAttempts) != "2" ||
		!strings.Contains(string(body), "response.completed") {
		t.Fatalf("%d, %s attempts: %s", status, h.Get(headerAttempts), body)
	}
}

// serveStream serves body as an event stream to every request until the
// test ends, and returns its URL.
func serveStream(t *testing.T, body string) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(up.Close)
	return up.URL
}

// A stream whose upstream sends its headers and then nothing fails its
// attempt after timeouts.stream_idle, not the attempt timeout (a minute
// here), and the request fails over: the opening of a stream is as
// bounded by the idle timeout as the rest of it.
func TestStreamSilentAfterHeaders(t *testing.T) {
	var calls atomic.Int32
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // nothing more, until the proxy lets go
	}))
	t.Cleanup(silent.Close)
	f := newFixture(t, func(c *config.Config) {
		c.Timeouts.Attempt = time.Minute
		c.Timeouts.StreamIdle = 200 * time.Millisecond
		c.Providers[0].BaseURL = silent.URL + "/v1"
	})
	client := &http.Client{Timeout: 20 * time.Second} // each silent attempt would take the attempt's minute
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(streamBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the stream did not fail over from a silent upstream: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get(headerProvider) != "fake-anthropic" || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("%d served by %q: %s", resp.StatusCode, resp.Header.Get(headerProvider), body)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls to the silent provider, want one per key", n)
	}
}

// A stream ends for its caller at its last event (OpenAI's [DONE],
// Anthropic's message_stop, the Responses API's response.completed), even
// when the upstream keeps its body open after it: the caller's answer
// stayed open until the upstream closed it or the idle timeout passed
// (a minute here). The upstream connection is closed, not pooled.
func TestStreamEndsAtItsLastEvent(t *testing.T) {
	var open atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		switch r.URL.Path {
		case "/v1/chat/completions":
			_, _ = io.WriteString(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"+
				"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"+
				"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\n"+
				"data: [DONE]\n\n")
		case "/v1/messages":
			_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n"+
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"+
				"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"+
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n"+
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		case "/v1/responses":
			_, _ = io.WriteString(w, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"r\",\"status\":\"in_progress\",\"output\":[]}}\n\n"+
				"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"item_id\":\"i\",\"output_index\":0,\"content_index\":0,\"delta\":\"hi\"}\n\n"+
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"r\",\"status\":\"completed\",\"output\":[],\"usage\":{\"input_tokens\":3,\"output_tokens\":1,\"total_tokens\":4}}}\n\n")
		}
		w.(http.Flusher).Flush()
		open.Add(1)
		defer open.Add(-1)
		select { // the body stays open after the last event
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	}))
	t.Cleanup(up.Close)
	cfg := config.Defaults()
	cfg.Timeouts.StreamIdle = time.Minute
	cfg.Providers = []config.Provider{
		{Name: "oa", Type: "openai", BaseURL: up.URL + "/v1", Selection: "round_robin",
			Keys: []config.Key{{ID: "k1", Weight: 1, Value: config.NewSecret("sk-oa")}}, Models: []config.Model{{Name: "m", Kind: "chat"}}},
		{Name: "an", Type: "anthropic", BaseURL: up.URL, Selection: "round_robin",
			Keys: []config.Key{{ID: "k1", Weight: 1, Value: config.NewSecret("sk-an")}}, Models: []config.Model{{Name: "m", Kind: "chat"}}},
	}
	cfg.Clients = []config.ClientKey{{ID: "team", Models: []string{"*"}, Value: config.NewSecret(clientSecret)}}
	f := &fixture{cfg: cfg}
	f.svc, f.url = startService(t, cfg, Deps{Log: testLogger(t)})
	client := &http.Client{Timeout: 20 * time.Second}
	for _, tc := range []struct{ name, path, body, last string }{
		{"chat", "/v1/chat/completions", `{"model":"oa/m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "data: [DONE]"},
		{"messages", "/v1/messages", `{"model":"an/m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "event: message_stop"},
		{"responses", "/v1/responses", `{"model":"oa/m","stream":true,"input":"hi"}`, "event: response.completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, f.url+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+clientSecret)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("the answer did not end at its last event: %v (%s)", err, body)
			}
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), tc.last) {
				t.Fatalf("%d: %s", resp.StatusCode, body)
			}
			testkit.WaitFor(t, 5*time.Second, func() bool { return open.Load() == 0 && f.svc.life.inFlight.Load() == 0 })
		})
	}
}
