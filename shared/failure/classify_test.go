package failure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

var testNow = time.Date(2025, 6, 2, 12, 0, 0, 0, time.UTC)

func TestClassifyTraps(t *testing.T) {
	tests := []struct {
		name     string
		provider string
		status   int
		body     string
		header   http.Header
		err      error
		stream   bool
		class    Class
		scope    Scope
	}{
		{"plain HTTP to a TLS port (Go's server) is the target's fault", "openai", 400,
			"Client sent an HTTP request to an HTTPS server.\n", nil, nil, false, Transient, ScopeNone},
		{"plain HTTP to a TLS port (nginx) is the target's fault", "openai", 400,
			"<html><head><title>400 The plain HTTP request was sent to HTTPS port</title></head><body><center><h1>400 Bad Request</h1></center></body></html>", nil, nil, false, Transient, ScopeNone},
		{"openai insufficient_quota is a 429 that means quota", "openai", 429,
			`{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`, nil, nil, false, QuotaExhausted, ScopeKey},
		{"anthropic credit balance is a 400 that means quota", "anthropic", 400,
			`{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}`, nil, nil, false, QuotaExhausted, ScopeKey},
		{"gemini API_KEY_INVALID is a 400 that means credential", "gemini", 400,
			`{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT","details":[{"reason":"API_KEY_INVALID"}]}}`, nil, nil, false, CredentialRejected, ScopeKey},
		{"404 model_not_found that is retired", "openai", 404,
			`{"error":{"message":"The model foo has been decommissioned","code":"model_not_found"}}`, nil, nil, false, ModelRetired, ScopeKeyModel},
		{"404 model_not_found no longer available", "openai", 404,
			`{"error":{"message":"The model foo is no longer available","code":"model_not_found"}}`, nil, nil, false, ModelRetired, ScopeKeyModel},
		{"404 model_not_found without access", "openai", 404,
			`{"error":{"message":"The model foo does not exist or you do not have access to it.","code":"model_not_found"}}`, nil, nil, false, ModelNotAccessible, ScopeKeyModel},
		{"401 whose generic type and message read as the request's fault", "openai", 401,
			`{"error":{"message":"You have insufficient permissions for this operation. Missing scopes: model.request.","type":"invalid_request_error","param":null,"code":null}}`, nil, nil, false, CredentialRejected, ScopeKey},
		{"402 with a generic code", "openai-compatible", 402,
			`{"error":{"message":"Invalid request: payment","type":"invalid_request_error"}}`, nil, nil, false, QuotaExhausted, ScopeKey},
		{"503 with a generic code", "openai-compatible", 503,
			`{"error":{"message":"backend must be an available replica","type":"invalid_request_error"}}`, nil, nil, false, Transient, ScopeNone},
		{"404 with a generic code is still the request's", "openai", 404,
			`{"error":{"message":"No such File object: file-abc","type":"invalid_request_error","param":"id","code":null}}`, nil, nil, false, RequestRejected, ScopeNone},
		{"403 bad key", "anthropic", 403,
			`{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`, nil, nil, false, CredentialRejected, ScopeKey},
		{"403 no model access", "bedrock", 403,
			`{"message":"You don't have access to the model with the specified model ID."}`, http.Header{"X-Amzn-Errortype": {"AccessDeniedException:http://internal.amazon.com/coral/com.amazon.bedrock/"}}, nil, false, ModelNotAccessible, ScopeKeyModel},
		{"403 blocked region by message", "openai-compatible", 403,
			`{"error":{"message":"This service is not available in your region"}}`, nil, nil, false, RegionBlocked, ScopeKeyModel},
		{"403 user location", "gemini", 400,
			`{"error":{"code":400,"message":"User location is not supported for the API use.","status":"FAILED_PRECONDITION"}}`, nil, nil, false, RegionBlocked, ScopeKeyModel},
		{"429 per-model limit", "openai", 429,
			`{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.","code":"rate_limit_exceeded"}}`, nil, nil, false, RateLimit, ScopeKeyModel},
		{"429 account limit", "openai", 429,
			`{"error":{"message":"Rate limit reached for requests","code":"rate_limit_exceeded"}}`, nil, nil, false, RateLimit, ScopeKey},
		{"request larger than the whole limit", "openai", 429,
			`{"error":{"message":"Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 45000.","code":"rate_limit_exceeded"}}`, nil, nil, false, RequestRejected, ScopeNone},
		{"context length", "openai", 400,
			`{"error":{"message":"This model's maximum context length is 8192 tokens.","code":"context_length_exceeded"}}`, nil, nil, false, RequestRejected, ScopeNone},
		{"content filter", "azure", 400,
			`{"error":{"message":"filtered","code":"content_filter"}}`, nil, nil, false, RequestRejected, ScopeNone},
		{"529 overloaded", "anthropic", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, nil, nil, false, Transient, ScopeNone},
		{"anthropic overloaded stream event", "anthropic", 0, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, nil, nil, true, Transient, ScopeNone},
		{"bare 503", "openai", 503, ``, nil, nil, false, Transient, ScopeNone},
		{"connection refused", "openai", 0, ``, nil, errors.New("dial tcp: connect: connection refused"), false, Transient, ScopeNone},
		{"connection reset", "openai", 0, ``, nil, errors.New("read tcp: connection reset by peer"), false, Transient, ScopeNone},
		{"timeout", "openai", 0, ``, nil, fmt.Errorf("attempt: %w", context.DeadlineExceeded), false, Transient, ScopeNone},
		{"caller cancellation holds nothing", "openai", 0, ``, nil, fmt.Errorf("attempt: %w", context.Canceled), false, Unrecognised, ScopeNone},
		{"unknown 400 is the request's fault", "openai-compatible", 400, `{"foo":"bar"}`, nil, nil, false, RequestRejected, ScopeNone},
		{"unknown 422 is the request's fault", "openai-compatible", 422, ``, nil, nil, false, RequestRejected, ScopeNone},
		{"unknown 418 is unrecognised", "openai-compatible", 418, `teapot`, nil, nil, false, Unrecognised, ScopeNone},
		{"error hidden behind 200 carries its status", "openrouter", 200, `{"error":{"code":429,"message":"Provider returned error"}}`, nil, nil, false, RateLimit, ScopeKey},
		{"200 with nothing recognisable", "openai", 200, `{"choices":[]}`, nil, nil, false, Unrecognised, ScopeNone},
		{"openrouter nested raw decides", "openrouter", 400,
			`{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"{\"error\":{\"message\":\"Incorrect API key provided\",\"code\":\"invalid_api_key\"}}"}}}`, nil, nil, false, CredentialRejected, ScopeKey},
		{"openrouter nested raw object", "openrouter", 404,
			`{"error":{"message":"Provider returned error","code":404,"metadata":{"raw":{"error":{"message":"The model gpt-4 has been deprecated","code":"model_not_found"}}}}}`, nil, nil, false, ModelRetired, ScopeKeyModel},
		{"deprecated parameter is not a retired model", "openai", 400,
			`{"error":{"message":"The parameter functions is deprecated, use tools","type":"invalid_request_error"}}`, nil, nil, false, RequestRejected, ScopeNone},
		{"a per-day limit is a spent quota, per model when it names one", "openai", 429,
			`{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on requests per day (RPD): Limit 10000, Used 10000, Requested 1.","code":"rate_limit_exceeded"}}`, nil, nil, false, QuotaExhausted, ScopeKeyModel},
		{"a per-day quota read from QuotaFailure", "gemini", 429,
			`{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaDimensions":{"model":"gemini-2.5-pro"}}]}]}}`, nil, nil, false, QuotaExhausted, ScopeKeyModel},
		{"an account-wide TPD is a quota on the key", "openai-compatible", 429,
			`{"error":{"message":"request reached organization TPD rate limit, current: 1526210, limit: 1500000","type":"rate_limit_reached_error"}}`, nil, nil, false, QuotaExhausted, ScopeKey},
		{"a per-minute limit stays a rate limit", "openai", 429,
			`{"error":{"message":"Rate limit reached for requests per minute","code":"rate_limit_exceeded"}}`, nil, nil, false, RateLimit, ScopeKey},
		{"a free-tier limit of 0 is no access to the model", "gemini", 429,
			`{"error":{"code":429,"message":"Quota exceeded for metric: generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro","status":"RESOURCE_EXHAUSTED"}}`, nil, nil, false, ModelNotAccessible, ScopeKeyModel},
		{"a quotaValue of 0 is no access to the model", "gemini", 429,
			`{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaValue":"0"}]}]}}`, nil, nil, false, ModelNotAccessible, ScopeKeyModel},
		{"limit 0.5 is not a limit of 0", "openai", 429,
			`{"error":{"message":"Rate limit reached: limit: 0.5 requests per second","code":"rate_limit_exceeded"}}`, nil, nil, false, RateLimit, ScopeKey},
		{"a paid-only model is no access to it", "openai-compatible", 403,
			`{"code":30011,"message":"The selected model requires paid balance. Your paid balance is insufficient."}`, nil, nil, false, ModelNotAccessible, ScopeKeyModel},
		{"bedrock on-demand throughput refusal is about the model", "bedrock", 400,
			`{"message":"Invocation of model ID x with on-demand throughput isn't supported."}`, http.Header{"X-Amzn-Errortype": {"ValidationException"}}, nil, false, ModelNotAccessible, ScopeKeyModel},
		{"bedrock unknown model id is about the model", "bedrock", 400,
			`{"message":"The provided model identifier is invalid."}`, http.Header{"X-Amzn-Errortype": {"ValidationException"}}, nil, false, ModelNotAccessible, ScopeKeyModel},
		{"a paid plan for a feature is not a model refusal", "openai-compatible", 400,
			`{"message":"Batch requests require a paid plan."}`, nil, nil, false, RequestRejected, ScopeNone},
		{"FAILED_PRECONDITION naming a model is model access", "vertex", 400,
			`{"error":{"code":400,"message":"Project x is not allowed to use Publisher Model projects/x/locations/europe-west4/publishers/anthropic/models/claude","status":"FAILED_PRECONDITION"}}`, nil, nil, false, ModelNotAccessible, ScopeKeyModel},
		{"API not enabled in the project is the key's project", "vertex", 403,
			`{"error":{"code":403,"message":"Vertex AI API has not been used in project 1 before or it is disabled.","status":"PERMISSION_DENIED"}}`, nil, nil, false, CredentialRejected, ScopeKey},
		{"Google's model capacity is transient, not quota", "gemini", 429,
			`{"error":{"code":429,"message":"No capacity available for model m on the server","status":"RESOURCE_EXHAUSTED","details":[{"reason":"MODEL_CAPACITY_EXHAUSTED"}]}}`, nil, nil, false, Transient, ScopeNone},
		{"arrears in Chinese are quota", "openai-compatible", 429, `{"error":{"code":"1113","message":"余额不足或无可用资源包,请充值。"}}`, nil, nil, false, QuotaExhausted, ScopeKey},
		{"a removed model is retired", "cohere", 404, `{"message":"model 'command' was removed on September 15, 2025."}`, nil, nil, false, ModelRetired, ScopeKeyModel},
		{"a 400 with only a generic code keeps a transient message", "openai-compatible", 400,
			`{"error":{"message":"The server is temporarily unavailable, try again later","type":"invalid_request_error"}}`, nil, nil, false, Transient, ScopeNone},
		{"anthropic's per-minute limit is the model class's", "anthropic", 429,
			`{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 8,000 output tokens per minute."}}`, nil, nil, false, RateLimit, ScopeKeyModel},
		{"the same words from another family say nothing of the model", "openai-compatible", 429,
			`{"error":{"message":"This request would exceed the rate limit for your organization of 50 requests per minute.","type":"rate_limit_error"}}`, nil, nil, false, RateLimit, ScopeKey},
		{"gemini cached content the request names is the request's", "gemini", 403,
			`[{"error":{"code":403,"message":"You do not have permission to access the CachedContent abc123 or it may not exist.","status":"PERMISSION_DENIED"}}]`, nil, nil, false, RequestRejected, ScopeNone},
		{"vertex endpoint that may not exist is still the credential's", "vertex", 403,
			`{"error":{"code":403,"message":"Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/p/locations/us-central1/endpoints/openapi' (or it may not exist).","status":"PERMISSION_DENIED"}}`, nil, nil, false, CredentialRejected, ScopeKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Provider: tt.provider, Status: tt.status, Header: tt.header, Body: []byte(tt.body), Stream: tt.stream, Err: tt.err}
			got := ClassifyAt(in, testNow)
			if got.Class != tt.class || got.Scope != tt.scope {
				t.Errorf("got %s/%s (%s, code %q), want %s/%s", got.Class, got.Scope, got.Reason, got.Code, tt.class, tt.scope)
			}
		})
	}
}

