package jsonfield

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCheckKeys(t *testing.T) {
	many := func(n int, extra string) string {
		var b strings.Builder
		b.WriteString(`{"model":"m"`)
		for i := range n {
			fmt.Fprintf(&b, `,"k%d":%d`, i, i)
		}
		b.WriteString(extra + "}")
		return b.String()
	}
	tests := []struct {
		name string
		in   string
		dup  string // "" when the body is unambiguous
	}{
		{"plain", `{"model":"a","stream":true,"messages":[{"role":"user","content":"hi"}]}`, ""},
		{"same key in sibling objects", `{"messages":[{"role":"a"},{"role":"b"}],"role":"x"}`, ""},
		{"same key nested and top", `{"model":"a","metadata":{"model":"b"}}`, ""},
		{"top-level duplicate", `{"model":"gmodel","model":"gpt-4.5-preview"}`, "model"},
		{"escaped duplicate", `{"model":"gmodel","mod\u0065l":"gpt-4.5-preview"}`, "model"},
		{"escaped first", `{"str\u0065am":false,"stream":true}`, "stream"},
		{"case variant at top", `{"model":"a","Model":"b"}`, "Model"},
		{"case variant of a read field", `{"MODEL":"b"}`, "MODEL"},
		{"unicode fold of a read field", `{"model":"a","ſtream":true}`, "ſtream"},
		{"nested duplicate", `{"model":"a","stream_options":{"include_usage":true,"include_usage":false}}`, "include_usage"},
		{"duplicate in array element", `{"messages":[{"role":"user","role":"system"}]}`, "role"},
		{"case variants nested are distinct", `{"tools":[{"parameters":{"properties":{"id":{},"ID":{}}}}]}`, ""},
		{"strings that look like keys", `{"a":"\"b\":1","b":"x"}`, ""},
		{"large object unique", many(200, ""), ""},
		{"large object duplicate", many(200, `,"k150":0`), "k150"},
		{"large object fold duplicate", many(200, `,"K150":0`), "K150"},
		{"large object read field", many(200, `,"Stream":0`), "Stream"},
		{"array top", `[{"a":1,"a":2}]`, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !json.Valid([]byte(tt.in)) {
				t.Fatalf("test body is not valid JSON: %s", tt.in)
			}
			err := CheckKeys([]byte(tt.in), "model", "stream", "stream_options")
			var de *DuplicateKeyError
			switch {
			case tt.dup == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.dup != "" && !errors.As(err, &de):
				t.Fatalf("no duplicate reported (err %v)", err)
			case tt.dup != "" && de.Key != tt.dup:
				t.Fatalf("reported %q, want %q", de.Key, tt.dup)
			}
		})
	}
}

func TestFindUnescapesKeys(t *testing.T) {
	obj := []byte(`{"str\u0065am":true,"model":"x"}`)
	if !Bool(obj, "stream") {
		t.Error("escaped stream key not found")
	}
	got := string(SetString(nil, []byte(`{"mod\u0065l":"a"}`), "model", "b"))
	if got != `{"mod\u0065l":"b"}` {
		t.Errorf("SetString on an escaped key: %s", got)
	}
}

func BenchmarkCheckKeys(b *testing.B) {
	body := []byte(`{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"temperature":0.2,` +
		`"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"` + strings.Repeat("hello world ", 100) + `"}]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := CheckKeys(body, "model", "stream", "stream_options"); err != nil {
			b.Fatal(err)
		}
	}
}
