package translate

import (
	"bytes"
	"encoding/json"
	"net/http"

	"switchyard.dev/shared/jsonfield"
)

// maxErrorText bounds the message taken from an error body that is not JSON
// (an HTML page from a load balancer, say).
const maxErrorText = 512

// AnthropicErrorToOpenAI converts an Anthropic error body, or the data of an
// Anthropic stream "error" event, into an OpenAI error body
// {"error":{"message","type","param","code"}}. status is the upstream HTTP
// status, 0 inside a stream; it decides the type when the body does not.
// A body that is not an Anthropic error still yields a well-formed one.
func AnthropicErrorToOpenAI(status int, body []byte) []byte {
	var in anthropicErrorBody
	_ = json.Unmarshal(body, &in) // a non-JSON body keeps the zero value
	typ, msg := in.Error.Type, in.Error.Message
	if typ == "" {
		typ = AnthropicErrorType(status)
	}
	if msg == "" {
		msg = fallbackMessage(status, body)
	}
	out := openAIErrorBody{Error: openAIError{Message: msg}}
	code := ""
	switch typ {
	case "invalid_request_error":
		out.Error.Type = "invalid_request_error"
	case "authentication_error":
		out.Error.Type, code = "invalid_request_error", "invalid_api_key"
	case "permission_error":
		out.Error.Type, code = "invalid_request_error", "permission_denied"
	case "not_found_error":
		out.Error.Type, code = "invalid_request_error", "not_found"
	case "request_too_large":
		out.Error.Type, code = "invalid_request_error", "request_too_large"
	case "rate_limit_error":
		out.Error.Type, code = "rate_limit_error", "rate_limit_exceeded"
	case "billing_error":
		out.Error.Type, code = "insufficient_quota", "insufficient_quota"
	case "overloaded_error":
		out.Error.Type, code = "server_error", "overloaded"
	case "timeout_error":
		out.Error.Type, code = "server_error", "timeout"
	case "api_error":
		out.Error.Type = "server_error"
	default:
		out.Error.Type = typ
	}
	if code != "" {
		out.Error.Code = &code
	}
	b, _ := marshal(&out) // cannot fail: strings only
	return b
}

// OpenAIErrorToAnthropic converts an OpenAI error body, or the data of an
// OpenAI stream error chunk, into an Anthropic error body
// {"type":"error","error":{"type","message"}}. The error's code, and its
// type when specific, decide the Anthropic type; status otherwise (0 inside
// a stream). Looser shapes of OpenAI-compatible providers
// ({"error":"text"}, {"message":"text"}) and non-JSON bodies are accepted.
func OpenAIErrorToAnthropic(status int, body []byte) []byte {
	e := decodeOpenAIError(body)
	code := ""
	if e.Code != nil {
		code = *e.Code
	}
	typ := anthropicTypeByOpenAICode[code]
	switch {
	case typ != "":
	case e.Type == "insufficient_quota":
		typ = "billing_error"
	case e.Type == "rate_limit_error" || e.Type == "requests" || e.Type == "tokens":
		typ = "rate_limit_error"
	case e.Type == "authentication_error":
		typ = "authentication_error"
	case status != 0:
		typ = AnthropicErrorType(status)
	case e.Type == "invalid_request_error":
		typ = "invalid_request_error"
	default:
		typ = "api_error"
	}
	msg := e.Message
	if msg == "" {
		msg = fallbackMessage(status, body)
	}
	b, _ := marshal(&anthropicErrorBody{Type: "error", Error: anthropicError{Type: typ, Message: msg}})
	return b
}

// anthropicTypeByOpenAICode maps the OpenAI error codes that say what went
// wrong, including those AnthropicErrorToOpenAI writes, so that an error
// translated there and back keeps its type.
var anthropicTypeByOpenAICode = map[string]string{
	"invalid_api_key":     "authentication_error",
	"permission_denied":   "permission_error",
	"not_found":           "not_found_error",
	"model_not_found":     "not_found_error",
	"request_too_large":   "request_too_large",
	"rate_limit_exceeded": "rate_limit_error",
	"insufficient_quota":  "billing_error",
	"overloaded":          "overloaded_error",
	"timeout":             "timeout_error",
}

// decodeOpenAIError reads {"error":{...}}, {"error":"text"} or
// {"message":"text"}; anything else gives the zero value.
func decodeOpenAIError(body []byte) openAIError {
	var in struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &in) != nil {
		return openAIError{}
	}
	var e openAIError
	raw := bytes.TrimSpace(in.Error)
	switch {
	case len(raw) > 0 && raw[0] == '{':
		var obj struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"` // a string, or a number with some providers
		}
		_ = json.Unmarshal(raw, &obj)
		e.Message, e.Type = obj.Message, obj.Type
		if c := bytes.TrimSpace(obj.Code); present(c) {
			var s string
			if c[0] != '"' || json.Unmarshal(c, &s) != nil {
				s = string(c)
			}
			e.Code = &s
		}
	case len(raw) > 0 && raw[0] == '"':
		_ = json.Unmarshal(raw, &e.Message)
	}
	if e.Message == "" {
		e.Message = in.Message
	}
	return e
}

// AnthropicErrorType is the Anthropic error type documented for an
// HTTP status (the gateway's own errors use it too).
func AnthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// fallbackMessage is the message for an error body that carries none: the
// body itself when it is short text, else the status text.
func fallbackMessage(status int, body []byte) string {
	text := bytes.TrimSpace(body)
	if len(text) > 0 && !jsonfield.Valid(text) {
		if len(text) > maxErrorText {
			text = text[:maxErrorText] // marshal mends a cut rune
		}
		return string(text)
	}
	if s := http.StatusText(status); s != "" {
		return s
	}
	return "upstream error"
}
