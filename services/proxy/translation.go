package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"switchyard.dev/services/proxy/internal/translate"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/provider"
)

// withMaxCompletionTokens renames a translated chat request's max_tokens
// max_completion_tokens, for the providers that take the new name
// (provider.Adapter.TakesMaxCompletionTokens): a translation writes
// max_tokens, which every OpenAI-compatible server knows, but OpenAI's
// reasoning models refuse it (400 unsupported_parameter), and an Anthropic
// caller always sends one.
func withMaxCompletionTokens(body []byte) []byte {
	v, _, _, ok := jsonfield.Find(body, "max_tokens")
	if !ok {
		return body
	}
	return jsonfield.SetRaw(nil, jsonfield.Delete(nil, body, "max_tokens"), "max_completion_tokens", v)
}

// malformedRequest is the caller's message for a request body a
// translation could not decode (translate.ErrMalformed): a field of the
// wrong type, named with the JSON type it must have, never with Go's
// names for either.
func malformedRequest(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	got := te.Value // "string", "number", "number 1e30", "bool", "array", "object"
	switch {
	case got == "array" || got == "object":
		got = "an " + got
	case got == "bool":
		got = "a boolean"
	case got == "string" || got == "number":
		got = "a " + got
	default:
		got = "the " + got // a number out of the field's range
	}
	if te.Field == "" {
		return "a field of the request body has the wrong type: " + got
	}
	return fmt.Sprintf("`%s` must be %s, not %s", te.Field, jsonKind(te.Type), got)
}

// jsonKind is the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another type"
}

// errorShape is the shape of a format's error bodies: the Responses API's
// are OpenAI's ({"error":{"message","type","param","code"}}).
func errorShape(f provider.Format) provider.Format {
	if f == provider.FormatAnthropic {
		return provider.FormatAnthropic
	}
	return provider.FormatOpenAI
}

// translateError converts an upstream error body of the other shape into
// the caller's (errorShape).
func translateError(callerFormat provider.Format, status int, body []byte) []byte {
	if errorShape(callerFormat) == provider.FormatOpenAI {
		return translate.AnthropicErrorToOpenAI(status, body)
	}
	return translate.OpenAIErrorToAnthropic(status, body)
}

// newStreamConverter converts an upstream stream of the other format into
// the caller's. upstreamReq is the request sent upstream: an Anthropic one
// that carries the json_response tool (a response_format json_schema) has
// its text held until the stream shows whether the tool answers.
// callerUsage: an OpenAI caller asked for the usage chunk
// (stream_options.include_usage); one that did not gets none, as from
// OpenAI, whichever step served. The usage is metered from the upstream's
// events all the same (relay.convertKind reads them before conversion).
func newStreamConverter(callerFormat, upstreamFormat provider.Format, model string, upstreamReq []byte, callerUsage bool) translate.StreamConverter {
	messagesToChat := func(usage bool) translate.StreamConverter {
		if translate.RequestsAnswerTool(upstreamReq) {
			return translate.NewMessagesToChatAnswerStream(model, usage)
		}
		return translate.NewMessagesToChatStream(model, usage)
	}
	if callerFormat == provider.FormatResponses {
		if upstreamFormat == provider.FormatAnthropic {
			// The Responses stream's response.completed carries the
			// usage: the chat stream between must give it.
			return translate.ChainResponses(messagesToChat(true), model)
		}
		return translate.NewChatToResponsesStream(model)
	}
	if callerFormat == provider.FormatOpenAI {
		return messagesToChat(callerUsage)
	}
	return translate.NewChatToMessagesStream(model)
}
