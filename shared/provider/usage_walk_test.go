package provider

import (
	"bytes"
	"testing"

	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/usage"
)

// The usage readers walk each object once (jsonfield.Lookup); they read what the
// field-by-field lookups read (the oracle below, as they were).
func FuzzUsageOneWalk(f *testing.F) {
	for _, seed := range []string{
		`{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":1},"completion_tokens_details":{"reasoning_tokens":2}}}`,
		`{"id":"c","choices":[{"delta":{}}],"usage":{"prompt_tokens":3,"completion_tokens":5}}`,
		`{"usage":null,"choices":[]}`,
		`{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}`,
		`{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":4,"output_tokens":1}}}`,
		`{"type":"message_delta","usage":{"output_tokens":15}}`,
		`{"type":"response.completed","response":{"usage":{"input_tokens":5,"output_tokens":7,"input_tokens_details":{"cached_tokens":2},"output_tokens_details":{"reasoning_tokens":3}}}}`,
		`{"u\u0073age":{"prompt_tokens":12.0,"completion_tokens":-1}}`,
		`{"usage":{"prompt_tokens":"3","completion_tokens":1e3}`,
	} {
		f.Add([]byte(seed), byte(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, fb byte) {
		fm := Format(int(fb) % 3)
		for _, name := range [][]byte{nil, []byte("message_start"), []byte("message_delta")} {
			prev := usage.Tokens{Input: 1, Output: 2, CachedInput: 3}
			a, b := prev, prev
			ok1, only1 := EventUsage(fm, name, data, &a)
			ok2, only2 := EventUsageOld(fm, name, data, &b)
			if ok1 != ok2 || only1 != only2 || a != b {
				t.Fatalf("EventUsage(%d, %q, %q) = %v %v %+v, was %v %v %+v", fm, name, data, ok1, only1, a, ok2, only2, b)
			}
		}
		t1, ok1 := responseUsage(fm, data)
		t2, ok2 := ResponseUsageOld(fm, data)
		if ok1 != ok2 || t1 != t2 {
			t.Fatalf("ResponseUsage(%d, %q) = %+v %v, was %+v %v", fm, data, t1, ok1, t2, ok2)
		}
	})
}

func EventUsageOld(f Format, name, data []byte, t *usage.Tokens) (ok, usageOnly bool) {
	i := usageKey.index(data)
	if i < 0 || nullAfterKey(data[i+len(usageKey.pat):]) {
		return false, false // most chunks: no usage, or "usage":null
	}
	obj := data // the object whose usage field it is
	switch {
	case f == FormatResponses:
		if obj, ok = object(data, "response"); !ok {
			return false, false
		}
	case f == FormatAnthropic && (string(name) == "message_start" || name == nil && messageStartValue.in(data)):
		if obj, ok = object(data, "message"); !ok {
			return false, false
		}
	}
	u, found := object(obj, "usage")
	if !found {
		return false, false
	}
	if *t, ok = usageObjectOld(f, u, *t); !ok || f != FormatOpenAI {
		return ok, false
	}
	c, _, _, found := jsonfield.Find(data, "choices")
	return true, found && bytes.Equal(bytes.TrimSpace(c), emptyChoicesJSON) || !found
}

func usageObjectOld(f Format, u []byte, prev usage.Tokens) (usage.Tokens, bool) {
	switch f {
	case FormatResponses:
		return openAIShapeOld(u, prev, "input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details")
	case FormatAnthropic:
		in, okIn := intField(u, "input_tokens")
		out, okOut := intField(u, "output_tokens")
		read, okRead := intField(u, "cache_read_input_tokens")
		write, okWrite := intField(u, "cache_creation_input_tokens")
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
	return openAIShapeOld(u, prev, "prompt_tokens", "prompt_tokens_details", "completion_tokens", "completion_tokens_details")
}

func openAIShapeOld(u []byte, prev usage.Tokens, inKey, inDetails, outKey, outDetails string) (usage.Tokens, bool) {
	in, okIn := intField(u, inKey)
	out, okOut := intField(u, outKey)
	if !okIn && !okOut {
		return prev, false
	}
	var cached, reasoning int64
	if d, ok := object(u, inDetails); ok {
		cached, _ = intField(d, "cached_tokens")
	}
	if d, ok := object(u, outDetails); ok {
		reasoning, _ = intField(d, "reasoning_tokens")
	}
	return usage.OpenAIUsage(in, cached, out, reasoning), true
}

func ResponseUsageOld(f Format, body []byte) (t usage.Tokens, ok bool) {
	u, found := object(body, "usage")
	if !found {
		return usage.Tokens{}, false
	}
	return usageObjectOld(f, u, usage.Tokens{})
}