// TestResponsesStreamEvents: the OpenAI Responses API reports a failure
// inside the stream as a response.failed event, whose error is the
// response's (response.error), or as an error event that is the error
// itself; both are classified from the provider's code.
func TestResponsesStreamEvents(t *testing.T) {
	failed := func(code, msg string) string {
		return `{"type":"response.failed","sequence_number":3,"response":{"id":"resp_1","object":"response","status":"failed","error":{"code":"` + code + `","message":"` + msg + `"},"incomplete_details":null}}`
	}
	errorEvent := func(code, msg string) string {
		return `{"type":"error","code":"` + code + `","message":"` + msg + `","param":"input","sequence_number":0}`
	}
	tests := []struct {
		name  string
		body  string
		class Class
		scope Scope
		code  string
	}{
		{"failed: a refused prompt", failed("invalid_prompt", "Invalid prompt: your prompt was flagged as potentially violating our usage policy."), RequestRejected, ScopeNone, "invalid_prompt"},
		{"failed: a refused prompt (bio policy)", failed("bio_policy", "This request was blocked."), RequestRejected, ScopeNone, "bio_policy"},
		{"failed: the image URL timed out", failed("invalid_image_url", "Timeout while downloading https://example.com/a.png."), RequestRejected, ScopeNone, "invalid_image_url"},
		{"failed: context window", failed("context_length_exceeded", "Your input exceeds the context window of this model."), RequestRejected, ScopeNone, "context_length_exceeded"},
		{"failed: server error", failed("server_error", "An error occurred while processing your request."), Transient, ScopeNone, "server_error"},
		{"failed: per-model rate limit", failed("rate_limit_exceeded", "Rate limit reached for gpt-5.1 in organization org-AAA on tokens per min (TPM): Limit 30000, Used 22999, Requested 12528. Please try again in 11.054s."), RateLimit, ScopeKeyModel, "rate_limit_exceeded"},
		{"failed: quota", failed("insufficient_quota", "You exceeded your current quota, please check your plan and billing details."), QuotaExhausted, ScopeKey, "insufficient_quota"},
		{"failed without an error says nothing more than a stream error", `{"type":"response.failed","response":{"id":"resp_1","status":"failed","error":null}}`, Transient, ScopeNone, "response.failed"},
		{"error event: context window", errorEvent("context_length_exceeded", "Your input exceeds the context window of this model."), RequestRejected, ScopeNone, "context_length_exceeded"},
		{"error event: rate limit", errorEvent("rate_limit_exceeded", "Rate limit reached for requests"), RateLimit, ScopeKey, "rate_limit_exceeded"},
		{"error event: quota", errorEvent("insufficient_quota", "You exceeded your current quota"), QuotaExhausted, ScopeKey, "insufficient_quota"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ClassifyAt(Input{Provider: "openai", Status: 200, Stream: true, Body: []byte(tt.body)}, testNow)
			if got.Class != tt.class || got.Scope != tt.scope || got.Code != tt.code {
				t.Errorf("got %s/%s code %q (%s), want %s/%s code %q", got.Class, got.Scope, got.Code, got.Reason, tt.class, tt.scope, tt.code)
			}
		})
	}
}

