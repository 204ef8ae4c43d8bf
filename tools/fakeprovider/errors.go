package fakeprovider

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrorSpec is one entry of the error library: a provider's real error
// response. Body and header values are templates; the placeholders
// {{model}}, {{key}} (the call's key, unmasked), {{key_hint}}, {{retry_after}} (seconds), {{retry_after_ms}},
// {{method}}, {{path}} and {{request_id}} are filled in per call, and a
// rate limit's {{limit}}, {{used}}, {{requested}} and {{reset_ms}} (epoch
// milliseconds of the end of the wait) by the rate limiter (values in Body
// are JSON-escaped).
type ErrorSpec struct {
	Name       string
	Flavor     string // openai, azure, anthropic, gemini, openrouter
	Status     int
	Header     map[string]string
	Body       string
	RetryAfter time.Duration // default for {{retry_after}}
	// Limit is the default for {{limit}} and {{used}} ({{requested}}: 1)
	// when no rate limit of the fake's own fills them in.
	Limit int64
}

const (
	openaiRateLimitMsg       = "Rate limit reached for {{model}} in organization org-xxx on requests per min (RPM): Limit {{limit}}, Used {{used}}, Requested {{requested}}. Please try again in {{retry_after}}s. Visit https://platform.openai.com/account/rate-limits to learn more."
	openaiTokensRateLimitMsg = "Rate limit reached for {{model}} in organization org-xxx on tokens per min (TPM): Limit {{limit}}, Used {{used}}, Requested {{requested}}. Please try again in {{retry_after}}s. Visit https://platform.openai.com/account/rate-limits to learn more."
	anthropicRateLimitTail   = " For details, refer to: https://docs.anthropic.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."
	azureRateLimitMsg        = "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after {{retry_after}} seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."
)

