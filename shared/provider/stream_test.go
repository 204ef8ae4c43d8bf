package provider

import (
	"bytes"
	"testing"
)

// A needle finds what bytes.Index finds, wherever its search starts.
func FuzzNeedleIndex(f *testing.F) {
	needles := []needle{finishReasonField, errorField, typeError, roleAssistant, emptyContent, nullContent,
		contentField, promptFilter, typeText, usageKey, messageStartValue}
	f.Add([]byte(`{"id":"c","choices":[{"delta":{"content":"tok"},"finish_reason":null}]}`))
	f.Add([]byte(`{"error":{"type":"error","message":"rror\"e"}}`))
	f.Add([]byte(`"e"rror" ""error"  "usage":{"prompt_tokens":1} "role":"assistant","content":""`))
	f.Add([]byte(`rror"rror"_reason"finish_reason"`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, n := range needles {
			if got, want := n.index(data), bytes.Index(data, n.pat); got != want {
				t.Fatalf("%q in %q: %d, want %d", n.pat, data, got, want)
			}
		}
	})
}
