package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"
)

// manualClock is a Clock that moves only when told.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// limitHeaders are the rate-limit headers of one answer, in one dialect.
type limitHeaders struct {
	reqLimit, reqLeft, tokLimit, tokLeft, reset string
}

func readLimitHeaders(h http.Header, dialect string) limitHeaders {
	switch dialect {
	case "anthropic":
		return limitHeaders{
			h.Get("anthropic-ratelimit-requests-limit"), h.Get("anthropic-ratelimit-requests-remaining"),
			h.Get("anthropic-ratelimit-tokens-limit"), h.Get("anthropic-ratelimit-tokens-remaining"),
			h.Get("anthropic-ratelimit-requests-reset"),
		}
	case "openrouter":
		return limitHeaders{reqLimit: h.Get("X-RateLimit-Limit"), reqLeft: h.Get("X-RateLimit-Remaining"), reset: h.Get("X-RateLimit-Reset")}
	}
	return limitHeaders{
		h.Get("x-ratelimit-limit-requests"), h.Get("x-ratelimit-remaining-requests"),
		h.Get("x-ratelimit-limit-tokens"), h.Get("x-ratelimit-remaining-tokens"),
		h.Get("x-ratelimit-reset-requests"),
	}
}

// limitFlavour is how one flavour is called and what its limits look like.
type limitFlavour struct {
	name, path string
	hdr        map[string]string
	body       func(stream bool) string
	tokens     int64 // what one call of body counts: its prompt words + 2 x 5 chunks
	dialect    string
	// resetAt formats the reset of a window ending at end, read at now.
	resetAt func(end, now time.Time) string
	// want429 are substrings of the refused call's body (5 requests a
	// window, refused 39.556 s before the reset).
	want429 []string
}

func openAIResetAt(end, now time.Time) string { return openAIReset(end.Sub(now)) }

func anthropicResetAt(end, _ time.Time) string { return end.UTC().Format(time.RFC3339Nano) }

func openRouterResetAt(end, _ time.Time) string { return strconv.FormatInt(end.UnixMilli(), 10) }

var limitFlavours = []limitFlavour{
	{
		name: "openai", path: "/v1/chat/completions", hdr: map[string]string{"Authorization": "Bearer k1"},
		body:   func(stream bool) string { return chatBody("gpt-4o-mini", stream, false) },
		tokens: 15, dialect: "openai", resetAt: openAIResetAt,
		want429: []string{`"code":"rate_limit_exceeded"`, `"type":"requests"`, "on requests per min (RPM): Limit 5, Used 5, Requested 1. Please try again in 40s."},
	},
	{
		name: "azure", path: "/openai/deployments/gpt-4o-mini/chat/completions?api-version=2024-02-01", hdr: map[string]string{"api-key": "k1"},
		body:   func(stream bool) string { return chatBody("", stream, false) },
		tokens: 15, dialect: "openai", resetAt: openAIResetAt,
		want429: []string{`{"error":{"code":"429"`, "Please retry after 40 seconds."},
	},
	{
		name: "gemini", path: "/v1beta/openai/chat/completions", hdr: map[string]string{"Authorization": "Bearer k1"},
		body:   func(stream bool) string { return chatBody("gemini-2.0-flash", stream, false) },
		tokens: 15, dialect: "openai", resetAt: openAIResetAt,
		want429: []string{`[{"error":{"code":429`, `"status":"RESOURCE_EXHAUSTED"`, `"retryDelay":"40s"`},
	},
	{
		name: "openrouter", path: "/api/v1/chat/completions", hdr: map[string]string{"Authorization": "Bearer k1"},
		body:   func(stream bool) string { return chatBody("openai/gpt-4o", stream, false) },
		tokens: 15, dialect: "openrouter", resetAt: openRouterResetAt,
		want429: []string{"Rate limit exceeded: free-models-per-min.", `"X-RateLimit-Limit":"5"`, `"X-RateLimit-Remaining":"0"`, `"X-RateLimit-Reset":"1735787105000"`},
	},
	{
		name: "anthropic", path: "/v1/messages", hdr: map[string]string{"x-api-key": "k1", "anthropic-version": "2023-06-01"},
		body:   func(stream bool) string { return messagesBody("claude-3-5-haiku-latest", stream) },
		tokens: 14, dialect: "anthropic", resetAt: anthropicResetAt,
		want429: []string{`"type":"rate_limit_error"`, "exceed the rate limit for your organization of 5 requests per minute."},
	},
}