// errorLibrary holds the named errors. Gemini errors are listed in the
// OpenAI-compatible endpoint's array form; geminiNative adds the plain object
// form of each under "<name>_native".
var errorLibrary = buildLibrary([]ErrorSpec{
	// OpenAI (and every OpenAI-compatible provider).
	{
		Name: "openai.insufficient_quota", Flavor: "openai", Status: 429,
		Body: `{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
	},
	{
		Name: "openai.invalid_api_key", Flavor: "openai", Status: 401,
		Body: `{"error":{"message":"Incorrect API key provided: {{key_hint}}. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
	},
	{
		// As OpenAI answered before it masked keys, and as some
		// OpenAI-compatible servers still do: the whole key, echoed.
		Name: "openai.invalid_api_key_unmasked", Flavor: "openai", Status: 401,
		Body: `{"error":{"message":"Incorrect API key provided: {{key}}. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
	},
	{
		// An Anthropic-format server that names the key it refused.
		Name: "anthropic.invalid_api_key_unmasked", Flavor: "anthropic", Status: 401,
		Body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key: {{key}}"},"request_id":"{{request_id}}"}`,
	},
	{
		// A request error that quotes the key back (a 400: returned to the caller).
		Name: "openai.bad_request_echo", Flavor: "openai", Status: 400,
		Body: `{"error":{"message":"Invalid 'messages' for the request authorised by {{key}}: expected an array","type":"invalid_request_error","param":"messages","code":"invalid_type"}}`,
	},
	{
		Name: "openai.missing_api_key", Flavor: "openai", Status: 401,
		Body: `{"error":{"message":"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":null}}`,
	},
	{
		Name: "openai.model_not_found", Flavor: "openai", Status: 404,
		Body: "{\"error\":{\"message\":\"The model `{{model}}` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"model_not_found\"}}",
	},
	{
		Name: "openai.rate_limit", Flavor: "openai", Status: 429, RetryAfter: 20 * time.Second, Limit: 3,
		Header: map[string]string{
			"Retry-After":                    "{{retry_after}}",
			"x-ratelimit-limit-requests":     "3",
			"x-ratelimit-remaining-requests": "0",
			"x-ratelimit-reset-requests":     "{{retry_after}}s",
			"x-ratelimit-limit-tokens":       "40000",
			"x-ratelimit-remaining-tokens":   "39950",
			"x-ratelimit-reset-tokens":       "75ms",
		},
		Body: `{"error":{"message":"` + openaiRateLimitMsg + `","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
	},
	{
		// The same on the tokens per minute limit.
		Name: "openai.rate_limit_tokens", Flavor: "openai", Status: 429, RetryAfter: 2 * time.Second, Limit: 30000,
		Header: map[string]string{
			"Retry-After":                    "{{retry_after}}",
			"x-ratelimit-limit-requests":     "500",
			"x-ratelimit-remaining-requests": "499",
			"x-ratelimit-reset-requests":     "120ms",
			"x-ratelimit-limit-tokens":       "30000",
			"x-ratelimit-remaining-tokens":   "0",
			"x-ratelimit-reset-tokens":       "{{retry_after}}s",
		},
		Body: `{"error":{"message":"` + openaiTokensRateLimitMsg + `","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
	},
	{
		// A rate limit that states no wait (no Retry-After, no reset
		// header, no "try again in" hint): the ladder decides.
		Name: "openai.rate_limit_no_wait", Flavor: "openai", Status: 429,
		Body: `{"error":{"message":"Rate limit reached for {{model}} in organization org-xxx on requests per min (RPM): Limit 3, Used 3, Requested 1. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
	},
	{
		// A 429 the request alone causes: more tokens than the per-minute
		// limit, whatever the key's usage.
		Name: "openai.request_too_large", Flavor: "openai", Status: 429,
		Body: `{"error":{"message":"Request too large for {{model}} in organization org-xxx on tokens per min (TPM): Limit 30000, Requested 52310. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
	},
	{
		Name: "openai.server_error", Flavor: "openai", Status: 500,
		Body: `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`,
	},
	{
		Name: "openai.bad_request", Flavor: "openai", Status: 400,
		Body: `{"error":{"message":"Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.","type":"invalid_request_error","param":"messages","code":"empty_array"}}`,
	},
	{
		Name: "openai.invalid_json", Flavor: "openai", Status: 400,
		Body: `{"error":{"message":"We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)","type":"invalid_request_error","param":null,"code":null}}`,
	},
	{
		Name: "openai.context_length", Flavor: "openai", Status: 400,
		Body: `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
	},
	{
		// A multipart upload without its "file" part, or not multipart.
		Name: "openai.invalid_file", Flavor: "openai", Status: 400,
		Body: `{"error":{"message":"1 validation error for Request\nbody -> file\n  field required (type=value_error.missing)","type":"invalid_request_error","param":null,"code":null}}`,
	},
	{
		Name: "openai.invalid_url", Flavor: "openai", Status: 404,
		Body: `{"error":{"message":"Invalid URL ({{method}} {{path}})","type":"invalid_request_error","param":null,"code":null}}`,
	},

	// Anthropic.
	{
		Name: "anthropic.overloaded", Flavor: "anthropic", Status: 529,
		Header: map[string]string{"x-should-retry": "true"},
		Body:   `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"{{request_id}}"}`,
	},
	{
		Name: "anthropic.rate_limit", Flavor: "anthropic", Status: 429, RetryAfter: 30 * time.Second, Limit: 50,
		Header: map[string]string{
			"retry-after":                             "{{retry_after}}",
			"anthropic-ratelimit-requests-limit":      "50",
			"anthropic-ratelimit-requests-remaining":  "0",
			"anthropic-ratelimit-input-tokens-limit":  "40000",
			"anthropic-ratelimit-output-tokens-limit": "8000",
			"x-should-retry":                          "true",
		},
		Body: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of {{limit}} requests per minute.` + anthropicRateLimitTail + `"},"request_id":"{{request_id}}"}`,
	},
	{
		// The same on the tokens limit.
		Name: "anthropic.rate_limit_tokens", Flavor: "anthropic", Status: 429, RetryAfter: 30 * time.Second, Limit: 40000,
		Header: map[string]string{
			"retry-after":                          "{{retry_after}}",
			"anthropic-ratelimit-tokens-limit":     "40000",
			"anthropic-ratelimit-tokens-remaining": "0",
			"x-should-retry":                       "true",
		},
		Body: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of {{limit}} input tokens per minute.` + anthropicRateLimitTail + `"},"request_id":"{{request_id}}"}`,
	},
	{
		Name: "anthropic.invalid_api_key", Flavor: "anthropic", Status: 401,
		Body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"{{request_id}}"}`,
	},
	{
		Name: "anthropic.permission", Flavor: "anthropic", Status: 403,
		Body: `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."},"request_id":"{{request_id}}"}`,
	},
	{
		Name: "anthropic.credit_balance", Flavor: "anthropic", Status: 400,
		Body: `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},"request_id":"{{request_id}}"}`,
	},
	{
		Name: "anthropic.invalid_request", Flavor: "anthropic", Status: 400,
		Body: `{"type":"error","error":{"type":"invalid_request_error","message":"messages: Field required"},"request_id":"{{request_id}}"}`,
	},
	{
		Name: "anthropic.not_found", Flavor: "anthropic", Status: 404,
		Body: `{"type":"error","error":{"type":"not_found_error","message":"model: {{model}}"},"request_id":"{{request_id}}"}`,
	},
	{
		Name: "anthropic.api_error", Flavor: "anthropic", Status: 500,
		Body: `{"type":"error","error":{"type":"api_error","message":"Internal server error"},"request_id":"{{request_id}}"}`,
	},

	// Gemini (OpenAI-compatible endpoint: errors come wrapped in an array).
	{
		Name: "gemini.api_key_invalid", Flavor: "gemini", Status: 400,
		Body: `[{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}},{"@type":"type.googleapis.com/google.rpc.LocalizedMessage","locale":"en-US","message":"API key not valid. Please pass a valid API key."}]}}]`,
	},
	{
		Name: "gemini.resource_exhausted", Flavor: "gemini", Status: 429, RetryAfter: 17 * time.Second,
		Body: `[{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"{{model}}"},"quotaValue":"15"}]},{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"{{retry_after}}s"}]}}]`,
	},
	{
		Name: "gemini.region_blocked", Flavor: "gemini", Status: 400,
		Body: `[{"error":{"code":400,"message":"User location is not supported for the API use.","status":"FAILED_PRECONDITION"}}]`,
	},
	{
		Name: "gemini.model_not_found", Flavor: "gemini", Status: 404,
		Body: `[{"error":{"code":404,"message":"models/{{model}} is not found for API version v1main, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods.","status":"NOT_FOUND"}}]`,
	},
	{
		Name: "gemini.internal", Flavor: "gemini", Status: 500,
		Body: `[{"error":{"code":500,"message":"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting","status":"INTERNAL"}}]`,
	},

	// Azure OpenAI.
	{
		Name: "azure.rate_limit", Flavor: "azure", Status: 429, RetryAfter: 6 * time.Second,
		Header: map[string]string{
			"Retry-After":                    "{{retry_after}}",
			"retry-after-ms":                 "{{retry_after_ms}}",
			"x-ratelimit-remaining-requests": "0",
			"x-ratelimit-remaining-tokens":   "0",
		},
		Body: `{"error":{"code":"429","message":"` + azureRateLimitMsg + `"}}`,
	},
	{
		Name: "azure.content_filter", Flavor: "azure", Status: 400,
		Body: `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766","type":null,"param":"prompt","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"hate":{"filtered":false,"severity":"safe"},"jailbreak":{"filtered":true,"detected":true},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}}}}`,
	},
	{
		Name: "azure.deployment_not_found", Flavor: "azure", Status: 404,
		Body: `{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}}`,
	},
	{
		Name: "azure.invalid_api_key", Flavor: "azure", Status: 401,
		Body: `{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}`,
	},

	// OpenRouter.
	{
		Name: "openrouter.error_in_200", Flavor: "openrouter", Status: 200,
		Body: `{"error":{"code":502,"message":"Provider returned error","metadata":{"raw":"{\"error\":{\"message\":\"Upstream service unavailable\",\"type\":\"server_error\"}}","provider_name":"Together"}},"user_id":"user_2fakeprovider"}`,
	},
	{
		Name: "openrouter.insufficient_credits", Flavor: "openrouter", Status: 402,
		Body: `{"error":{"code":402,"message":"Insufficient credits. Add more using https://openrouter.ai/credits"},"user_id":"user_2fakeprovider"}`,
	},
	{
		Name: "openrouter.rate_limit", Flavor: "openrouter", Status: 429, RetryAfter: 10 * time.Second,
		Header: map[string]string{"Retry-After": "{{retry_after}}"},
		Body:   `{"error":{"code":429,"message":"Provider returned error","metadata":{"raw":"{{model}} is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations","provider_name":"Google AI Studio"}},"user_id":"user_2fakeprovider"}`,
	},
	{
		// OpenRouter's own limit on the key, its X-RateLimit-* headers
		// repeated in the body's metadata.
		Name: "openrouter.rate_limit_key", Flavor: "openrouter", Status: 429, RetryAfter: 10 * time.Second, Limit: 20,
		Header: map[string]string{
			"Retry-After":           "{{retry_after}}",
			"X-RateLimit-Limit":     "{{limit}}",
			"X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset":     "{{reset_ms}}",
		},
		Body: `{"error":{"message":"Rate limit exceeded: free-models-per-min. ","code":429,"metadata":{"headers":{"X-RateLimit-Limit":"{{limit}}","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"{{reset_ms}}"}}},"user_id":"user_2fakeprovider"}`,
	},
})

func buildLibrary(specs []ErrorSpec) map[string]ErrorSpec {
	lib := make(map[string]ErrorSpec, 2*len(specs))
	for _, e := range specs {
		lib[e.Name] = e
		if e.Flavor == "gemini" {
			native := e
			native.Name += "_native"
			native.Body = strings.TrimSuffix(strings.TrimPrefix(e.Body, "["), "]")
			lib[native.Name] = native
		}
	}
	return lib
}

// ErrorNames returns the names of the error library, sorted.
func ErrorNames() []string {
	names := make([]string, 0, len(errorLibrary))
	for n := range errorLibrary {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LookupError returns the named error of the library.
func LookupError(name string) (ErrorSpec, bool) {
	e, ok := errorLibrary[name]
	return e, ok
}

func knownError(name string) bool {
	_, ok := errorLibrary[name]
	return ok
}

// errorParams fill an ErrorSpec's placeholders.
type errorParams struct {
	Model, Key, Method, Path, RequestID string
	RetryAfter                          time.Duration // 0 = the spec's default
	// Limit, Used and Requested are a rate limit's numbers (Limit 0: the
	// spec's defaults); Reset is when its window ends (zero: after the
	// wait from now).
	Limit, Used, Requested int64
	Reset                  time.Time
}

// render fills in the spec's templates.
func (e ErrorSpec) render(p errorParams) (http.Header, []byte) {
	wait := e.RetryAfter
	if p.RetryAfter > 0 {
		wait = p.RetryAfter
	}
	secs := int((wait + time.Second - 1) / time.Second)
	model := p.Model
	if model == "" {
		model = "unknown-model"
	}
	limit, used, requested := p.Limit, p.Used, p.Requested
	if limit == 0 {
		limit, used, requested = e.Limit, e.Limit, 1
	}
	reset := p.Reset
	if reset.IsZero() {
		reset = time.Now().Add(wait)
	}
	values := []string{
		"{{model}}", model,
		"{{key_hint}}", keyHint(p.Key),
		"{{key}}", p.Key,
		"{{retry_after}}", strconv.Itoa(secs),
		"{{retry_after_ms}}", strconv.FormatInt(wait.Milliseconds(), 10),
		"{{method}}", p.Method,
		"{{path}}", p.Path,
		"{{request_id}}", p.RequestID,
		"{{limit}}", strconv.FormatInt(limit, 10),
		"{{used}}", strconv.FormatInt(used, 10),
		"{{requested}}", strconv.FormatInt(requested, 10),
		"{{reset_ms}}", strconv.FormatInt(epochMillis(reset), 10),
	}
	h := make(http.Header, len(e.Header)+1)
	plain := strings.NewReplacer(values...)
	for k, v := range e.Header {
		h.Set(k, plain.Replace(v))
	}
	escaped := slices.Clone(values)
	for i := 1; i < len(escaped); i += 2 {
		escaped[i] = jsonEscape(escaped[i])
	}
	return h, []byte(strings.NewReplacer(escaped...).Replace(e.Body))
}

// streamBody returns the error object to send inside a stream: the array
// wrapping of the Gemini compatible endpoint is removed.
func streamBody(body []byte) []byte {
	var arr []json.RawMessage
	if json.Unmarshal(body, &arr) == nil && len(arr) > 0 {
		return arr[0]
	}
	return body
}

// keyHint masks a key the way OpenAI does in its invalid-key message.
func keyHint(key string) string {
	if len(key) <= 10 {
		return strings.Repeat("*", len(key))
	}
	return key[:6] + strings.Repeat("*", len(key)-10) + key[len(key)-4:]
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
