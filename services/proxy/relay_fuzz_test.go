package proxy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/provider"
	"switchyard.dev/shared/sse"
)

// The keys of the fuzzed provider. Neither is credential-shaped, so only
// masking by value hides them; the second has a '/' and a '+', which some
// JSON encoders escape ("\/").
var relaySecrets = []string{"canary.fz1.3e9d5a", "canary/fz2+b71c"}

// Relay modes: the fuzzer's first argument picks the upstream's format,
// the caller's endpoint, and whether the stream opens well before the
// fuzzed bytes (so that they reach the relay loop rather than the
// opening, where a bad stream fails over).
const (
	relayUpAnthropic     = 1 << iota // the upstream speaks Anthropic, else OpenAI
	relayCallerAnthropic             // the caller uses /v1/messages, else /v1/chat/completions
	relayOpened                      // a well-formed opening with content precedes the bytes
)

var (
	openAIOpening = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello\"},\"finish_reason\":null}]}\n\n"
	anthropicOpening = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\n"
)

// fuzzPayload finds the stream the caller's message carries, in whatever
// shape the request reached the upstream (translated or not).
var fuzzPayload = regexp.MustCompile(`FUZZ:([A-Za-z0-9+/=]*)`)

// FuzzRelay feeds arbitrary upstream event-stream bytes, OpenAI and
// Anthropic, through a real proxy (relayed as they are, or translated for
// the other endpoint) and checks what the caller receives:
//
//   - no panic; a failed opening is a JSON error, failed over and masked;
//   - a 200 is a sequence of complete SSE frames (each ends in a blank
//     line), translated ones carrying JSON data or [DONE];
//   - every event a client library takes for an error carries no secret
//     of the provider in what a client reads of it (its name and data),
//     neither in its bytes nor in its decoded strings;
//   - a stream with neither a terminal event nor an error event ends with
//     exactly one stream_incomplete error event, last; a stream with one
//     of them gets none.
//
// The seeds include the inputs of the leaks and silent ends it found
// (fixed since). Under plain go test only the seeds run (a fresh proxy
// each, some milliseconds); fuzz with
//
//	go test ./services/proxy -run '^$' -fuzz '^FuzzRelay$' -fuzztime 5m -fuzzminimizetime 20x
func FuzzRelay(f *testing.F) {
	sec := relaySecrets
	seeds := []struct {
		mode   uint8
		stream string
	}{
		{0, openAIOpening + "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"},
		{relayOpened, "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" more\"},\"finish_reason\":null}]}\n\n"},
		{relayOpened, "data: {\"error\":{\"message\":\"Incorrect API key provided: " + sec[0] + "\",\"code\":\"invalid_api_key\"}}\n\n"},
		{relayOpened | relayCallerAnthropic, "data: {\"error\":{\"message\":\"key " + sec[0] + " and " + sec[1] + "\"}}\n\n"},
		// OpenRouter's mid-stream error: a chunk with an error member
		// after others, and finish_reason "error".
		{relayOpened, "data: {\"id\":\"gen-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"provider\":\"p\",\"error\":{\"code\":\"server_error\",\"message\":\"upstream refused key " + sec[0] + "\"},\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"error\"}]}\n\n"},
		// An error event whose JSON escapes the '/' of the key.
		{relayOpened, "data: {\"error\":{\"message\":\"key " + strings.ReplaceAll(sec[1], "/", `\/`) + " refused\"}}\n\n"},
		{relayOpened, "data: {\"error\":\n" + "data: {\"message\":\"" + sec[0] + "\"}}\n\n"},
		{relayOpened, "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"cut\"}"},
		{relayOpened, ": keep-alive\n\n\n\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":null}]}\r\n\r\n"},
		{0, "data: {\"error\":{\"message\":\"" + sec[0] + "\",\"type\":\"invalid_request_error\"}}\n\n"},
		{0, ""},
		{0, "<html><body>502</body></html>\n"},
		{relayUpAnthropic | relayCallerAnthropic, anthropicOpening + "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"},
		{relayUpAnthropic | relayCallerAnthropic | relayOpened, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key: " + sec[0] + "\"}}\n\n"},
		{relayUpAnthropic | relayOpened, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key: " + sec[1] + "\"}}\n\n"},
		{relayUpAnthropic | relayOpened, "event: ping\ndata: {\"type\":\"ping\"}\n\n"},
		{relayUpAnthropic | relayCallerAnthropic | relayOpened, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"late\"}}\n\n"},
		{relayCallerAnthropic | relayOpened, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"},
		// The same, translated for an Anthropic caller: an error event.
		{relayCallerAnthropic, "data: {\"id\":\"gen-1\",\"object\":\"chat.completion.chunk\",\"error\":{\"code\":\"server_error\",\"message\":\"upstream refused key " + sec[0] + "\"},\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"error\"}]}\n\n"},
		// Found by the fuzzer: an Anthropic error event without its name
		// (the translator reads the type from the data), translated.
		{relayUpAnthropic | relayOpened, "data: {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key: " + sec[0] + "\"}}\n\n"},
		// Found by the fuzzer: an error event that is not JSON, translated.
		{relayCallerAnthropic | relayOpened, "data:{\"error\":0\n\n"},
	}
	for _, s := range seeds {
		f.Add(s.mode, []byte(s.stream))
	}
	// The translators' golden streams, each way.
	for dir, mode := range map[string]uint8{"chat_to_messages_stream": relayCallerAnthropic, "messages_to_chat_stream": relayUpAnthropic} {
		paths, _ := filepath.Glob(filepath.Join("translate", "testdata", dir, "*.sse"))
		for _, p := range paths {
			if strings.Contains(p, ".golden.") {
				continue
			}
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(mode, b)
			f.Add(mode^relayCallerAnthropic, b) // and relayed as is
		}
	}

	// One upstream for every run: it answers 200 with the stream the
	// request carries, then ends the response.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m := fuzzPayload.FindSubmatch(body)
		if m == nil {
			http.Error(w, `{"error":{"message":"no payload"}}`, http.StatusBadRequest)
			return
		}
		stream, err := base64.StdEncoding.DecodeString(string(m[1]))
		if err != nil {
			http.Error(w, `{"error":{"message":"bad payload"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(stream)
	}))
	f.Cleanup(up.Close)
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	f.Cleanup(client.CloseIdleConnections)

	f.Fuzz(func(t *testing.T, mode uint8, stream []byte) {
		if bytes.Contains(stream, []byte("stream_incomplete")) || bytes.Contains(stream, []byte("terminal event")) {
			t.Skip("the bytes forge the gateway's own stream_incomplete event")
		}
		upFormat, callerFormat := provider.FormatOpenAI, provider.FormatOpenAI
		typ, base, path := "openai", up.URL+"/v1", "/v1/chat/completions"
		payload := stream
		if mode&relayUpAnthropic != 0 {
			upFormat, typ, base = provider.FormatAnthropic, "anthropic", up.URL
			if mode&relayOpened != 0 {
				payload = append([]byte(anthropicOpening), stream...)
			}
		} else if mode&relayOpened != 0 {
			payload = append([]byte(openAIOpening), stream...)
		}
		if mode&relayCallerAnthropic != 0 {
			callerFormat, path = provider.FormatAnthropic, "/v1/messages"
		}
		cfg := config.Defaults()
		cfg.Timeouts.Attempt, cfg.Timeouts.StreamIdle = 10*time.Second, 10*time.Second
		cfg.Retry.BackoffBase, cfg.Retry.BackoffMax = time.Millisecond, time.Millisecond
		cfg.Providers = []config.Provider{{
			Name: "fz", Type: typ, BaseURL: base, Selection: config.SelectionRoundRobin,
			Keys: []config.Key{
				{ID: "k1", Weight: 1, Value: config.NewSecret(relaySecrets[0])},
				{ID: "k2", Weight: 1, Value: config.NewSecret(relaySecrets[1])},
			},
			Models: []config.Model{{Name: "fz-model", Kind: config.KindChat}},
		}}
		_, url := startService(t, cfg, Deps{Log: slog.New(slog.DiscardHandler)})

		msg := "FUZZ:" + base64.StdEncoding.EncodeToString(payload)
		body := `{"model":"fz-model","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"` + msg + `"}]}`
		resp, err := client.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		checkRelayed(t, upFormat, callerFormat, resp.StatusCode, resp.Header.Get("Content-Type"), out)
	})
}

