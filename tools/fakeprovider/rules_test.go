package fakeprovider

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"
)

func TestErrorLibrary(t *testing.T) {
	s := start(t, Options{Name: "errors"})
	c := client(t)
	for _, name := range ErrorNames() {
		t.Run(name, func(t *testing.T) {
			spec, ok := LookupError(name)
			if !ok {
				t.Fatalf("LookupError(%q) not found", name)
			}
			s.ClearRules()
			s.AddRule(Rule{Error: name})
			path := "/v1/chat/completions"
			switch spec.Flavor {
			case "anthropic":
				path = "/v1/messages"
			case "azure":
				path = "/openai/deployments/d1/chat/completions?api-version=2024-02-01"
			case "gemini":
				path = "/v1beta/openai/chat/completions"
			}
			resp := call(t, c, "POST", s.URL()+path, chatBody("gpt-4o-mini", false, false), map[string]string{"Authorization": "Bearer sk-abcdef0123456789xyz"})
			body := readAll(t, resp)
			if resp.StatusCode != spec.Status {
				t.Errorf("status %d, want %d", resp.StatusCode, spec.Status)
			}
			if !json.Valid(body) || strings.Contains(string(body), "{{") {
				t.Fatalf("body is not filled-in JSON: %s", body)
			}
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || resp.Header.Get("x-request-id") == "" {
				t.Errorf("headers %v", resp.Header)
			}
			var probe any
			decode(t, body, &probe)
			switch spec.Flavor {
			case "gemini":
				wantArray := !strings.HasSuffix(name, "_native")
				if _, isArray := probe.([]any); isArray != wantArray {
					t.Errorf("array form %v, want %v: %s", isArray, wantArray, body)
				}
			case "anthropic":
				if m, _ := probe.(map[string]any); m["type"] != "error" {
					t.Errorf("anthropic error without type error: %s", body)
				}
			default:
				if m, _ := probe.(map[string]any); m["error"] == nil {
					t.Errorf("no error object: %s", body)
				}
			}
			if spec.RetryAfter > 0 && spec.Flavor != "gemini" {
				want := strconv.Itoa(int(spec.RetryAfter / time.Second))
				if got := resp.Header.Get("Retry-After"); got != want {
					t.Errorf("Retry-After %q, want %q", got, want)
				}
			}
		})
	}
}