// TestRateLimitFlavours sends five calls to a window of five in each
// flavour (an answer, a stream, a scripted error, a bad body, an answer),
// then a sixth: every answer states the limits in the flavour's headers,
// counting down, and the sixth is the flavour's 429.
func TestRateLimitFlavours(t *testing.T) {
	for _, f := range limitFlavours {
		t.Run(f.name, func(t *testing.T) {
			clock := newManualClock()
			start0 := clock.Now()
			end := start0.Add(time.Minute)
			s := start(t, Options{Name: "rl", Clock: clock, RateLimit: RateLimit{Requests: 5, Tokens: 1000}})
			c := client(t)
			steps := []struct {
				name    string
				body    string
				rule    *Rule
				advance time.Duration
				status  int
				tokens  int64
			}{
				{name: "answer", body: f.body(false), status: 200, tokens: f.tokens},
				{name: "stream", body: f.body(true), advance: 20444 * time.Millisecond, status: 200, tokens: f.tokens},
				{name: "scripted error", body: f.body(false), rule: &Rule{Status: 500, Times: 1}, status: 500, tokens: f.tokens},
				{name: "bad body", body: "{", status: 400, tokens: 11},
				{name: "answer again", body: f.body(false), status: 200, tokens: f.tokens},
			}
			tokensLeft := int64(1000)
			for i, st := range steps {
				clock.Advance(st.advance)
				if st.rule != nil {
					s.AddRule(*st.rule)
				}
				resp := call(t, c, "POST", s.URL()+f.path, st.body, f.hdr)
				body := readAll(t, resp)
				if resp.StatusCode != st.status {
					t.Fatalf("%s: status %d, want %d: %s", st.name, resp.StatusCode, st.status, body)
				}
				tokensLeft -= st.tokens
				want := limitHeaders{"5", strconv.Itoa(4 - i), "1000", strconv.FormatInt(tokensLeft, 10), f.resetAt(end, clock.Now())}
				if f.dialect == "openrouter" {
					want.tokLimit, want.tokLeft = "", ""
				}
				if got := readLimitHeaders(resp.Header, f.dialect); got != want {
					t.Errorf("%s: headers %+v, want %+v", st.name, got, want)
				}
				if f.dialect == "anthropic" && resp.Header.Get("anthropic-ratelimit-tokens-reset") != anthropicReset(end) {
					t.Errorf("%s: tokens reset %q", st.name, resp.Header.Get("anthropic-ratelimit-tokens-reset"))
				}
				if ra := resp.Header.Get("Retry-After"); ra != "" && st.status != 500 {
					t.Errorf("%s: Retry-After %q on an admitted call", st.name, ra)
				}
			}

			s.AddRule(Rule{ID: "untouched", Status: 503, Times: 1})
			resp := call(t, c, "POST", s.URL()+f.path, f.body(false), f.hdr)
			body := readAll(t, resp)
			if resp.StatusCode != 429 {
				t.Fatalf("sixth call: status %d, want 429: %s", resp.StatusCode, body)
			}
			for _, want := range f.want429 {
				if !strings.Contains(string(body), want) {
					t.Errorf("429 body lacks %q: %s", want, body)
				}
			}
			if !json.Valid(body) || strings.Contains(string(body), "{{") {
				t.Errorf("429 body is not filled-in JSON: %s", body)
			}
			if ra := resp.Header.Get("Retry-After"); ra != "40" { // 39.556 s to the reset, rounded up
				t.Errorf("Retry-After %q, want 40", ra)
			}
			want := limitHeaders{"5", "0", "1000", strconv.FormatInt(tokensLeft, 10), f.resetAt(end, clock.Now())}
			if f.dialect == "openrouter" {
				want.tokLimit, want.tokLeft = "", ""
			}
			if got := readLimitHeaders(resp.Header, f.dialect); got != want {
				t.Errorf("429 headers %+v, want %+v", got, want)
			}
			if f.name == "azure" && resp.Header.Get("retry-after-ms") != "39556" {
				t.Errorf("retry-after-ms %q", resp.Header.Get("retry-after-ms"))
			}
			if f.name == "anthropic" && resp.Header.Get("anthropic-ratelimit-input-tokens-limit") != "" {
				t.Errorf("the library error's own input-tokens limit leaked: %v", resp.Header)
			}

			statuses := make([]int, 0, 6)
			for _, c := range s.Calls() {
				statuses = append(statuses, c.Status)
				if c.RateLimited != (c.Status == 429) {
					t.Errorf("call %s answered %d has RateLimited %v", c.Path, c.Status, c.RateLimited)
				}
			}
			if want := []int{200, 200, 500, 400, 200, 429}; !slices.Equal(statuses, want) {
				t.Errorf("recorded statuses %v, want %v", statuses, want)
			}
			if n := s.RateLimited("k1"); n != 1 {
				t.Errorf("RateLimited(k1) = %d, want 1", n)
			}
			wantStats := []RateLimitStat{{Key: "k1", Admitted: 5, Limited: 1, Requests: 5, Tokens: 1000 - tokensLeft, Reset: end}}
			if got := s.RateLimitStats(); !reflect.DeepEqual(got, wantStats) {
				t.Errorf("stats %+v, want %+v", got, wantStats)
			}
			if rules := s.Rules(); len(rules) != 1 || rules[0].ID != "untouched" || rules[0].Times != 1 {
				t.Errorf("a refused call consumed a rule: %+v", rules)
			}
		})
	}
}

