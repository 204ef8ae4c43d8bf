package route

import (
	"bytes"
	"strconv"

	"switchyard.dev/shared/jsonfield"
)

// Needs reads what a chat request body asks of a model: tools, images or
// documents (vision), audio, a response schema, reasoning; and the output
// it allows (max_completion_tokens or max_tokens; 0 when unset). It reads
// both the OpenAI chat and the Anthropic messages shapes, without
// allocating: part types are found as keys of the raw JSON (a "type" inside
// a string is escaped, so every unescaped "type" followed by a colon is a
// key).
func Needs(body []byte) (needs Caps, maxOutput int64) {
	if v, _, _, ok := jsonfield.Find(body, "tools"); ok && nonEmptyArray(v) {
		needs |= CapTools
	} else if v, _, _, ok := jsonfield.Find(body, "functions"); ok && nonEmptyArray(v) {
		needs |= CapTools
	}
	for _, key := range [...]string{"response_format", "output_format"} {
		if v, _, _, ok := jsonfield.Find(body, key); ok {
			if t, _ := jsonfield.String(v, "type"); t == "json_schema" {
				needs |= CapJSONSchema
			}
		}
	}
	if _, _, _, ok := jsonfield.Find(body, "reasoning_effort"); ok {
		needs |= CapReasoning
	} else if v, _, _, ok := jsonfield.Find(body, "reasoning"); ok && len(v) > 0 && v[0] == '{' {
		needs |= CapReasoning
	} else if v, _, _, ok := jsonfield.Find(body, "thinking"); ok {
		if t, _ := jsonfield.String(v, "type"); t == "enabled" || t == "adaptive" {
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

var typeKey = []byte(`"type"`)

// partNeeds scans messages for content part types that need a capability.
func partNeeds(msgs []byte) Caps {
	var c Caps
	for i := 0; ; {
		j := bytes.Index(msgs[i:], typeKey)
		if j < 0 {
			return c
		}
		i += j + len(typeKey)
		k := skipSpace(msgs, i)
		if k >= len(msgs) || msgs[k] != ':' {
			continue
		}
		k = skipSpace(msgs, k+1)
		if k >= len(msgs) || msgs[k] != '"' {
			continue
		}
		end := bytes.IndexByte(msgs[k+1:], '"')
		if end < 0 {
			return c
		}
		switch string(msgs[k+1 : k+1+end]) {
		case "image_url", "image", "input_image", "document", "file":
			c |= CapVision
		case "input_audio", "audio":
			c |= CapAudio
		}
		i = k + 1 + end
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
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