func TestErrorBodies(t *testing.T) {
	s := start(t, Options{Name: "bodies"})
	c := client(t)
	tests := []struct {
		name string
		rule Rule
		path string
		want []string // substrings of the body
		hdr  map[string]string
	}{
		{"openai rate limit retry after", Rule{Error: "openai.rate_limit", RetryAfter: 7 * time.Second}, "/v1/chat/completions",
			[]string{`"code":"rate_limit_exceeded"`, "Rate limit reached for gpt-4o-mini", "Please try again in 7s."},
			map[string]string{"Retry-After": "7", "x-ratelimit-remaining-requests": "0"}},
		{"azure rate limit", Rule{Error: "azure.rate_limit"}, "/openai/deployments/prod/chat/completions",
			[]string{"Please retry after 6 seconds", "ChatCompletions_Create"},
			map[string]string{"Retry-After": "6", "retry-after-ms": "6000"}},
		{"gemini retry delay", Rule{Error: "gemini.resource_exhausted", RetryAfter: 3 * time.Second}, "/v1beta/openai/chat/completions",
			[]string{`"retryDelay":"3s"`, "RESOURCE_EXHAUSTED"}, nil},
		{"model placeholder", Rule{Error: "openai.model_not_found"}, "/v1/chat/completions",
			[]string{"The model `gpt-4o-mini` does not exist"}, nil},
		{"invalid key hint", Rule{Error: "openai.invalid_api_key"}, "/v1/chat/completions",
			[]string{"Incorrect API key provided: sk-abc", "6789."}, nil},
		{"status override", Rule{Error: "anthropic.overloaded", Status: 503}, "/v1/messages",
			[]string{"overloaded_error"}, nil},
		{"status only", Rule{Status: 502}, "/v1/chat/completions",
			[]string{`"type":"server_error"`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.ClearRules()
			s.AddRule(tt.rule)
			resp := call(t, c, "POST", s.URL()+tt.path, chatBody("gpt-4o-mini", false, false), map[string]string{"Authorization": "Bearer sk-abcdef0123456789"})
			body := string(readAll(t, resp))
			if tt.rule.Status != 0 && resp.StatusCode != tt.rule.Status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.rule.Status)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("body lacks %q: %s", w, body)
				}
			}
			for k, v := range tt.hdr {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestRuleMatching(t *testing.T) {
	s := start(t, Options{Name: "match"})
	c := client(t)
	statusOf := func(key, model, path string) int {
		t.Helper()
		resp := call(t, c, "POST", s.URL()+path, chatBody(model, false, false), map[string]string{"Authorization": "Bearer " + key})
		readAll(t, resp)
		return resp.StatusCode
	}
	const chat = "/v1/chat/completions"

	t.Run("key and model", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{Key: "k1", Model: "m1", Error: "openai.insufficient_quota"})
		for _, tt := range []struct {
			key, model string
			want       int
		}{{"k1", "m1", 429}, {"k1", "m2", 200}, {"k2", "m1", 200}} {
			if got := statusOf(tt.key, tt.model, chat); got != tt.want {
				t.Errorf("key %s model %s: status %d, want %d", tt.key, tt.model, got, tt.want)
			}
		}
	})
	t.Run("path suffix", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{Path: "/embeddings", Error: "openai.server_error"})
		if got := statusOf("k", "m", chat); got != 200 {
			t.Errorf("chat: %d", got)
		}
		if got := statusOf("k", "m", "/v1/embeddings"); got != 500 {
			t.Errorf("embeddings: %d", got)
		}
	})
	t.Run("times counts down and disappears", func(t *testing.T) {
		s.ClearRules()
		id := s.AddRule(Rule{Error: "openai.server_error", Times: 2})
		var got []int
		for range 3 {
			got = append(got, statusOf("k", "m", chat))
		}
		if !slices.Equal(got, []int{500, 500, 200}) {
			t.Errorf("statuses %v", got)
		}
		if len(s.Rules()) != 0 {
			t.Errorf("rule %s still present: %+v", id, s.Rules())
		}
	})
	t.Run("newest first", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{Error: "openai.server_error"})
		newer := s.AddRule(Rule{Error: "openai.rate_limit", Times: 1})
		if got := statusOf("k", "m", chat); got != 429 {
			t.Errorf("first: %d", got)
		}
		if got := statusOf("k", "m", chat); got != 500 {
			t.Errorf("second: %d", got)
		}
		calls := s.Calls()
		if calls[len(calls)-2].Rule != newer {
			t.Errorf("call recorded rule %q, want %q", calls[len(calls)-2].Rule, newer)
		}
	})
	t.Run("remove and clear", func(t *testing.T) {
		s.ClearRules()
		id := s.AddRule(Rule{Error: "openai.server_error"})
		s.RemoveRule(id)
		if got := statusOf("k", "m", chat); got != 200 {
			t.Errorf("after remove: %d", got)
		}
		s.AddRule(Rule{Error: "openai.server_error"})
		s.ClearRules()
		if got := statusOf("k", "m", chat); got != 200 {
			t.Errorf("after clear: %d", got)
		}
	})
	t.Run("same id replaces", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{ID: "x", Error: "openai.server_error"})
		s.AddRule(Rule{ID: "x", Error: "openai.rate_limit"})
		if n := len(s.Rules()); n != 1 {
			t.Errorf("%d rules", n)
		}
		if got := statusOf("k", "m", chat); got != 429 {
			t.Errorf("status %d", got)
		}
	})
	t.Run("probability", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{Error: "openai.server_error", Probability: 0.5})
		const n = 200
		failed := 0
		for range n {
			if statusOf("k", "m", chat) == 500 {
				failed++
			}
		}
		// Binomial(200, 0.5): 60..140 is more than 5 standard deviations wide.
		if failed < 60 || failed > 140 {
			t.Errorf("%d of %d calls failed with probability 0.5", failed, n)
		}
	})
	s.ClearRules()
}