func TestStatedWaits(t *testing.T) {
	rl := func(msg string) []byte {
		return []byte(`{"error":{"message":"` + msg + `","code":"rate_limit_exceeded"}}`)
	}
	tests := []struct {
		name   string
		header http.Header
		body   []byte
		want   time.Duration
		ok     bool
	}{
		{"Retry-After seconds", http.Header{"Retry-After": {"20"}}, rl("slow down"), 20 * time.Second, true},
		{"Retry-After HTTP date", http.Header{"Retry-After": {"Mon, 02 Jun 2025 12:01:00 GMT"}}, rl("slow down"), time.Minute, true},
		{"Retry-After date in the past", http.Header{"Retry-After": {"Mon, 02 Jun 2025 11:00:00 GMT"}}, rl("slow down"), 0, false},
		{"retry-after-ms wins", http.Header{"Retry-After": {"20"}, "Retry-After-Ms": {"1500"}}, rl("slow down"), 1500 * time.Millisecond, true},
		{"openai reset 6m0s", http.Header{"X-Ratelimit-Reset-Tokens": {"6m0s"}}, rl("slow down"), 6 * time.Minute, true},
		{"openai reset 20ms", http.Header{"X-Ratelimit-Reset-Requests": {"20ms"}}, rl("slow down"), 20 * time.Millisecond, true},
		{"openai exhausted dimension", http.Header{"X-Ratelimit-Reset-Requests": {"1s"}, "X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}}, rl("slow down"), time.Second, true},
		{"anthropic reset", http.Header{"Anthropic-Ratelimit-Requests-Reset": {"2025-06-02T12:00:30Z"}}, rl("slow down"), 30 * time.Second, true},
		{"gemini retryDelay", nil, []byte(`{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"17s"}]}}`), 17 * time.Second, true},
		{"gemini retryDelay 0.5s", nil, []byte(`{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"retryDelay":"0.5s"}]}}`), 500 * time.Millisecond, true},
		{"hint 20s", nil, rl("Please try again in 20s."), 20 * time.Second, true},
		{"hint 1.5s", nil, rl("Please try again in 1.5s."), 1500 * time.Millisecond, true},
		{"hint 250ms", nil, rl("try again in 250ms"), 250 * time.Millisecond, true},
		{"hint 6.17s", nil, rl("Please retry in 6.17s."), 6170 * time.Millisecond, true},
		{"hint 45 seconds", nil, rl("retry after 45 seconds"), 45 * time.Second, true},
		{"hint 6 seconds", nil, rl("Please retry after 6 seconds."), 6 * time.Second, true},
		{"hint 1m30s", nil, rl("Please try again in 1m30s."), 90 * time.Second, true},
		{"no wait", nil, rl("slow down"), 0, false},
		{"garbage header", http.Header{"Retry-After": {"soon"}}, rl("slow down"), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ClassifyAt(Input{Provider: "openai", Status: 429, Header: tt.header, Body: tt.body}, testNow)
			if got.HasWait != tt.ok || got.RetryAfter != tt.want {
				t.Errorf("wait = %v (%v), want %v (%v)", got.RetryAfter, got.HasWait, tt.want, tt.ok)
			}
		})
	}
}

// A spent per-day quota waits for its reset, or the quota ladder: a hint
// under a minute is one request's refill, not the reset; a limit of 0 never
// resets, so its "retry in 20s" is dropped.
func TestPeriodAndZeroLimitWaits(t *testing.T) {
	tests := []struct {
		name string
		body string
		want time.Duration
		ok   bool
	}{
		{"daily with a short hint", `{"error":{"message":"Rate limit reached on requests per day (RPD): Limit 10, Used 10, Requested 1. Please try again in 8.64s.","code":"rate_limit_exceeded"}}`, 0, false},
		{"daily with the refill time", `{"error":{"message":"Rate limit reached on tokens per day (TPD): Limit 100000, Used 97050, Requested 3619. Please try again in 9m38.016s.","code":"rate_limit_exceeded"}}`, 9*time.Minute + 38016*time.Millisecond, true},
		{"daily with OpenRouter's reset", `{"error":{"message":"Rate limit exceeded: free-models-per-day.","code":429,"metadata":{"headers":{"X-RateLimit-Reset":"1748908800000"}}}}`, 12 * time.Hour, true},
		{"limit 0 with a retry hint", `{"error":{"code":429,"message":"Quota exceeded, limit: 0, model: m\nPlease retry in 25.4s.","status":"RESOURCE_EXHAUSTED","details":[{"retryDelay":"25s"}]}}`, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ClassifyAt(Input{Provider: "openai-compatible", Status: 429, Body: []byte(tt.body)}, testNow)
			if got.HasWait != tt.ok || got.RetryAfter != tt.want {
				t.Errorf("%s: wait = %v (%v), want %v (%v)", got.Class, got.RetryAfter, got.HasWait, tt.want, tt.ok)
			}
		})
	}
}

