package jsonfield

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestFindAndString(t *testing.T) {
	obj := []byte(` { "messages": [{"role":"user","content":"the \"model\": x"}], "model" : "gpt-4.1", "stream":true, "n": {"model":"inner"} }`)
	if m, ok := String(obj, "model"); !ok || m != "gpt-4.1" {
		t.Fatalf("model = %q, %v", m, ok)
	}
	if !Bool(obj, "stream") {
		t.Error("stream not true")
	}
	if Bool(obj, "absent") {
		t.Error("absent is true")
	}
	if _, _, _, ok := Find(obj, "inner"); ok {
		t.Error("found a nested key at top level")
	}
	if m, ok := String([]byte(`{"model":"a\"b\u0063"}`), "model"); !ok || m != `a"bc` {
		t.Errorf("escaped string: %q, %v", m, ok)
	}
	if m, ok := String([]byte(`{"mod\u0065l":"x"}`), "model"); !ok || m != "x" {
		t.Errorf("escaped key: %q, %v", m, ok)
	}
	for _, bad := range []string{``, `[]`, `{"model"`, `{"model":`, `{"a":"unterminated}`, `{1:2}`} {
		if _, _, _, ok := Find([]byte(bad), "model"); ok {
			t.Errorf("Find(%q) ok", bad)
		}
	}
}

func TestSetString(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"replace", `{"model":"a","x":1}`, `{"model":"gpt-4o","x":1}`},
		{"insert", `{"x":1}`, `{"model":"gpt-4o","x":1}`},
		{"insert empty", `{ }`, `{"model":"gpt-4o" }`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(SetString(nil, []byte(tt.in), "model", "gpt-4o"))
			if got != tt.want {
				t.Errorf("got %s want %s", got, tt.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("invalid JSON %s", got)
			}
		})
	}
	got := SetString(nil, []byte(`{"model":"a"}`), "model", "q\"\\\n")
	var v struct{ Model string }
	if err := json.Unmarshal(got, &v); err != nil || v.Model != "q\"\\\n" {
		t.Errorf("escaping: %s %v %q", got, err, v.Model)
	}
}

func TestDelete(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"first", `{"a":1,"b":2}`, `{"b":2}`},
		{"last", `{"b":2, "a":{"x":[1]}}`, `{"b":2}`},
		{"only", `{"a":1}`, `{}`},
		{"absent", `{"b":2}`, `{"b":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(Delete(nil, []byte(tt.in), "a")); got != tt.want {
				t.Errorf("got %s want %s", got, tt.want)
			}
		})
	}
}

func FuzzFind(f *testing.F) {
	f.Add([]byte(`{"model":"x","stream":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, s, e, ok := Find(b, "model")
		if ok && string(b[s:e]) != string(v) {
			t.Fatal("span mismatch")
		}
		_ = SetString(nil, b, "model", "m")
		_ = Delete(nil, b, "model")
	})
}

func BenchmarkString(b *testing.B) {
	obj := []byte(`{"messages":[{"role":"user","content":"hello there, how are you?"}],"model":"demo-chat","stream":false}`)
	b.ReportAllocs()
	for b.Loop() {
		String(obj, "model")
	}
}

func TestSetRaw(t *testing.T) {
	tests := []struct{ obj, key, raw, want string }{
		{`{"a":1,"b":{"x":1}}`, "b", `{"y":2}`, `{"a":1,"b":{"y":2}}`},
		{`{"a":1}`, "b", `true`, `{"b":true,"a":1}`},
		{` { } `, "b", `null`, ` {"b":null } `},
	}
	for _, tt := range tests {
		if got := string(SetRaw(nil, []byte(tt.obj), tt.key, []byte(tt.raw))); got != tt.want {
			t.Errorf("SetRaw(%s, %s, %s) = %s, want %s", tt.obj, tt.key, tt.raw, got, tt.want)
		}
	}
}

func BenchmarkSetString(b *testing.B) {
	obj := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"stream":true}`)
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		dst = SetString(dst[:0], obj, "model", "gpt-4o-2024-08-06")
	}
}

func TestEach(t *testing.T) {
	tests := []struct {
		in    string
		want  []string
		array bool
	}{
		{`[]`, nil, true},
		{` [ 1 , "a,b" , {"x":[1,2]} , [3] , null ] `, []string{`1`, `"a,b"`, `{"x":[1,2]}`, `[3]`, `null`}, true},
		{`["]\"["]`, []string{`"]\"["`}, true},
		{`{"a":1}`, nil, false},
		{`[1,`, []string{`1`}, false},
		{``, nil, false},
	}
	for _, tt := range tests {
		var got []string
		array := Each([]byte(tt.in), func(e []byte) { got = append(got, string(e)) })
		if array != tt.array || !slices.Equal(got, tt.want) {
			t.Errorf("Each(%s) = %q, %v; want %q, %v", tt.in, got, array, tt.want, tt.array)
		}
	}
	body := []byte(`[{"type":"text"},{"type":"image_url"}]`)
	if n := testing.AllocsPerRun(100, func() {
		c := 0
		Each(body, func([]byte) { c++ })
	}); n != 0 {
		t.Fatalf("Each allocates %v times", n)
	}
}
