package provider

import (
	"bytes"
	"strconv"

	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/usage"
)

// StreamUsageOption reports whether an OpenAI-format stream reports its
// usage only when asked with stream_options.include_usage (and accepts the
// option). Mistral rejects the option (422 extra_forbidden) and always
// reports usage; Azure accepts it from api-version 2024-09-01 on; Anthropic
// streams always report usage in their own events.
func (a *Adapter) StreamUsageOption() bool {
	switch {
	case a.format != FormatOpenAI || a.typ == "mistral":
		return false
	case a.typ == "azure":
		return a.apiVersion >= "2024-09-01"
	}
	return true
}

// RejectsStreamOptions reports whether the provider refuses a request
// carrying stream_options (Mistral): the proxy drops the field for it.
func (a *Adapter) RejectsStreamOptions() bool {
	return a.typ == "mistral" || a.typ == "azure" && a.apiVersion < "2024-09-01"
}

// isObject reports whether a raw JSON value is an object.
func isObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }

// object is the top-level field key of obj when it is a JSON object.
func object(obj []byte, key string) ([]byte, bool) {
	v, _, _, ok := jsonfield.Find(obj, key)
	return v, ok && len(v) > 0 && v[0] == '{'
}

// usageObject converts a usage object in format f; for Anthropic, counts
// the object does not give keep their value in prev (message_delta gives
// output_tokens, and in newer API versions the input counts again).
func usageObject(f Format, u []byte, prev usage.Tokens) (usage.Tokens, bool) {
	switch f {
	case FormatResponses:
		return openAIShape(u, prev, "input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details")
	case FormatAnthropic:
		v := jsonfield.Lookup(u, "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
		in, okIn := intValue(v[0])
		out, okOut := intValue(v[1])
		read, okRead := intValue(v[2])
		write, okWrite := intValue(v[3])
		if !okIn && !okOut && !okRead && !okWrite {
			return prev, false
		}
		t := prev
		if okIn {
			t.Input = max(in, 0)
		}
		if okOut {
			t.Output = max(out, 0)
		}
		if okRead {
			t.CachedInput = max(read, 0)
		}
		if okWrite {
			t.CacheWrite = max(write, 0)
		}
		return t, true
	}
	return openAIShape(u, prev, "prompt_tokens", "prompt_tokens_details", "completion_tokens", "completion_tokens_details")
}

// openAIShape reads a usage object shaped as OpenAI's (chat completions
// name its fields prompt_/completion_tokens, the Responses API input_/
// output_tokens): the input and output counts, the cached_tokens of the
// input's details and the reasoning_tokens of the output's. It is prev,
// false when neither count is there.
func openAIShape(u []byte, prev usage.Tokens, inKey, inDetails, outKey, outDetails string) (usage.Tokens, bool) {
	v := jsonfield.Lookup(u, inKey, outKey, inDetails, outDetails)
	in, okIn := intValue(v[0])
	out, okOut := intValue(v[1])
	if !okIn && !okOut {
		return prev, false
	}
	var cached, reasoning int64
	if isObject(v[2]) {
		cached, _ = intField(v[2], "cached_tokens")
	}
	if isObject(v[3]) {
		reasoning, _ = intField(v[3], "reasoning_tokens")
	}
	return usage.OpenAIUsage(in, cached, out, reasoning), true
}

var (
	usageKey          = quoted(`"usage"`, 1)
	messageStartValue = quoted(`"message_start"`, 8)
	emptyChoicesJSON  = []byte("[]")
)

// EventUsage reads the token usage one stream event in format f reports
// and merges it into t: OpenAI's usage chunk (stream_options.include_usage;
// some providers put usage on their last content chunk), Anthropic's
// message_start (input side) and message_delta (output, cumulative), the
// Responses API's response.completed and response.incomplete (the
// response, its usage inside). ok reports that the event carried usage.
// usageOnly is true for an OpenAI chunk that carries usage and no choices
// (the chunk include_usage adds).
func EventUsage(f Format, name, data []byte, t *usage.Tokens) (ok, usageOnly bool) {
	i := usageKey.index(data)
	if i < 0 || nullAfterKey(data[i+len(usageKey.pat):]) {
		return false, false // most chunks: no usage, or "usage":null
	}
	obj := data // the object whose usage field it is
	switch {
	case f == FormatOpenAI:
		// One walk for both fields: the usage, and whether the chunk has
		// choices.
		v := jsonfield.Lookup(data, "usage", "choices")
		if !isObject(v[0]) {
			return false, false
		}
		if *t, ok = usageObject(f, v[0], *t); !ok {
			return false, false
		}
		return true, v[1] == nil || bytes.Equal(bytes.TrimSpace(v[1]), emptyChoicesJSON)
	case f == FormatResponses:
		if obj, ok = object(data, "response"); !ok {
			return false, false
		}
	case f == FormatAnthropic && (string(name) == "message_start" || len(name) == 0 && messageStartValue.in(data)):
		if obj, ok = object(data, "message"); !ok {
			return false, false
		}
	}
	u, found := object(obj, "usage")
	if !found {
		return false, false
	}
	*t, ok = usageObject(f, u, *t)
	return ok, false
}

// nullAfterKey reports whether rest (what follows a key) is `: null`.
func nullAfterKey(rest []byte) bool {
	i := 0
	for i < len(rest) && (rest[i] == ' ' || rest[i] == ':') {
		i++
	}
	return bytes.HasPrefix(rest[i:], []byte("null"))
}

// intField reads the integer top-level field key of the JSON object obj
// (a whole number written as a float, 12.0, is read too).
func intField(obj []byte, key string) (int64, bool) {
	v, _, _, _ := jsonfield.Find(obj, key)
	return intValue(v)
}

// intValue reads a raw JSON value as an integer, as intField does (nil:
// absent).
func intValue(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var n int64
	i, neg := 0, v[0] == '-'
	if neg {
		i = 1
	}
	digits := 0
	for ; i < len(v) && v[i] >= '0' && v[i] <= '9' && digits < 18; i++ {
		n = n*10 + int64(v[i]-'0')
		digits++
	}
	if digits == 0 {
		return 0, false
	}
	if i < len(v) {
		fl, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return 0, false
		}
		return int64(fl), true
	}
	if neg {
		n = -n
	}
	return n, true
}
