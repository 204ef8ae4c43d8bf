package routingdoc

import (
	"slices"
	"strings"
	"testing"
)

// TestKeepRuntimeFields: a re-imported file without the health check's
// path and method keeps the active version's; a document that sets them
// wins; other providers and fields are untouched.
func TestKeepRuntimeFields(t *testing.T) {
	active := []byte(`providers:
  - name: openai
    type: openai
    health_check: {path: /v1/models, method: GET, interval: 30s}
  - name: vllm
    type: vllm
    health_check:
      path: /health
`)
	file := []byte(`providers:
  - name: openai # from the file
    type: openai
  - name: vllm
    type: vllm
    health_check:
      path: /ready
  - name: new
    type: groq
`)
	out, kept, err := KeepRuntimeFields(active, file)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(kept, []string{"providers.openai.health_check.path", "providers.openai.health_check.method"}) {
		t.Errorf("kept %v", kept)
	}
	s := string(out)
	for _, want := range []string{"path: /v1/models", "method: GET", "path: /ready", "# from the file", "name: new"} {
		if !strings.Contains(s, want) {
			t.Errorf("document lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "/health") || strings.Contains(s, "interval") {
		t.Errorf("kept more than the runtime fields, or overrode the document:\n%s", s)
	}
	if same, kept, _ := KeepRuntimeFields(active, out); string(same) != s || len(kept) != 0 {
		t.Errorf("a document with the fields changed again: %v", kept)
	}
}