func TestCutAfter(t *testing.T) {
	s := start(t, Options{Name: "cut"})
	c := client(t)
	tests := []struct {
		name, path, body string
		text             func(*testing.T, []sseEvent) string
		terminal         string
	}{
		{"openai", "/v1/chat/completions", chatBody("m", true, true), chatText, "[DONE]"},
		{"anthropic", "/v1/messages", messagesBody("m", true), messageText, "message_stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.ClearRules()
			s.AddRule(Rule{CutAfter: 2})
			resp := call(t, c, "POST", s.URL()+tt.path, tt.body, nil)
			defer resp.Body.Close()
			events, err := readSSE(resp.Body)
			if err != nil {
				t.Fatalf("a cut stream must end cleanly: %v", err)
			}
			if got, want := tt.text(t, events), completionText(2); got != want {
				t.Errorf("text %q, want %q", got, want)
			}
			for _, e := range events {
				if e.Data == tt.terminal || e.Name == tt.terminal || strings.Contains(e.Data, `"finish_reason":"stop"`) || e.Name == "message_delta" {
					t.Errorf("terminal event in a cut stream: %+v", e)
				}
			}
		})
	}
}

func TestErrorInStream(t *testing.T) {
	s := start(t, Options{Name: "sse-error"})
	c := client(t)
	tests := []struct {
		name, path, body string
		rule             Rule
		text             func(*testing.T, []sseEvent) string
		check            func(sseEvent) bool
	}{
		{"openai default", "/v1/chat/completions", chatBody("m", true, false),
			Rule{ErrorInStream: true, ErrorAfterChunks: 3}, chatText,
			func(e sseEvent) bool {
				return e.Name == "" && strings.Contains(e.Data, `"error":{`) && strings.Contains(e.Data, "server_error")
			}},
		{"openai named", "/v1/chat/completions", chatBody("m", true, false),
			Rule{ErrorInStream: true, ErrorAfterChunks: 1, Error: "openai.rate_limit"}, chatText,
			func(e sseEvent) bool { return strings.Contains(e.Data, "rate_limit_exceeded") }},
		{"gemini unwraps the array", "/v1beta/openai/chat/completions", chatBody("m", true, false),
			Rule{ErrorInStream: true, ErrorAfterChunks: 1, Error: "gemini.resource_exhausted"}, chatText,
			func(e sseEvent) bool { return strings.HasPrefix(e.Data, `{"error":`) }},
		{"anthropic default", "/v1/messages", messagesBody("m", true),
			Rule{ErrorInStream: true, ErrorAfterChunks: 2}, messageText,
			func(e sseEvent) bool {
				return e.Name == "error" && strings.HasPrefix(e.Data, `{"type":"error","error":{"type":"overloaded_error"`)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.ClearRules()
			s.AddRule(tt.rule)
			resp := call(t, c, "POST", s.URL()+tt.path, tt.body, nil)
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			events, err := readSSE(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			last := events[len(events)-1]
			if !tt.check(last) {
				t.Errorf("last event %+v", last)
			}
			var payload any
			decode(t, []byte(last.Data), &payload)
			if got, want := tt.text(t, events[:len(events)-1]), completionText(tt.rule.ErrorAfterChunks); got != want {
				t.Errorf("text before the error %q, want %q", got, want)
			}
		})
	}
	t.Run("non-stream gets a plain error", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{ErrorInStream: true, Error: "openai.server_error"})
		resp := call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("m", false, false), nil)
		readAll(t, resp)
		if resp.StatusCode != 500 {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
}

func TestReset(t *testing.T) {
	s := start(t, Options{Name: "reset"})
	c := client(t)
	isReset := func(err error) bool {
		return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	}
	t.Run("before the answer", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{Reset: true, Times: 1})
		resp, err := send(context.Background(), c, "POST", s.URL()+"/v1/chat/completions", chatBody("m", false, false), nil)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("got status %d, want a connection error", resp.StatusCode)
		}
		if !isReset(err) {
			t.Errorf("error %v, want ECONNRESET or EOF", err)
		}
		// The next call is served again.
		readAll(t, call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("m", false, false), nil))
	})
	t.Run("mid-stream", func(t *testing.T) {
		s.ClearRules()
		s.AddRule(Rule{Reset: true, CutAfter: 2})
		resp := call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("m", true, false), nil)
		defer resp.Body.Close()
		events, err := readSSE(resp.Body)
		if err == nil {
			t.Fatalf("stream ended cleanly after %d events, want a reset", len(events))
		}
		if !isReset(err) {
			t.Errorf("error %v, want ECONNRESET or unexpected EOF", err)
		}
		if got := chatText(t, events); got != completionText(2) {
			t.Errorf("text before the reset %q", got)
		}
	})
	s.ClearRules()
}