// TestRateLimitOtherRoutes: every provider route is counted and states its
// limits, with the tokens of its usage; /models is not counted.
func TestRateLimitOtherRoutes(t *testing.T) {
	clock := newManualClock()
	s := start(t, Options{Name: "rl", Clock: clock, RateLimit: RateLimit{Requests: 100, Tokens: 100000}})
	c := client(t)
	form, ct := transcriptionForm(t, 48000, map[string]string{"model": "gpt-4o-transcribe"})
	tests := []struct {
		name, path, body string
		tokens           int64
	}{
		{"completions", "/v1/completions", completionBody("gpt-3.5-turbo-instruct", false, false), 5 + 10},
		{"completions stream", "/v1/completions", completionBody("gpt-3.5-turbo-instruct", true, false), 5 + 10},
		{"responses", "/v1/responses", responsesBody("gpt-4o-mini", false), 2 + 3 + 10},
		{"responses stream", "/v1/responses", responsesBody("gpt-4o-mini", true), 2 + 3 + 10},
		{"embeddings", "/v1/embeddings", `{"model":"text-embedding-3-small","input":["one two","three"]}`, 3},
		{"images", "/v1/images/generations", `{"model":"gpt-image-1","prompt":"a red fox","n":2}`, 3 + 2*imageOutputTokens},
		{"moderations", "/v1/moderations", `{"input":"hello"}`, 0},
		{"speech", "/v1/audio/speech", `{"model":"tts-1","input":"hi","voice":"alloy"}`, 0},
		{"transcriptions", "/v1/audio/transcriptions", "", 3*10 + 10},
		{"count tokens", "/v1/messages/count_tokens", `{"model":"claude-3-5-haiku-latest","messages":[]}`, 0},
	}
	left := int64(100000)
	for i, tt := range tests {
		var resp *http.Response
		if tt.body == "" {
			resp = postForm(t, c, s.URL()+tt.path, form, ct)
		} else {
			resp = call(t, c, "POST", s.URL()+tt.path, tt.body, bearer) // the key postForm sends
		}
		body := readAll(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", tt.name, resp.StatusCode, body)
		}
		left -= tt.tokens
		dialect := "openai"
		if strings.Contains(tt.path, "/messages") {
			dialect = "anthropic"
		}
		got := readLimitHeaders(resp.Header, dialect)
		if got.reqLeft != strconv.Itoa(99-i) || got.tokLeft != strconv.FormatInt(left, 10) {
			t.Errorf("%s: remaining requests %s tokens %s, want %d and %d", tt.name, got.reqLeft, got.tokLeft, 99-i, left)
		}
	}
	resp := call(t, c, "GET", s.URL()+"/v1/models", "", bearer)
	readAll(t, resp)
	if resp.Header.Get("x-ratelimit-remaining-requests") != "" {
		t.Errorf("/models states limits: %v", resp.Header)
	}
	if st := s.RateLimitStats(); len(st) != 1 || st[0].Admitted != len(tests) {
		t.Errorf("stats %+v, want %d admitted", st, len(tests))
	}
}

