package translate

import (
	"encoding/json"
	"testing"
)

func TestAnthropicErrorToOpenAI(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"overloaded", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`,
			`{"error":{"message":"Overloaded","type":"server_error","param":null,"code":"overloaded"}}`},
		{"invalid request", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`,
			`{"error":{"message":"max_tokens: Field required","type":"invalid_request_error","param":null,"code":null}}`},
		{"authentication", 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`,
			`{"error":{"message":"invalid x-api-key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`},
		{"rate limit", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`,
			`{"error":{"message":"Number of request tokens has exceeded your per-minute rate limit","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`},
		{"stream error, no status", 0, `{"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}`,
			`{"error":{"message":"Internal server error","type":"server_error","param":null,"code":null}}`},
		{"html from a proxy", 502, `<html><body>502 Bad Gateway</body></html>`,
			`{"error":{"message":"<html><body>502 Bad Gateway</body></html>","type":"server_error","param":null,"code":null}}`},
		{"empty body", 404, ``,
			`{"error":{"message":"Not Found","type":"invalid_request_error","param":null,"code":"not_found"}}`},
		{"unknown type kept", 418, `{"type":"error","error":{"type":"teapot_error","message":"short and stout"}}`,
			`{"error":{"message":"short and stout","type":"teapot_error","param":null,"code":null}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AnthropicErrorToOpenAI(tt.status, []byte(tt.body)); string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestOpenAIErrorToAnthropic(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"invalid api key", 401, `{"error":{"message":"Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			`{"type":"error","error":{"type":"authentication_error","message":"Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys."}}`},
		{"quota on a 429", 429, `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
			`{"type":"error","error":{"type":"billing_error","message":"You exceeded your current quota."}}`},
		{"rate limit", 429, `{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			`{"type":"error","error":{"type":"rate_limit_error","message":"Rate limit reached for gpt-4o"}}`},
		{"model not found", 404, `{"error":{"message":"The model 'gpt-9' does not exist","type":"invalid_request_error","param":null,"code":"model_not_found"}}`,
			`{"type":"error","error":{"type":"not_found_error","message":"The model 'gpt-9' does not exist"}}`},
		{"bad request by status", 400, `{"error":{"message":"'messages' is a required property","type":"invalid_request_error","param":null,"code":null}}`,
			`{"type":"error","error":{"type":"invalid_request_error","message":"'messages' is a required property"}}`},
		{"service unavailable", 503, `{"error":{"message":"The engine is currently overloaded","type":"server_error","param":null,"code":null}}`,
			`{"type":"error","error":{"type":"overloaded_error","message":"The engine is currently overloaded"}}`},
		{"stream error, no status", 0, `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`,
			`{"type":"error","error":{"type":"api_error","message":"The server had an error"}}`},
		{"error as a string", 500, `{"error":"upstream exploded"}`,
			`{"type":"error","error":{"type":"api_error","message":"upstream exploded"}}`},
		{"numeric code", 400, `{"error":{"message":"bad","type":"invalid_request_error","code":400}}`,
			`{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`},
		{"bare message", 422, `{"message":"unprocessable"}`,
			`{"type":"error","error":{"type":"invalid_request_error","message":"unprocessable"}}`},
		{"text body", 504, `upstream request timeout`,
			`{"type":"error","error":{"type":"timeout_error","message":"upstream request timeout"}}`},
		{"empty body", 500, ``,
			`{"type":"error","error":{"type":"api_error","message":"Internal Server Error"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := OpenAIErrorToAnthropic(tt.status, []byte(tt.body)); string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestErrorTypesRoundTrip checks that every Anthropic error type survives a
// translation to OpenAI and back, as in a stream (status 0).
func TestErrorTypesRoundTrip(t *testing.T) {
	for _, typ := range []string{
		"invalid_request_error", "authentication_error", "billing_error", "permission_error",
		"not_found_error", "request_too_large", "rate_limit_error", "api_error",
		"timeout_error", "overloaded_error",
	} {
		t.Run(typ, func(t *testing.T) {
			in, _ := json.Marshal(anthropicErrorBody{Type: "error", Error: anthropicError{Type: typ, Message: "m"}})
			back := OpenAIErrorToAnthropic(0, AnthropicErrorToOpenAI(0, in))
			var got anthropicErrorBody
			if err := json.Unmarshal(back, &got); err != nil {
				t.Fatal(err)
			}
			if got.Error.Type != typ || got.Error.Message != "m" {
				t.Errorf("round trip gave %s", back)
			}
		})
	}
}

func TestLongTextErrorBodyIsCut(t *testing.T) {
	body := make([]byte, 0, 2000)
	for len(body) < 2000 {
		body = append(body, "é"...)
	}
	out := OpenAIErrorToAnthropic(502, body)
	var got anthropicErrorBody
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if n := len(got.Error.Message); n > maxErrorText+3 {
		t.Errorf("message of %d bytes, want at most about %d", n, maxErrorText)
	}
}

// TestCanonicalOpenAIError: the looser error bodies of OpenAI-compatible
// providers come out as OpenAI's SDKs read them (before, the SDKs got the
// status with an empty message); an OpenAI body is returned as it is.
func TestCanonicalOpenAIError(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"openai's own, unchanged", 400, `{"error":{"message":"bad","type":"invalid_request_error","param":"messages","code":null},"extra":1}`,
			`{"error":{"message":"bad","type":"invalid_request_error","param":"messages","code":null},"extra":1}`},
		{"gemini array", 400, `[{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"foo\"","status":"INVALID_ARGUMENT"}}]`,
			`{"error":{"message":"Invalid JSON payload received. Unknown name \"foo\"","type":"invalid_request_error","param":null,"code":"INVALID_ARGUMENT"}}`},
		{"mistral flat", 400, `{"object":"error","message":"Prompt contains 40136 tokens, too large for model with 32768 maximum context length","type":"invalid_request_error","param":null,"code":null}`,
			`{"error":{"message":"Prompt contains 40136 tokens, too large for model with 32768 maximum context length","type":"invalid_request_error","param":null,"code":null}}`},
		{"ollama string", 404, `{"error":"model 'llama9' not found, try pulling it first"}`,
			`{"error":{"message":"model 'llama9' not found, try pulling it first","type":"invalid_request_error","param":null,"code":null}}`},
		{"responses error event", 400, `{"type":"error","code":"context_length_exceeded","message":"Your input exceeds the context window of this model.","param":"input","sequence_number":0}`,
			`{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`},
		{"responses failed event", 400, `{"type":"response.failed","sequence_number":1,"response":{"id":"resp_1","status":"failed","error":{"code":"invalid_prompt","message":"Invalid prompt: flagged"}}}`,
			`{"error":{"message":"Invalid prompt: flagged","type":"invalid_request_error","param":null,"code":"invalid_prompt"}}`},
		{"fastapi detail", 429, `{"detail":"Too many requests","status":429}`,
			`{"error":{"message":"Too many requests","type":"rate_limit_error","param":null,"code":null}}`},
		{"message of another type", 500, `{"message":{"text":"x"},"code":"boom"}`,
			`{"error":{"message":"Internal Server Error","type":"server_error","param":null,"code":"boom"}}`},
		{"fastapi detail list: the body is the message", 422, `{"detail": [{"loc": ["body", "max_tokens"], "msg": "field required"}]}`,
			`{"error":{"message":"{\"detail\":[{\"loc\":[\"body\",\"max_tokens\"],\"msg\":\"field required\"}]}","type":"invalid_request_error","param":null,"code":null}}`},
		{"a null message keeps its code", 400, `{"error":{"message":null,"code":"context_length_exceeded"}}`,
			`{"error":{"message":"Bad Request","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}`},
		{"an empty object: the status", 503, `{}`,
			`{"error":{"message":"Service Unavailable","type":"server_error","param":null,"code":null}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CanonicalOpenAIError(tt.status, []byte(tt.body)); string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}
