package proxy

import (
	"strconv"
	"unicode/utf8"

	"switchyard.dev/services/proxy/internal/gwerror"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/services/proxy/internal/translate"
	"switchyard.dev/shared/provider"
)

// codeResponseTooLarge is the failure.Result code of an answer larger
// than the gateway holds (upstream.MaxResponseBytes): the reason of a 502
// provider_error, not a code of its own.
const codeResponseTooLarge = "response_too_large"

// openAIType maps a status to the OpenAI error "type".
func openAIType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 429:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// errorBody renders a gateway error in the endpoint's own format.
func errorBody(f provider.Format, status int, code, message string) []byte {
	b := make([]byte, 0, 128+len(message))
	if f == provider.FormatAnthropic {
		b = append(b, `{"type":"error","error":{"type":"`...)
		b = append(b, translate.AnthropicErrorType(status)...)
		b = append(b, `","code":`...)
		b = strconv.AppendQuote(b, code)
		b = append(b, `,"message":`...)
		b = appendJSONString(b, message)
		return append(b, "}}"...)
	}
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, message)
	b = append(b, `,"type":"`...)
	b = append(b, openAIType(status)...)
	b = append(b, `","param":null,"code":`...)
	b = strconv.AppendQuote(b, code)
	return append(b, "}}"...)
}

// streamErrorEvent renders an error as one server-sent event in the
// endpoint's format.
func streamErrorEvent(f provider.Format, status int, code, message string, seq int) []byte {
	if f == provider.FormatResponses {
		// The Responses API's error event, numbered after the events
		// before it.
		b := append([]byte("event: error\ndata: {\"type\":\"error\",\"code\":"), appendJSONString(nil, code)...)
		b = append(b, ",\"message\":"...)
		b = appendJSONString(b, message)
		b = append(b, ",\"param\":null,\"sequence_number\":"...)
		b = strconv.AppendInt(b, int64(seq), 10)
		return append(b, "}\n\n"...)
	}
	body := errorBody(f, status, code, message)
	var b []byte
	if f == provider.FormatAnthropic {
		b = append(b, "event: error\ndata: "...)
	} else {
		b = append(b, "data: "...)
	}
	b = append(b, body...)
	return append(b, "\n\n"...)
}

// appendJSONString appends s as a JSON string. A byte that is not part
// of valid UTF-8 becomes U+FFFD: messages quote what callers send (a
// request path, a model name), and an error body must stay valid JSON,
// which is UTF-8.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, "\ufffd"...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size - 1
		}
	}
	return append(b, '"')
}

// sendError writes a gateway error response: code (gwerror) with its
// status. A code an SDK must not retry (gwerror.Entry.Retryable false:
// a budget spent until its period resets) on a status the SDKs retry
// (429, 5xx) says X-Should-Retry: false, which they read before their own
// rules.
func sendError(c *fiber.Ctx, f provider.Format, code, message string) error {
	e, _ := gwerror.Lookup(code)
	status := e.Status
	if status == 0 {
		status = fiber.StatusInternalServerError // not in the catalogue: TestEveryCodeSentIsCatalogued keeps it from happening
	}
	if !e.Retryable && (status == fiber.StatusTooManyRequests || status >= 500) {
		c.Set(headerShouldRetry, "false")
	}
	return sendErrorStatus(c, f, status, code, message)
}

// sendErrorStatus writes a gateway error response with a status other
// than its code's own (gwerror.Entry.Also: provider_error's 504, not_found's
// 405, invalid_request's for a request the HTTP server refused; an
// upstream's status relayed with the gateway's provider_error).
func sendErrorStatus(c *fiber.Ctx, f provider.Format, status int, code, message string) error {
	c.Status(status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(withRequestID(c, f, errorBody(f, status, code, message)))
}

// withRequestID adds the request's id (X-Request-Id) to an Anthropic-style
// error body, at its top level as request_id, as Anthropic's own errors
// carry it; other bodies are returned as they are.
func withRequestID(c *fiber.Ctx, f provider.Format, body []byte) []byte {
	id := c.Response().Header.Peek(headerRequestID)
	if f != provider.FormatAnthropic || len(id) == 0 || len(body) == 0 || body[len(body)-1] != '}' {
		return body
	}
	b := make([]byte, 0, len(body)+len(id)+16)
	b = append(b, body[:len(body)-1]...)
	b = append(b, `,"request_id":`...)
	b = appendJSONString(b, string(id)) // visible ASCII, a caller's may hold quotes
	return append(b, '}')
}