// TestRateLimitUnauthorized: a refused key is neither counted nor told
// any limit.
func TestRateLimitUnauthorized(t *testing.T) {
	s := start(t, Options{Name: "rl", Keys: []string{"good"}, RateLimit: RateLimit{Requests: 1}})
	c := client(t)
	resp := call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("gpt-4o-mini", false, false), map[string]string{"Authorization": "Bearer bad"})
	readAll(t, resp)
	if resp.StatusCode != 401 || resp.Header.Get("x-ratelimit-remaining-requests") != "" {
		t.Errorf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	if st := s.RateLimitStats(); len(st) != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestRateLimitWindowBoundary: a window admits again exactly at its reset,
// and the next window starts at the first call after it, not at the reset.
func TestRateLimitWindowBoundary(t *testing.T) {
	clock := newManualClock()
	s := start(t, Options{Name: "rl", Clock: clock, RateLimit: RateLimit{Requests: 1, Window: 10 * time.Second}})
	c := client(t)
	send := func() *http.Response {
		resp := call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("gpt-4o-mini", false, false), map[string]string{"Authorization": "Bearer k1"})
		readAll(t, resp)
		return resp
	}
	steps := []struct {
		advance   time.Duration
		status    int
		reset     string
		retryWait string
	}{
		{0, 200, "10s", ""},
		{9*time.Second + 999*time.Millisecond, 429, "10ms", "1"}, // 1 ms left: rounded up
		{time.Millisecond, 200, "10s", ""},                       // at the reset: a new window
		{25 * time.Second, 200, "10s", ""},                       // long after: a window from now
		{3 * time.Second, 429, "7s", "7"},
	}
	for i, st := range steps {
		clock.Advance(st.advance)
		resp := send()
		if resp.StatusCode != st.status || resp.Header.Get("x-ratelimit-reset-requests") != st.reset || resp.Header.Get("Retry-After") != st.retryWait {
			t.Errorf("step %d: status %d reset %q retry-after %q, want %d %q %q", i, resp.StatusCode,
				resp.Header.Get("x-ratelimit-reset-requests"), resp.Header.Get("Retry-After"), st.status, st.reset, st.retryWait)
		}
	}
}

// TestRateLimitWindowResets runs a 300 ms window on the wall clock: the
// second call is refused, and calls are admitted again once the window
// the first opened has ended, not before.
func TestRateLimitWindowResets(t *testing.T) {
	s := start(t, Options{Name: "rl", RateLimit: RateLimit{Requests: 1, Window: 300 * time.Millisecond}})
	c := client(t)
	send := func() *http.Response {
		resp := call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("gpt-4o-mini", false, false), map[string]string{"Authorization": "Bearer k1"})
		readAll(t, resp)
		return resp
	}
	began := time.Now()
	if resp := send(); resp.StatusCode != 200 {
		t.Fatalf("first call: status %d", resp.StatusCode)
	}
	resp := send()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("second call: status %d retry-after %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if d, err := time.ParseDuration(resp.Header.Get("x-ratelimit-reset-requests")); err != nil || d <= 0 || d > 300*time.Millisecond {
		t.Errorf("reset %q", resp.Header.Get("x-ratelimit-reset-requests"))
	}
	testkit.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if resp := send(); resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	if waited := time.Since(began); waited < 300*time.Millisecond {
		t.Errorf("admitted again after %s, before the window ended", waited)
	}
	if n := s.RateLimited("k1"); n < 1 || n != s.CountCalls(func(c Call) bool { return c.Status == 429 && c.RateLimited }) {
		t.Errorf("RateLimited = %d, recorded 429s = %d", n, s.CountCalls(func(c Call) bool { return c.Status == 429 }))
	}
}