func TestResetHeadersOnlyForRateLimits(t *testing.T) {
	h := http.Header{"X-Ratelimit-Reset-Tokens": {"6m0s"}}
	got := ClassifyAt(Input{Provider: "openai", Status: 500, Header: h, Body: []byte(`{"error":{"type":"server_error"}}`)}, testNow)
	if got.HasWait {
		t.Errorf("a 500 took the informational reset header as a wait: %v", got.RetryAfter)
	}
}

func TestParseClass(t *testing.T) {
	for i := range classNames {
		c := Class(i)
		got, err := ParseClass(strings.ToUpper(c.String()))
		if err != nil || got != c {
			t.Errorf("ParseClass(%q) = %v, %v", c, got, err)
		}
	}
	if _, err := ParseClass("bogus"); !errors.Is(err, ErrUnknownClass) {
		t.Errorf("ParseClass(bogus) err = %v", err)
	}
	if s, err := ParseScope("key+model"); err != nil || s != ScopeKeyModel {
		t.Errorf("ParseScope = %v, %v", s, err)
	}
}

func TestFamily(t *testing.T) {
	for in, want := range map[string]string{"OpenAI": "openai", "vllm": "openai-compatible", "ollama": "openai-compatible", "": "openai-compatible", "azure-openai": "azure", "vertex-ai": "vertex", "grok": "xai"} {
		if got := Family(in); got != want {
			t.Errorf("Family(%q) = %q, want %q", in, got, want)
		}
	}
}

