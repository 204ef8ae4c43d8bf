package translate

import (
	"bytes"
	"encoding/json"
	"errors"
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

// decodeOpenAIError reads the error bodies of OpenAI and of the
// OpenAI-compatible providers: {"error":{...}}, {"error":"text"}, a flat
// {"message","type","code","param"} (Mistral; the Responses API's stream
// "error" event), a Responses "response.failed" event (its
// response.error), and any of these as the first element of an array
// (Gemini's OpenAI-compatible endpoint: [{"error":{...}}]). Anything else
// gives the zero value. A FastAPI {"detail":"text"} gives its message.
func decodeOpenAIError(body []byte) openAIError {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		var list []json.RawMessage
		if json.Unmarshal(body, &list) != nil || len(list) == 0 {
			return openAIError{}
		}
		body = list[0]
	}
	var in struct {
		looseError
		Detail   string          `json:"detail"` // FastAPI-based servers
		Error    json.RawMessage `json:"error"`
		Response struct {
			Error json.RawMessage `json:"error"`
		} `json:"response"`
	}
	if !decodes(body, &in) {
		return openAIError{}
	}
	raw := bytes.TrimSpace(in.Error)
	if r := bytes.TrimSpace(in.Response.Error); len(raw) == 0 && len(r) > 0 && r[0] == '{' {
		raw = r // response.failed
	}
	var e openAIError
	switch {
	case len(raw) > 0 && raw[0] == '{':
		var obj looseError
		decodes(raw, &obj)
		e = obj.openAI()
	case len(raw) > 0 && raw[0] == '"':
		_ = json.Unmarshal(raw, &e.Message)
	default:
		e = in.looseError.openAI() // flat
		if e.Type == "error" || e.Type == "response.failed" {
			e.Type = "" // the event's type, not the error's
		}
	}
	if e.Message == "" {
		e.Message = in.Message
	}
	if e.Message == "" {
		e.Message = in.Detail
	}
	return e
}

// decodes unmarshals body into v and reports whether body is JSON: a field
// of another type than v's (a numeric status, an object for a message)
// leaves that field unset and the others read.
func decodes(body []byte, v any) bool {
	err := json.Unmarshal(body, v)
	var te *json.UnmarshalTypeError
	return err == nil || errors.As(err, &te)
}

// looseError is an error object as OpenAI-compatible providers spell it:
// code a string or a number, Gemini's status beside a numeric code.
type looseError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
	Param   json.RawMessage `json:"param"`
	Status  json.RawMessage `json:"status"`
}

// rawString is raw's value when it is a JSON string.
func rawString(raw json.RawMessage) (string, bool) {
	var s string
	raw = bytes.TrimSpace(raw)
	ok := len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil
	return s, ok
}

func (l looseError) openAI() openAIError {
	e := openAIError{Message: l.Message, Type: l.Type}
	if p, ok := rawString(l.Param); ok {
		e.Param = &p
	}
	if c := bytes.TrimSpace(l.Code); present(c) {
		s, ok := rawString(c)
		status, named := rawString(l.Status)
		switch {
		case ok:
		case named && status != "":
			s = status // Gemini: code 400, status INVALID_ARGUMENT
		default:
			s = string(c)
		}
		e.Code = &s
	}
	return e
}

// CanonicalOpenAIError returns an OpenAI-shape error body as OpenAI's SDKs
// read it ({"error":{"message","type","param","code"}}): body itself when
// it already is one, else one made from what decodeOpenAIError reads of it
// (the looser shapes of OpenAI-compatible providers, whose message the SDKs
// would otherwise lose), the type from status when the body names none.
func CanonicalOpenAIError(status int, body []byte) []byte {
	if canonicalOpenAIError(body) {
		return body
	}
	e := decodeOpenAIError(body)
	if e.Message == "" && e.Code == nil {
		// A shape none of the above (FastAPI's {"detail":[...]},
		// Cloudflare's {"errors":[...]}): the body itself says why.
		if t := bodyText(body); t != "{}" && t != "[]" {
			e.Message = t
		}
	}
	if e.Message == "" {
		e.Message = fallbackMessage(status, body)
	}
	if e.Type == "" {
		e.Type = openAIErrorType(status)
	}
	b, _ := marshal(&openAIErrorBody{Error: e}) // cannot fail: strings only
	return b
}

// bodyText is body as one line of text of at most maxErrorText bytes (a
// JSON body compacted), "" when empty.
func bodyText(body []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, body) != nil {
		b.Reset()
		b.Write(bytes.TrimSpace(body))
	}
	text := b.Bytes()
	if len(text) > maxErrorText {
		text = text[:maxErrorText] // marshal mends a cut rune
	}
	return string(text)
}

// canonicalOpenAIError reports whether body is {"error":{...}} with a
// string message.
func canonicalOpenAIError(body []byte) bool {
	v := jsonfield.Lookup(body, "error")[0]
	if len(v) == 0 || v[0] != '{' {
		return false
	}
	_, ok := jsonfield.String(v, "message")
	return ok
}

// openAIErrorType is the OpenAI error type of a status when the body
// names none.
func openAIErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500 || status == 0:
		return "server_error"
	}
	return "invalid_request_error"
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