// checkRelayed checks one answer of FuzzRelay.
func checkRelayed(t *testing.T, upFormat, callerFormat provider.Format, status int, ctype string, out []byte) {
	t.Helper()
	if status != http.StatusOK {
		// The opening failed: a JSON error in the endpoint's format.
		if !strings.HasPrefix(ctype, "application/json") || !json.Valid(out) {
			t.Fatalf("status %d, %s: not a JSON error: %q", status, ctype, out)
		}
		if s := secretIn(out); s != "" {
			t.Fatalf("status %d: the error carries the secret %q: %s", status, s, out)
		}
		return
	}
	if !strings.HasPrefix(ctype, "text/event-stream") {
		t.Fatalf("200 with Content-Type %q: %q", ctype, out)
	}
	type event struct{ name, data, raw string }
	var evs []event
	rd := sse.NewReader(bytes.NewReader(out))
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the caller's stream ends inside a frame (%v): %q", err, out)
		}
		evs = append(evs, event{string(ev.Name), string(ev.Data), string(ev.Raw)})
	}
	translated := upFormat != callerFormat
	incomplete, lastIncomplete := 0, -1
	terminal, failed := false, false
	for i, ev := range evs {
		if strings.Contains(ev.data, `"code":"stream_incomplete"`) && strings.Contains(ev.data, "the upstream stream ended before its terminal event") {
			incomplete++
			lastIncomplete = i
			continue
		}
		if translated && ev.data != "[DONE]" && !json.Valid([]byte(ev.data)) {
			t.Fatalf("translated event %d carries data that is not JSON: %q\nin %q", i, ev.data, out)
		}
		switch provider.InspectEvent(callerFormat, []byte(ev.name), []byte(ev.data)) {
		case provider.EventTerminal:
			// A translated stream ends with the translation of the
			// upstream's own terminal event ([DONE], message_stop): a
			// finish_reason translated from a message_delta is not one.
			terminal = terminal || !translated || ev.data == "[DONE]" || ev.name == "message_stop"
		case provider.EventError:
			failed = true
		}
		if clientSeesError(callerFormat, ev.name, ev.data) {
			// What a client reads of an event: its name and its data
			// (other fields are ignored).
			if s := secretIn([]byte(ev.name), []byte(ev.data)); s != "" {
				t.Fatalf("error event %d carries the secret %q: %q", i, s, ev.raw)
			}
		}
	}
	switch {
	case incomplete > 1:
		t.Fatalf("%d stream_incomplete events: %q", incomplete, out)
	case incomplete == 1 && lastIncomplete != len(evs)-1:
		t.Fatalf("events after the stream_incomplete event: %q", out)
	case incomplete == 1 && (terminal || failed):
		t.Fatalf("a stream_incomplete event after a terminal or error event (terminal %v, error %v): %q", terminal, failed, out)
	case incomplete == 0 && !terminal && !failed:
		t.Fatalf("a stream with neither a terminal nor an error event ended without a stream_incomplete event: %q", out)
	}
}