func BenchmarkClassify(b *testing.B) {
	in := Input{Provider: "gemini", Status: 429, Body: []byte(`{"error":{"code":429,"message":"You exceeded your current quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"model":"gemini-2.0-flash"}}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"17s"}]}}`)}
	b.ReportAllocs()
	for b.Loop() {
		ClassifyAt(in, testNow)
	}
}

func FuzzClassify(f *testing.F) {
	f.Add("openai", 429, []byte(`{"error":{"message":"Please try again in 20s","code":"rate_limit_exceeded"}}`), "20", false)
	f.Add("openrouter", 400, []byte(`{"error":{"code":400,"metadata":{"raw":"{\"error\":{\"metadata\":{\"raw\":\"[1]\"}}}"}}}`), "", false)
	f.Add("gemini", 400, []byte(`[{"error":{"details":[{"retryDelay":"99999999999s"}]}}]`), "Mon, 02 Jun 2025 12:01:00 GMT", true)
	f.Add("bedrock", 0, []byte(`{"fooException":7}`), "-1", true)
	f.Fuzz(func(t *testing.T, provider string, status int, body []byte, retryAfter string, stream bool) {
		h := http.Header{"Retry-After": {retryAfter}, "X-Ratelimit-Reset-Tokens": {retryAfter}, "Anthropic-Ratelimit-Tokens-Reset": {retryAfter}}
		r := ClassifyAt(Input{Provider: provider, Status: status, Header: h, Body: body, Stream: stream}, testNow)
		if r.HasWait && (r.RetryAfter < 0 || r.RetryAfter > maxWait) {
			t.Errorf("wait %v out of range", r.RetryAfter)
		}
		if r.Scope != ScopeNone && r.Class.DefaultScope() == ScopeNone {
			t.Errorf("class %s with scope %s", r.Class, r.Scope)
		}
	})
}