func TestHang(t *testing.T) {
	t.Run("client cancels", func(t *testing.T) {
		s := start(t, Options{Name: "hang"})
		c := client(t)
		s.AddRule(Rule{Hang: true})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			resp, err := send(ctx, c, "POST", s.URL()+"/v1/chat/completions", chatBody("m", false, false), nil)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		testkit.WaitFor(t, 5*time.Second, func() bool { return s.CountCalls(nil) == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
	})
	t.Run("close ends hung calls", func(t *testing.T) {
		s, err := Start(Options{Name: "hang-close", Rules: []Rule{{Hang: true}}})
		if err != nil {
			t.Fatal(err)
		}
		c := client(t)
		errc := make(chan error, 2)
		for _, body := range []string{chatBody("m", false, false), chatBody("m", true, false)} {
			go func() {
				resp, err := send(context.Background(), c, "POST", s.URL()+"/v1/chat/completions", body, nil)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
		}
		testkit.WaitFor(t, 5*time.Second, func() bool { return s.CountCalls(nil) == 2 })
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for range 2 {
			if err := <-errc; err == nil {
				t.Error("a hung call got an answer")
			}
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

func TestChunkDelay(t *testing.T) {
	const delay = 60 * time.Millisecond
	s := start(t, Options{Name: "slow", ChunkDelay: delay, Chunks: 4})
	c := client(t)
	tests := []struct {
		name, path, body string
		isContent        func(sseEvent) bool
	}{
		{"openai", "/v1/chat/completions", chatBody("m", true, false),
			func(e sseEvent) bool {
				return strings.Contains(e.Data, `"content":"`) && !strings.Contains(e.Data, `"content":""`)
			}},
		{"anthropic", "/v1/messages", messagesBody("m", true),
			func(e sseEvent) bool { return e.Name == "content_block_delta" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := call(t, c, "POST", s.URL()+tt.path, tt.body, nil)
			defer resp.Body.Close()
			events, err := readSSE(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			var at []time.Time
			for _, e := range events {
				if tt.isContent(e) {
					at = append(at, e.At)
				}
			}
			if len(at) != 4 {
				t.Fatalf("%d content chunks", len(at))
			}
			// Each gap is one delay; allow for scheduling, not for batching.
			for i := 1; i < len(at); i++ {
				if gap := at[i].Sub(at[i-1]); gap < delay/2 {
					t.Errorf("gap %d = %s, want about %s", i, gap, delay)
				}
			}
			if span := at[3].Sub(at[0]); span < 3*delay*3/4 {
				t.Errorf("chunks spread over %s, want about %s", span, 3*delay)
			}
		})
	}
	t.Run("rule overrides", func(t *testing.T) {
		s.AddRule(Rule{ChunkDelay: time.Millisecond, Chunks: 2, Times: 1})
		begin := time.Now()
		resp := call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("m", true, false), nil)
		events, err := readSSE(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := chatText(t, events); got != completionText(2) {
			t.Errorf("text %q", got)
		}
		if took := time.Since(begin); took > 10*delay {
			t.Errorf("took %s with a 1ms rule delay", took)
		}
	})
}

func TestLatency(t *testing.T) {
	const latency = 80 * time.Millisecond
	s := start(t, Options{Name: "latency", Latency: latency})
	c := client(t)
	begin := time.Now()
	readAll(t, call(t, c, "GET", s.URL()+"/v1/models", "", nil))
	if took := time.Since(begin); took < latency {
		t.Errorf("answered after %s, want at least %s", took, latency)
	}
	s.AddRule(Rule{FirstByteLatency: 2 * latency, Times: 1})
	begin = time.Now()
	readAll(t, call(t, c, "GET", s.URL()+"/v1/models", "", nil))
	if took := time.Since(begin); took < 2*latency {
		t.Errorf("rule latency: answered after %s, want at least %s", took, 2*latency)
	}
}

func TestKeys(t *testing.T) {
	s := start(t, Options{Name: "keys", Keys: []string{"good"}})
	c := client(t)
	tests := []struct {
		name, path, body string
		hdr              map[string]string
		key              string
		badStatus        int
		badMarker        string
	}{
		{"openai bearer", "/v1/chat/completions", chatBody("m", false, false), map[string]string{"Authorization": "Bearer %s"}, "%s", 401, "invalid_api_key"},
		{"anthropic x-api-key", "/v1/messages", messagesBody("m", false), map[string]string{"x-api-key": "%s", "anthropic-version": "2023-06-01"}, "%s", 401, "authentication_error"},
		{"azure api-key", "/openai/deployments/d/chat/completions?api-version=2024-02-01", chatBody("", false, false), map[string]string{"api-key": "%s"}, "%s", 401, "Access denied"},
		{"gemini header", "/v1beta/openai/chat/completions", chatBody("m", false, false), map[string]string{"x-goog-api-key": "%s"}, "%s", 400, "API_KEY_INVALID"},
		{"gemini query", "/v1beta/openai/chat/completions?key=%s", chatBody("m", false, false), nil, "%s", 400, "API_KEY_INVALID"},
		{"gemini bearer", "/v1beta/openai/chat/completions", chatBody("m", false, false), map[string]string{"Authorization": "Bearer %s"}, "%s", 400, "API_KEY_INVALID"},
	}
	fill := func(m map[string]string, key string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = strings.ReplaceAll(v, "%s", key)
		}
		return out
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.ResetCalls()
			for _, key := range []string{"good", "bad"} {
				resp := call(t, c, "POST", s.URL()+strings.ReplaceAll(tt.path, "%s", key), tt.body, fill(tt.hdr, key))
				body := string(readAll(t, resp))
				want := 200
				if key == "bad" {
					want = tt.badStatus
					if !strings.Contains(body, tt.badMarker) {
						t.Errorf("bad key body lacks %q: %s", tt.badMarker, body)
					}
				}
				if resp.StatusCode != want {
					t.Errorf("key %s: status %d, want %d: %s", key, resp.StatusCode, want, body)
				}
			}
			if got := len(s.CallsFor("good")) + len(s.CallsFor("bad")); got != 2 {
				t.Errorf("recorded keys: %+v", s.Calls())
			}
		})
	}
	t.Run("rules only apply to accepted keys", func(t *testing.T) {
		s.AddRule(Rule{Error: "openai.server_error"})
		defer s.ClearRules()
		resp := call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("m", false, false), map[string]string{"Authorization": "Bearer bad"})
		readAll(t, resp)
		if resp.StatusCode != 401 {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
	t.Run("missing key", func(t *testing.T) {
		resp := call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("m", false, false), nil)
		body := string(readAll(t, resp))
		if resp.StatusCode != 401 || !strings.Contains(body, "You didn't provide an API key") {
			t.Errorf("status %d body %s", resp.StatusCode, body)
		}
	})
}

func TestStrictModels(t *testing.T) {
	s := start(t, Options{Name: "strict", Models: []string{"known", "dep"}, StrictModels: true})
	c := client(t)
	tests := []struct {
		name, path, body string
		status           int
		marker           string
	}{
		{"openai known", "/v1/chat/completions", chatBody("known", false, false), 200, ""},
		{"openai unknown", "/v1/chat/completions", chatBody("gpt-9", false, false), 404, "model_not_found"},
		{"anthropic unknown", "/v1/messages", messagesBody("claude-9", false), 404, "not_found_error"},
		{"azure known deployment", "/openai/deployments/dep/chat/completions", chatBody("", false, false), 200, ""},
		{"azure unknown deployment", "/openai/deployments/nope/chat/completions", chatBody("", false, false), 404, "DeploymentNotFound"},
		{"gemini unknown", "/v1beta/openai/chat/completions", chatBody("gemini-9", false, false), 404, "NOT_FOUND"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := call(t, c, "POST", s.URL()+tt.path, tt.body, nil)
			body := string(readAll(t, resp))
			if resp.StatusCode != tt.status || !strings.Contains(body, tt.marker) {
				t.Errorf("status %d body %s", resp.StatusCode, body)
			}
		})
	}
}

func TestRecording(t *testing.T) {
	s := start(t, Options{Name: "rec"})
	c := client(t)
	body := chatBody("gpt-4o", true, false)
	resp := call(t, c, "POST", s.URL()+"/v1/chat/completions?x=1", body, map[string]string{
		"Authorization": "Bearer sk-rec", "Idempotency-Key": "idem-1", "X-Custom": "yes",
	})
	readAll(t, resp)
	calls := s.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d calls", len(calls))
	}
	got := calls[0]
	if got.Method != "POST" || got.Path != "/v1/chat/completions" || got.Query != "x=1" || got.Key != "sk-rec" ||
		got.Model != "gpt-4o" || !got.Stream || string(got.Body) != body || got.IdempotencyKey != "idem-1" ||
		got.Header.Get("X-Custom") != "yes" || got.At.IsZero() {
		t.Errorf("call %+v", got)
	}
	if n := s.CountCalls(func(c Call) bool { return c.Model == "gpt-4o" }); n != 1 {
		t.Errorf("CountCalls = %d", n)
	}
	s.ResetCalls()
	if n := len(s.Calls()); n != 0 {
		t.Errorf("%d calls after ResetCalls", n)
	}
}

func TestControlEndpoint(t *testing.T) {
	s := start(t, Options{Name: "control"})
	c := client(t)

	resp := call(t, c, "POST", s.URL()+"/_fake/rules",
		`{"key":"k1","error":"openai.rate_limit","retry_after":"3s","first_byte_latency":"10ms","times":2}`, nil)
	var created struct {
		ID string `json:"id"`
	}
	decode(t, readAll(t, resp), &created)
	if resp.StatusCode != 200 || created.ID == "" {
		t.Fatalf("POST rule: status %d id %q", resp.StatusCode, created.ID)
	}

	var rules []Rule
	decode(t, readAll(t, call(t, c, "GET", s.URL()+"/_fake/rules", "", nil)), &rules)
	want := Rule{ID: created.ID, Key: "k1", Error: "openai.rate_limit", RetryAfter: 3 * time.Second, FirstByteLatency: 10 * time.Millisecond, Times: 2}
	if len(rules) != 1 || !reflect.DeepEqual(rules[0], want) {
		t.Fatalf("rules %+v, want %+v", rules, want)
	}

	resp = call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("m", false, false), map[string]string{"Authorization": "Bearer k1"})
	readAll(t, resp)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "3" {
		t.Errorf("scripted call: status %d retry-after %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	var calls []callJSON
	decode(t, readAll(t, call(t, c, "GET", s.URL()+"/_fake/calls?key=k1", "", nil)), &calls)
	if len(calls) != 1 || calls[0].Key != "k1" || calls[0].Rule != created.ID || !strings.Contains(calls[0].Body, `"model":"m"`) {
		t.Errorf("calls %+v", calls)
	}

	for _, tt := range []struct {
		method, path string
		status       int
	}{
		{"DELETE", "/_fake/rules/" + created.ID, 204},
		{"DELETE", "/_fake/rules/" + created.ID, 404},
		{"DELETE", "/_fake/calls", 204},
		{"DELETE", "/_fake/rules", 204},
	} {
		resp := call(t, c, tt.method, s.URL()+tt.path, "", nil)
		readAll(t, resp)
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: status %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
		}
	}
	if n := s.CountCalls(nil); n != 0 {
		t.Errorf("%d calls after DELETE /_fake/calls", n)
	}

	var names []string
	decode(t, readAll(t, call(t, c, "GET", s.URL()+"/_fake/errors", "", nil)), &names)
	if !slices.Equal(names, ErrorNames()) {
		t.Errorf("errors %v", names)
	}

	for _, bad := range []string{`{"error":"nope"}`, `{"chunk_delay":250}`, `{"bogus":1}`, `{"probability":2}`} {
		resp := call(t, c, "POST", s.URL()+"/_fake/rules", bad, nil)
		readAll(t, resp)
		if resp.StatusCode != 400 {
			t.Errorf("POST %s: status %d, want 400", bad, resp.StatusCode)
		}
	}
}

func TestRuleJSON(t *testing.T) {
	r := Rule{ID: "a", Model: "m", Error: "anthropic.overloaded", ChunkDelay: 250 * time.Millisecond, Probability: 0.25, Reset: false, CutAfter: 3,
		Text: []string{"a", "b"}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"a","model":"m","error":"anthropic.overloaded","probability":0.25,"chunk_delay":"250ms","cut_after":3,"text":["a","b"]}`; string(b) != want {
		t.Errorf("marshal %s, want %s", b, want)
	}
	var back Rule
	decode(t, b, &back)
	if !reflect.DeepEqual(back, r) {
		t.Errorf("round trip %+v, want %+v", back, r)
	}
	var cut Rule
	decode(t, []byte(`{"cut_at_start":true,"reset":true}`), &cut)
	if !cut.CutAtStart || !cut.Reset {
		t.Errorf("cut_at_start: %+v", cut)
	}
	if b, _ := json.Marshal(cut); string(b) != `{"cut_at_start":true,"reset":true}` {
		t.Errorf("marshal %s", b)
	}
	var o Options
	decode(t, []byte(`{"name":"x","latency":"1s","keys":["a"],"rules":[{"hang":true}]}`), &o)
	if o.Name != "x" || o.Latency != time.Second || len(o.Rules) != 1 || !o.Rules[0].Hang {
		t.Errorf("options %+v", o)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string // substring of the error; "" = valid
	}{
		{"zero", Options{}, ""},
		{"negative chunks", Options{Chunks: -1}, "chunks"},
		{"unknown error", Options{Rules: []Rule{{}, {Error: "nope"}}}, "rules[1].error"},
		{"reset and hang", Options{Rules: []Rule{{Reset: true, Hang: true}}}, "reset, hang"},
		{"cut at start and after", Options{Rules: []Rule{{CutAtStart: true, CutAfter: 2}}}, "cut_at_start, cut_after"},
		{"bad status", Options{Rules: []Rule{{Status: 42}}}, "status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error naming %q", err, tt.want)
			}
		})
	}
	if _, err := Start(Options{Rules: []Rule{{Error: "nope"}}}); err == nil {
		t.Error("Start accepted an invalid rule")
	}
}

var _ http.Handler = (*Server)(nil)

// TestPeakInFlight: the server counts the provider calls it serves at
// once (control calls aside), and ResetPeak starts over.
func TestPeakInFlight(t *testing.T) {
	s := start(t, Options{Name: "peak"})
	c := client(t)
	s.AddRule(Rule{Hang: true})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if resp, err := send(ctx, c, "POST", s.URL()+"/v1/chat/completions", chatBody("m", false, false), nil); err == nil {
				resp.Body.Close()
			}
		})
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return s.PeakInFlight() == 3 })
	readAll(t, call(t, c, "GET", s.URL()+"/_fake/calls", "", nil)) // not counted
	cancel()
	wg.Wait()
	if p := s.PeakInFlight(); p != 3 {
		t.Errorf("peak %d, want 3", p)
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { s.ResetPeak(); return s.PeakInFlight() == 0 })
	s.ClearRules()
	readAll(t, call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("m", false, false), nil))
	if p := s.PeakInFlight(); p != 1 {
		t.Errorf("peak after one call %d, want 1", p)
	}
}