// clientSeesError reports whether a client library takes the event for an
// error: the OpenAI SDKs any JSON object with a non-empty "error" member
// (wherever it is), the Anthropic SDKs an event named "error".
func clientSeesError(f provider.Format, name, data string) bool {
	if name == "error" {
		return true
	}
	if f == provider.FormatAnthropic {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(data), &m) != nil {
		return false
	}
	switch v := strings.TrimSpace(string(m["error"])); v {
	case "", "null", "false", "0", `""`, "{}", "[]":
		return false
	}
	return true
}

// secretIn returns a provider secret found in bs, in their bytes or in
// the decoded strings of the JSON they hold (what a client reads).
func secretIn(bs ...[]byte) string {
	var texts []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			texts = append(texts, v)
		case []any:
			for _, x := range v {
				walk(x)
			}
		case map[string]any:
			for k, x := range v {
				texts = append(texts, k)
				walk(x)
			}
		}
	}
	for _, b := range bs {
		texts = append(texts, string(b))
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
			var v any
			if json.Unmarshal([]byte(line), &v) == nil {
				walk(v)
			}
		}
		var whole any
		if json.Unmarshal(b, &whole) == nil {
			walk(whole)
		}
	}
	for _, s := range relaySecrets {
		for _, t := range texts {
			if strings.Contains(t, s) {
				return s
			}
		}
	}
	return ""
}