// TestActionFor: the proxy's next move after a failed attempt, which the
// admin's classify answers too.
// TestKeyDependent: Gemini's refusal of a file or cached content the
// request names may come from the key's project (the upload is another
// project's): the request is rejected without a hold, yet another key may
// serve it. Other refusals are not key-dependent.
func TestKeyDependent(t *testing.T) {
	for _, tt := range []struct {
		status int
		body   string
		want   bool
	}{
		{403, `[{"error":{"code":403,"message":"You do not have permission to access the File abc123 or it may not exist.","status":"PERMISSION_DENIED"}}]`, true},
		{403, `{"error":{"code":403,"message":"You do not have permission to access the CachedContent c1 or it may not exist.","status":"PERMISSION_DENIED"}}`, true},
		{400, `{"error":{"code":400,"message":"Invalid JSON payload received.","status":"INVALID_ARGUMENT"}}`, false},
	} {
		r := Classify(Input{Provider: "gemini", Status: tt.status, Body: []byte(tt.body)})
		if r.Class != RequestRejected || r.KeyDependent != tt.want {
			t.Errorf("%s: %+v, want request_rejected, key-dependent %v", tt.body, r, tt.want)
		}
	}
	// Another provider's 400 quoting the phrase back (a caller's value in
	// its message) is the request's, returned: not a reason to rotate.
	for _, p := range []string{"openai", "anthropic"} {
		body := `{"error":{"type":"invalid_request_error","message":"Invalid value for 'user': 'You do not have permission to access the File x or it may not exist.'"}}`
		if r := Classify(Input{Provider: p, Status: 400, Body: []byte(body)}); r.Class != RequestRejected || r.KeyDependent {
			t.Errorf("%s quoting the phrase: %+v", p, r)
		}
	}
	// A trip_on rule that makes the refusal another class acts as that
	// class says (it holds): it is no longer key-dependent.
	c := &Classifier{Global: []Rule{{Name: "files-hold", Match: regexp.MustCompile("may not exist"), Class: CredentialRejected, TTL: time.Minute}}}
	r := c.Classify(Input{Provider: "gemini", Status: 403, Body: []byte(`{"error":{"code":403,"message":"You do not have permission to access the File abc or it may not exist.","status":"PERMISSION_DENIED"}}`)}, "g")
	if r.Class != CredentialRejected || r.KeyDependent {
		t.Errorf("a rule's class: %+v", r)
	}
}

