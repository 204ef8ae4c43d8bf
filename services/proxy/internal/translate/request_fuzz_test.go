package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"switchyard.dev/shared/testkit"
)

// FuzzTranslateRequest feeds arbitrary bodies to both request
// translations (OpenAI chat to Anthropic messages and back) and checks
// that neither panics, that a failure is one the package documents (an
// *UnsupportedError, or an error wrapping ErrMalformed), and that a
// translation is one JSON object (without duplicate keys when the body had
// none) with exactly one "model", the upstream model, the caller's stream
// flag, and the fields its format requires.
// Under plain go test only the seeds run.
func FuzzTranslateRequest(f *testing.F) {
	for _, dir := range []string{"chat_to_messages", "messages_to_chat"} {
		paths, _ := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
		for _, p := range paths {
			if strings.Contains(p, ".golden.") {
				continue
			}
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]}]}`,
		`{"model":"m","model":"n","messages":[]}`,
		`{"model":"m","system":[{"type":"text","text":"s"}],"max_tokens":1,"stop_sequences":["x"],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"42"}]}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"1"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"required"}`,
		`{"messages":[{"role":"user","content":"hi"}],"stop":"x","max_completion_tokens":-1,"stream":"yes"}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:"}}]}]}`,
		`{"messages":null}`,
		`[]`,
		`{"messages":[{"role":"user","content":"\ud800"}],"max_tokens":1e400}`,
	} {
		f.Add([]byte(s))
	}
	const upstream = "upstream-model"
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, tc := range []struct {
			name      string
			translate func([]byte, string) ([]byte, error)
			required  []string // top-level members the output must have
		}{
			{"ChatToMessages", ChatToMessages, []string{"model", "max_tokens", "messages"}},
			{"MessagesToChat", MessagesToChat, []string{"model", "messages"}},
		} {
			out, err := tc.translate(body, upstream)
			if err != nil {
				var ue *UnsupportedError
				if !errors.As(err, &ue) && !errors.Is(err, ErrMalformed) {
					t.Errorf("%s: an error the package does not document (%T): %v\n%s", tc.name, err, err, body)
				}
				continue
			}
			if !json.Valid(out) {
				t.Fatalf("%s: output is not JSON: %s\nfrom %s", tc.name, out, body)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatalf("%s: output is not a JSON object: %s\nfrom %s", tc.name, out, body)
			}
			// The proxy refuses bodies with duplicate keys before any
			// translation; from one without, none may come out.
			if err := testkit.StrictJSON(out); err != nil && testkit.StrictJSON(body) == nil {
				t.Fatalf("%s: %v in %s\nfrom %s", tc.name, err, out, body)
			}
			var model string
			if err := json.Unmarshal(m["model"], &model); err != nil || model != upstream {
				t.Fatalf("%s: model %s, want %q: %s", tc.name, m["model"], upstream, out)
			}
			for _, k := range tc.required {
				if _, ok := m[k]; !ok {
					t.Fatalf("%s: no %q in %s\nfrom %s", tc.name, k, out, body)
				}
			}
			if string(m["messages"]) == "null" || !bytes.HasPrefix(bytes.TrimSpace(m["messages"]), []byte("[")) {
				t.Fatalf("%s: messages is not an array: %s", tc.name, out)
			}
			var in struct {
				Stream *bool `json:"stream"`
			}
			_ = json.Unmarshal(body, &in)
			var got struct {
				Stream *bool `json:"stream"`
			}
			_ = json.Unmarshal(out, &got)
			if (in.Stream != nil && *in.Stream) != (got.Stream != nil && *got.Stream) {
				t.Fatalf("%s: stream %v became %v: %s\nfrom %s", tc.name, in.Stream, got.Stream, out, body)
			}
		}
	})
}
