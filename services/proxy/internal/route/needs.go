package route

import (
	"bytes"
	"strconv"

	"switchyard.dev/shared/jsonfield"
)

// Needs reads what a chat request body asks of a model: tools, images or
// documents (vision), audio, a response schema, reasoning; and the output
// it allows (max_completion_tokens or max_tokens; 0 when unset). It reads
// both the OpenAI chat and the Anthropic messages shapes (content parts of
// each message, and of Anthropic tool results), without allocating.
func Needs(body []byte) (needs Caps, maxOutput int64) {
	if v, _, _, ok := jsonfield.Find(body, "tools"); ok && nonEmptyArray(v) {
		needs |= CapTools
	} else if v, _, _, ok := jsonfield.Find(body, "functions"); ok && nonEmptyArray(v) {
		needs |= CapTools
	}
	for _, key := range [...]string{"response_format", "output_format"} {
		if v, _, _, ok := jsonfield.Find(body, key); ok {
			if typeIs(v, `"json_schema"`) {
				needs |= CapJSONSchema
			}
		}
	}
	if _, _, _, ok := jsonfield.Find(body, "reasoning_effort"); ok {
		needs |= CapReasoning
	} else if v, _, _, ok := jsonfield.Find(body, "reasoning"); ok && len(v) > 0 && v[0] == '{' {
		needs |= CapReasoning
	} else if v, _, _, ok := jsonfield.Find(body, "thinking"); ok {
		if typeIs(v, `"enabled"`) || typeIs(v, `"adaptive"`) {
			needs |= CapReasoning
		}
	}
	if v, _, _, ok := jsonfield.Find(body, "modalities"); ok && bytes.Contains(v, []byte(`"audio"`)) {
		needs |= CapAudio
	}
	if v, _, _, ok := jsonfield.Find(body, "messages"); ok {
		needs |= partNeeds(v)
	}
	for _, key := range [...]string{"max_completion_tokens", "max_tokens", "max_output_tokens"} {
		if v, _, _, ok := jsonfield.Find(body, key); ok {
			if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n > 0 {
				return needs, n
			}
		}
	}
	return needs, 0
}

// typeIs reports whether the object obj's "type" is the JSON string want
// (quoted, as written: types are plain ASCII).
func typeIs(obj []byte, want string) bool {
	t, _, _, ok := jsonfield.Find(obj, "type")
	return ok && string(t) == want
}

// partNeeds reads the content part types of messages: an array of
// messages whose content is a string or an array of parts (an Anthropic
// tool_result part carries parts of its own).
func partNeeds(msgs []byte) Caps {
	var c Caps
	jsonfield.Each(msgs, func(msg []byte) {
		content, _, _, ok := jsonfield.Find(msg, "content")
		if !ok {
			return
		}
		jsonfield.Each(content, func(part []byte) {
			c |= partCaps(part)
			if typeIs(part, `"tool_result"`) {
				if inner, _, _, ok := jsonfield.Find(part, "content"); ok {
					jsonfield.Each(inner, func(p []byte) { c |= partCaps(p) })
				}
			}
		})
	})
	return c
}

// partCaps is what one content part needs.
func partCaps(part []byte) Caps {
	t, _, _, ok := jsonfield.Find(part, "type")
	if !ok {
		return 0
	}
	switch string(t) {
	case `"image_url"`, `"image"`, `"input_image"`, `"document"`, `"file"`, `"input_file"`:
		return CapVision
	case `"input_audio"`, `"audio"`:
		return CapAudio
	}
	return 0
}

func nonEmptyArray(v []byte) bool {
	if len(v) < 2 || v[0] != '[' {
		return false
	}
	return len(bytes.TrimSpace(v[1:len(v)-1])) > 0
}

// Hash is a stable 64-bit hash of s (FNV-1a, then mixed), the same in
// every process, so that every proxy sends a conversation to the same
// target.
func Hash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