func TestActionFor(t *testing.T) {
	p := RetryPolicy{OnStatuses: []int{500, 503}, RotateOnStatuses: []int{429}, OnTransportErrors: true}
	tests := []struct {
		name   string
		r      Result
		status int
		stream bool
		p      RetryPolicy
		want   Action
	}{
		{"connection refused", Result{Class: Transient, Code: "transport_error"}, 0, false, p, RetrySame},
		{"connection refused, no transport retries", Result{Class: Transient, Code: "transport_error"}, 0, false, RetryPolicy{}, Rotate},
		{"a timeout rotates", Result{Class: Transient, Code: "timeout"}, 0, false, p, Rotate},
		{"500 in the list", Result{Class: Transient}, 500, false, p, RetrySame},
		{"502 not in the list rotates", Result{Class: Transient}, 502, false, p, Rotate},
		{"408 not in the list rotates", Result{Class: Transient}, 408, false, p, Rotate},
		{"an empty list retries no status in place", Result{Class: Transient}, 500, false, RetryPolicy{OnStatuses: []int{}}, Rotate},
		{"429 rotates", Result{Class: RateLimit}, 429, false, p, Rotate},
		{"a 500 listed for a revoked key: the class decides", Result{Class: CredentialRejected}, 500, false, p, Rotate},
		{"a rejected request returns", Result{Class: RequestRejected}, 400, false, p, Return},
		{"a refusal another key may not give rotates", Result{Class: RequestRejected, KeyDependent: true}, 403, false, p, Rotate},
		{"a stream error event", Result{Class: Transient}, 0, true, p, RetrySame},
	}
	for _, tt := range tests {
		if got := tt.r.ActionFor(tt.status, tt.stream, tt.p); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
	in := Input{Err: errors.New("context deadline exceeded")}
	if w := Classify(in).WireFor(in, p); w.Action != "rotate" {
		t.Errorf("a timed-out attempt's wire action %q, want rotate", w.Action)
	}
	// A rule may make a transport error another class; the proxy still
	// takes an attempt with no answer for transient.
	in = Input{Err: errors.New("x509: certificate signed by unknown authority")}
	if w := (Result{Class: CredentialRejected, Code: "tls"}).WireFor(in, p); w.Action != "retry_same" || w.Class != CredentialRejected {
		t.Errorf("a reclassified transport error: %+v", w)
	}
}