// TestRateLimitScope: keys are counted apart, and models too with
// PerModel.
func TestRateLimitScope(t *testing.T) {
	calls := []struct{ key, model string }{{"k1", "gpt-4o"}, {"k1", "gpt-4o-mini"}, {"k2", "gpt-4o"}, {"k1", "gpt-4o"}}
	tests := []struct {
		name     string
		perModel bool
		want     []int
		stats    []RateLimitStat
	}{
		{"per key", false, []int{200, 429, 200, 429}, []RateLimitStat{
			{Key: "k1", Admitted: 1, Limited: 2, Requests: 1},
			{Key: "k2", Admitted: 1, Requests: 1},
		}},
		{"per key and model", true, []int{200, 200, 200, 429}, []RateLimitStat{
			{Key: "k1", Model: "gpt-4o", Admitted: 1, Limited: 1, Requests: 1},
			{Key: "k1", Model: "gpt-4o-mini", Admitted: 1, Requests: 1},
			{Key: "k2", Model: "gpt-4o", Admitted: 1, Requests: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newManualClock()
			s := start(t, Options{Name: "rl", Clock: clock, RateLimit: RateLimit{Requests: 1, PerModel: tt.perModel}})
			c := client(t)
			var got []int
			for _, cl := range calls {
				resp := call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody(cl.model, false, false), map[string]string{"Authorization": "Bearer " + cl.key})
				readAll(t, resp)
				got = append(got, resp.StatusCode)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("statuses %v, want %v", got, tt.want)
			}
			stats := s.RateLimitStats()
			for i := range stats {
				stats[i].Tokens, stats[i].Reset = 0, time.Time{}
			}
			if !reflect.DeepEqual(stats, tt.stats) {
				t.Errorf("stats %+v\nwant  %+v", stats, tt.stats)
			}
		})
	}
}

// TestRateLimitTokens: a call that needs more tokens than are left is
// refused with the tokens wording and the true remaining count; a smaller
// call still fits; a call no window can hold is OpenAI's "Request too
// large", with no wait to state.
func TestRateLimitTokens(t *testing.T) {
	clock := newManualClock()
	s := start(t, Options{Name: "rl", Clock: clock, RateLimit: RateLimit{Tokens: 40}})
	c := client(t)
	post := func(path, body string, hdr map[string]string) (*http.Response, string) {
		resp := call(t, c, "POST", s.URL()+path, body, hdr)
		return resp, string(readAll(t, resp))
	}
	oa := map[string]string{"Authorization": "Bearer k1"}
	chat := chatBody("gpt-4o-mini", false, false) // 15 tokens
	for i, left := range []string{"25", "10"} {
		resp, body := post("/v1/chat/completions", chat, oa)
		if resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-remaining-tokens") != left || resp.Header.Get("x-ratelimit-limit-requests") != "" {
			t.Fatalf("call %d: status %d headers %v: %s", i, resp.StatusCode, resp.Header, body)
		}
	}
	resp, body := post("/v1/chat/completions", chat, oa)
	if resp.StatusCode != 429 || resp.Header.Get("x-ratelimit-remaining-tokens") != "10" || resp.Header.Get("Retry-After") != "60" ||
		!strings.Contains(body, "on tokens per min (TPM): Limit 40, Used 30, Requested 15.") || !strings.Contains(body, `"type":"tokens"`) {
		t.Errorf("over the tokens: status %d headers %v: %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = post("/v1/embeddings", `{"model":"text-embedding-3-small","input":"a b"}`, oa)
	if resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-remaining-tokens") != "8" {
		t.Errorf("a call that fits: status %d headers %v: %s", resp.StatusCode, resp.Header, body)
	}
	s.AddRule(Rule{Chunks: 50, Times: 1}) // 5 + 100 tokens: more than a window holds
	resp, body = post("/v1/chat/completions", chat, oa)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "" || !strings.Contains(body, "Request too large for gpt-4o-mini") {
		t.Errorf("too large: status %d headers %v: %s", resp.StatusCode, resp.Header, body)
	}

	resp, body = post("/v1/messages", messagesBody("claude-3-5-haiku-latest", false), map[string]string{"x-api-key": "k1"})
	if resp.StatusCode != 429 || !strings.Contains(body, "of 40 input tokens per minute") ||
		resp.Header.Get("anthropic-ratelimit-tokens-remaining") != "8" || resp.Header.Get("anthropic-ratelimit-requests-limit") != "" {
		t.Errorf("anthropic over the tokens: status %d headers %v: %s", resp.StatusCode, resp.Header, body)
	}
	if st := s.RateLimitStats(); len(st) != 1 || st[0].Admitted != 3 || st[0].Limited != 3 || st[0].Tokens != 32 {
		t.Errorf("stats %+v", st)
	}
}

// TestRateLimitConcurrent: of many concurrent calls exactly the limit is
// admitted, each told a different remaining count.
func TestRateLimitConcurrent(t *testing.T) {
	const limit, workers, each = 50, 8, 20
	s := start(t, Options{Name: "rl", Clock: newManualClock(), RateLimit: RateLimit{Requests: limit}})
	c := client(t)
	var (
		mu   sync.Mutex
		left []int
		n429 int
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for range each {
				resp, err := send(t.Context(), c, "POST", s.URL()+"/v1/chat/completions", chatBody("gpt-4o-mini", false, false), map[string]string{"Authorization": "Bearer k1"})
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				_ = s.RateLimitStats()
				mu.Lock()
				switch resp.StatusCode {
				case 200:
					v, _ := strconv.Atoi(resp.Header.Get("x-ratelimit-remaining-requests"))
					left = append(left, v)
				case 429:
					n429++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(left)
	want := make([]int, limit)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(left, want) || n429 != workers*each-limit {
		t.Errorf("admitted remaining counts %v (%d refused), want 0..%d and %d refused", left, n429, limit-1, workers*each-limit)
	}
	if n := s.RateLimited("k1"); n != workers*each-limit {
		t.Errorf("RateLimited = %d", n)
	}
}

func TestRateLimitControlEndpoint(t *testing.T) {
	s := start(t, Options{Name: "rl"})
	c := client(t)
	resp := call(t, c, "PUT", s.URL()+"/_fake/rate_limit", `{"requests":1,"tokens":500,"window":"90s","per_model":true}`, nil)
	var got RateLimit
	decode(t, readAll(t, resp), &got)
	want := RateLimit{Requests: 1, Tokens: 500, Window: 90 * time.Second, PerModel: true}
	if resp.StatusCode != 200 || got != want || s.RateLimit() != want {
		t.Fatalf("PUT: status %d limit %+v, server %+v", resp.StatusCode, got, s.RateLimit())
	}
	decode(t, readAll(t, call(t, c, "GET", s.URL()+"/_fake/rate_limit", "", nil)), &got)
	if got != want {
		t.Errorf("GET %+v", got)
	}
	for range 2 {
		readAll(t, call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("gpt-4o-mini", false, false), map[string]string{"Authorization": "Bearer k1"}))
	}
	var stats []RateLimitStat
	decode(t, readAll(t, call(t, c, "GET", s.URL()+"/_fake/rate_limit/stats?key=k1", "", nil)), &stats)
	if len(stats) != 1 || stats[0].Key != "k1" || stats[0].Model != "gpt-4o-mini" || stats[0].Admitted != 1 || stats[0].Limited != 1 {
		t.Errorf("stats %+v", stats)
	}
	decode(t, readAll(t, call(t, c, "GET", s.URL()+"/_fake/rate_limit/stats?key=k2", "", nil)), &stats)
	if len(stats) != 0 {
		t.Errorf("stats of k2 %+v", stats)
	}
	var calls []callJSON
	decode(t, readAll(t, call(t, c, "GET", s.URL()+"/_fake/calls?key=k1", "", nil)), &calls)
	if len(calls) != 2 || calls[0].Status != 200 || calls[0].RateLimited || calls[1].Status != 429 || !calls[1].RateLimited {
		t.Errorf("calls %+v", calls)
	}

	for _, bad := range []struct{ body, want string }{
		{`{"requests":-1}`, "rate_limit.requests"},
		{`{"window":"soon"}`, "soon"},
		{`{"rpm":5}`, "rpm"},
	} {
		resp := call(t, c, "PUT", s.URL()+"/_fake/rate_limit", bad.body, nil)
		body := readAll(t, resp)
		if resp.StatusCode != 400 || !strings.Contains(string(body), bad.want) {
			t.Errorf("PUT %s: status %d %s, want 400 naming %q", bad.body, resp.StatusCode, body, bad.want)
		}
	}
	if s.RateLimit() != want {
		t.Errorf("a refused PUT changed the limit: %+v", s.RateLimit())
	}

	resp = call(t, c, "DELETE", s.URL()+"/_fake/rate_limit", "", nil)
	readAll(t, resp)
	if resp.StatusCode != 204 || s.RateLimit().Enabled() || len(s.RateLimitStats()) != 0 {
		t.Fatalf("DELETE: status %d limit %+v stats %+v", resp.StatusCode, s.RateLimit(), s.RateLimitStats())
	}
	resp = call(t, c, "POST", s.URL()+"/v1/chat/completions", chatBody("gpt-4o-mini", false, false), map[string]string{"Authorization": "Bearer k1"})
	readAll(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-limit-requests") != "" {
		t.Errorf("with the limiter off: status %d headers %v", resp.StatusCode, resp.Header)
	}
}

func TestRateLimitConfig(t *testing.T) {
	o, err := ParseOptions([]byte("rate_limit:\n  requests: 20\n  tokens: 4000\n  window: 300ms\n  per_model: true\n"))
	want := RateLimit{Requests: 20, Tokens: 4000, Window: 300 * time.Millisecond, PerModel: true}
	if err != nil || o.RateLimit != want {
		t.Fatalf("ParseOptions = %+v, %v", o.RateLimit, err)
	}
	b, err := json.Marshal(o)
	if err != nil || !strings.Contains(string(b), `"rate_limit":{"requests":20,"tokens":4000,"window":"300ms","per_model":true}`) {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var back Options
	if err := json.Unmarshal(b, &back); err != nil || back.RateLimit != want {
		t.Errorf("Unmarshal = %+v, %v", back.RateLimit, err)
	}
	if b, _ := json.Marshal(Options{Name: "x"}); strings.Contains(string(b), "rate_limit") {
		t.Errorf("an unset limit is written: %s", b)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"rate_limit:\n  tokens: -5\n", "rate_limit.tokens"},
		{"rate_limit:\n  window: -1s\n", "rate_limit.window"},
		{"rate_limit:\n  rpm: 5\n", "rpm"},
	} {
		if _, err := ParseOptions([]byte(bad.yaml)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseOptions(%q) = %v, want an error naming %q", bad.yaml, err, bad.want)
		}
	}
	if err := New(Options{}).SetRateLimit(RateLimit{Requests: -1}); err == nil {
		t.Error("SetRateLimit accepted a negative limit")
	}
	if (RateLimit{Window: time.Second}).Enabled() || !(RateLimit{Tokens: 1}).Enabled() {
		t.Error("Enabled")
	}
}

func TestLimitHeaderFormats(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{-time.Second, "0s"},
		{time.Millisecond, "10ms"},
		{20 * time.Millisecond, "20ms"},
		{time.Second, "1s"},
		{59555 * time.Millisecond, "59.56s"},
		{time.Minute, "1m0s"},
		{2*time.Minute + 59555*time.Millisecond, "2m59.56s"},
		{6 * time.Minute, "6m0s"},
	} {
		if got := openAIReset(tt.d); got != tt.want {
			t.Errorf("openAIReset(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	for _, tt := range []struct {
		t    time.Time
		want string
	}{
		{at, "2025-01-02T02:04:05Z"},
		{at.Add(250 * time.Millisecond), "2025-01-02T02:04:05.25Z"},
		{at.Add(1), "2025-01-02T02:04:05.001Z"},
	} {
		if got := anthropicReset(tt.t); got != tt.want {
			t.Errorf("anthropicReset(%s) = %q, want %q", tt.t, got, tt.want)
		}
	}
	if got := epochMillis(time.UnixMilli(1735787105000).Add(1)); got != 1735787105001 {
		t.Errorf("epochMillis = %d", got)
	}
}
