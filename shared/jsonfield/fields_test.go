package jsonfield

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestFields(t *testing.T) {
	tests := []struct {
		in     string
		keys   []string // raw, as written
		values []string
		object bool
	}{
		{`{}`, nil, nil, true},
		{" \t\r\n{ \"a\" :\n1 , \"b\":\"x,}\\\"y\" }\n", []string{"a", "b"}, []string{`1`, `"x,}\"y"`}, true},
		{`{"mod\u0065l":"m","n":{"model":"inner","a":[1,{"b":"]"}]},"s":[{"x":"}"}],"t":true,"u":null,"v":-1.5e3}`,
			[]string{`mod\u0065l`, "n", "s", "t", "u", "v"},
			[]string{`"m"`, `{"model":"inner","a":[1,{"b":"]"}]}`, `[{"x":"}"}]`, `true`, `null`, `-1.5e3`}, true},
		{`{"a":1,"a":2}`, []string{"a", "a"}, []string{"1", "2"}, true},
		{`{"k\"q":1}`, []string{`k\"q`}, []string{"1"}, true},
		// Not objects, or broken off: the fields before the fault, false.
		{``, nil, nil, false},
		{`   `, nil, nil, false},
		{`[{"a":1}]`, nil, nil, false},
		{`"a"`, nil, nil, false},
		{`{`, nil, nil, false},
		{`{"a":1`, []string{"a"}, []string{"1"}, false},
		{`{"a":1,"b"`, []string{"a"}, []string{"1"}, false},
		{`{"a":1,"b":`, []string{"a"}, []string{"1"}, false},
		{`{"a":"unterminated}`, nil, nil, false},
		{`{"a":[1,2}`, []string{"a"}, []string{"[1,2}"}, false}, // brackets are only counted (as Find does)
		{`{1:2}`, nil, nil, false},
		{`{"a":1,2}`, []string{"a"}, []string{"1"}, false},
	}
	for _, tt := range tests {
		var keys, values []string
		object := Fields([]byte(tt.in), func(k, v []byte) bool {
			keys, values = append(keys, string(k)), append(values, string(v))
			return true
		})
		if object != tt.object || !slices.Equal(keys, tt.keys) || !slices.Equal(values, tt.values) {
			t.Errorf("Fields(%s) = %q %q %v; want %q %q %v", tt.in, keys, values, object, tt.keys, tt.values, tt.object)
		}
	}

	// fn stops the walk.
	n := 0
	if !Fields([]byte(`{"a":1,"b":2,"c":3}`), func(k, v []byte) bool { n++; return string(k) != "b" }) || n != 2 {
		t.Errorf("stopping: %d calls", n)
	}
	body := []byte(`{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	if a := testing.AllocsPerRun(100, func() {
		c := 0
		Fields(body, func(k, v []byte) bool { c += len(k) + len(v); return true })
	}); a != 0 {
		t.Fatalf("Fields allocates %v times", a)
	}
}

func TestKeyAndStringValue(t *testing.T) {
	if !keyIs([]byte(`mod\u0065l`), "model") || !keyIs([]byte("model"), "model") || keyIs([]byte("Model"), "model") {
		t.Error("KeyIs")
	}
	if k := canonical([]byte(`a\"b\u0063`)); string(k) != `a"bc` {
		t.Errorf("Key = %q", k)
	}
	if k := canonical([]byte(`bad\x`)); string(k) != `bad\x` {
		t.Errorf("Key of a bad escape = %q (want it raw, as Strict compares it)", k)
	}
	for _, tt := range []struct {
		v, want string
		ok      bool
	}{
		{`"gpt"`, "gpt", true},
		{`"a\"b\u0063\n"`, "a\"bc\n", true},
		{`""`, "", true},
		{`1`, "", false},
		{`"`, "", false},
		{``, "", false},
		{`null`, "", false},
	} {
		if s, ok := StringValue([]byte(tt.v)); s != tt.want || ok != tt.ok {
			t.Errorf("StringValue(%s) = %q, %v; want %q, %v", tt.v, s, ok, tt.want, tt.ok)
		}
	}
}

// streamBodyOld is the upstream body of an OpenAI stream as the proxy built
// it before Rewrite: stream_options.include_usage set (three walks, two
// copies), then the model renamed (a walk and a copy).
func streamBodyOld(body []byte, usage bool, model string) []byte {
	if usage {
		so, _, _, ok := Find(body, "stream_options")
		if !ok || len(so) == 0 || so[0] != '{' {
			so = []byte("{}")
		}
		opts := SetRaw(make([]byte, 0, len(so)+24), so, "include_usage", []byte("true"))
		body = SetRaw(make([]byte, 0, len(body)+len(opts)+20), body, "stream_options", opts)
	}
	if model != "" {
		body = SetString(make([]byte, 0, len(body)+len(model)), body, "model", model)
	}
	return body
}

var usageEdit = EditMember("stream_options", "include_usage", []byte("true"))

func streamBodyNew(body []byte, usage bool, model string) []byte {
	var buf [2]Edit
	edits := buf[:0]
	if usage {
		edits = append(edits, usageEdit)
	}
	if model != "" {
		edits = append(edits, EditString("model", model))
	}
	if len(edits) == 0 {
		return body
	}
	return Rewrite(make([]byte, 0, len(body)+len(model)+40), body, edits...)
}

func TestRewrite(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"model":"a","stream":true,"messages":[]}`, `{"stream_options":{"include_usage":true},"model":"up","stream":true,"messages":[]}`},
		{`{"model":"a","stream_options":{"include_usage":false},"messages":[]}`, `{"model":"up","stream_options":{"include_usage":true},"messages":[]}`},
		{`{"stream_options":{"x":1} , "model" : "a" }`, `{"stream_options":{"include_usage":true,"x":1} , "model" : "up" }`},
		{`{"stream_options":{ },"model":"a"}`, `{"stream_options":{"include_usage":true },"model":"up"}`},
		{`{"stream_options":null,"model":"a"}`, `{"stream_options":{"include_usage":true},"model":"up"}`},
		{`{"mod\u0065l":"a"}`, `{"stream_options":{"include_usage":true},"mod\u0065l":"up"}`},
		{`{"model":"a","model":"b"}`, `{"stream_options":{"include_usage":true},"model":"up","model":"b"}`},
		{` { } `, ` {"model":"up","stream_options":{"include_usage":true} } `},
		{`{"x":1}`, `{"model":"up","stream_options":{"include_usage":true},"x":1}`},
		{`[1]`, `[1]`},
		{``, ``},
		{`{"x":1,`, `{"model":"up","stream_options":{"include_usage":true},"x":1,`},
		{`{"model":"a","x":[1,}`, `{"stream_options":{"include_usage":true},"model":"up","x":[1,}`},
	}
	for _, tt := range tests {
		got := string(streamBodyNew([]byte(tt.in), true, "up"))
		if got != tt.want {
			t.Errorf("Rewrite(%s) = %s, want %s", tt.in, got, tt.want)
		}
		if old := string(streamBodyOld([]byte(tt.in), true, "up")); got != old {
			t.Errorf("Rewrite(%s) = %s, the old way %s", tt.in, got, old)
		}
		if json.Valid([]byte(tt.in)) && !json.Valid([]byte(got)) {
			t.Errorf("Rewrite(%s) = %s: not JSON", tt.in, got)
		}
	}
	if got := string(Rewrite(nil, []byte(`{"a":1,"b":2}`), EditRaw("b", []byte(`[3]`)), EditRaw("a", []byte(`"x"`)))); got != `{"a":"x","b":[3]}` {
		t.Errorf("edits out of order: %s", got)
	}
	if got := string(Rewrite([]byte("prefix:"), []byte(`{"a":1}`), EditString("s", "q\"\n"))); got != `prefix:{"s":"q\"\u000a","a":1}` {
		t.Errorf("appended to dst: %s", got)
	}
	// More edits than one pass takes: the same as one at a time.
	var many []Edit
	want := []byte(`{"k3":0}`)
	for _, k := range []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"} {
		many = append(many, EditString(k, k))
		want = SetString(nil, want, k, k)
	}
	if got := Rewrite(nil, []byte(`{"k3":0}`), many...); string(got) != string(want) {
		t.Errorf("many edits: %s, want %s", got, want)
	}
	body := []byte(`{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	dst := make([]byte, 0, 256)
	if a := testing.AllocsPerRun(100, func() {
		dst = Rewrite(dst[:0], body, EditMember("stream_options", "include_usage", []byte("true")), EditString("model", "up"))
	}); a != 0 {
		t.Fatalf("Rewrite allocates %v times", a)
	}
}

// fieldsFirst is what Fields reads of keys: each one's first value.
func fieldsFirst(b []byte, keys []string) (vals [][]byte, found []bool) {
	vals, found = make([][]byte, len(keys)), make([]bool, len(keys))
	Fields(b, func(raw, v []byte) bool {
		for i, k := range keys {
			if !found[i] && keyIs(raw, k) {
				vals[i], found[i] = v, true
			}
		}
		return true
	})
	return vals, found
}

var fuzzSeeds = []string{
	`{"model":"gpt-4.1","messages":[{"role":"user","content":"hello"}],"stream":true}`,
	`{"model":"a","stream":true,"stream_options":{"include_usage":false},"messages":[]}`,
	`{"stream_options":{"x":1} , "model" : "a\"b\u0063" }`,
	`{"mod\u0065l":"m","model":"n","stream_options":null}`,
	` { } `,
	`{"model":"a","x":[1,}`,
	`{"a":1 "model":2,,"stream":3`,
	`[{"model":"a"}]`,
	`{"error":{"code":429},"choices":[],"id":"x","usage":{"prompt_tokens":1}}`,
	``,
}

// FuzzFields: one walk of Fields reads what Find, String and Bool read,
// key by key, on any input.
func FuzzFields(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	keys := []string{"model", "messages", "stream", "stream_options", "input", "prompt", "a", "x", "error"}
	f.Fuzz(func(t *testing.T, b []byte) {
		vals, found := fieldsFirst(b, keys)
		for i, k := range keys {
			v, s, e, ok := Find(b, k)
			if ok != found[i] || string(v) != string(vals[i]) {
				t.Fatalf("%q: Fields %q %v, Find %q %v", k, vals[i], found[i], v, ok)
			}
			if ok && string(b[s:e]) != string(v) {
				t.Fatalf("%q: span", k)
			}
			s1, ok1 := String(b, k)
			s2, ok2 := StringValue(vals[i])
			if s1 != s2 || ok1 != ok2 {
				t.Fatalf("%q: String %q %v, StringValue %q %v", k, s1, ok1, s2, ok2)
			}
			if found[i] && Bool(b, k) != (string(vals[i]) == "true") {
				t.Fatalf("%q: Bool", k)
			}
		}
		var m map[string]json.RawMessage
		if json.Valid(b) && json.Unmarshal(b, &m) == nil && m != nil {
			if !Fields(b, func(_, _ []byte) bool { return true }) {
				t.Fatal("Fields: a valid object is not one")
			}
		}
	})
}

// FuzzRewrite: the one-pass stream body (include_usage and the model in
// one walk and one copy) is byte for byte the old three-pass one, for the
// valid JSON the proxy rewrites (readBody validates first: on a broken
// body, replacing a value can move where the old way found the next key).
func FuzzRewrite(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), "upstream-model", true)
		f.Add([]byte(s), "", true)
		f.Add([]byte(s), "q\"\\\n", false)
	}
	f.Add([]byte(`{"stream_options":{"include_usage":x[}],"model":"a"}`), "up", true)
	f.Fuzz(func(t *testing.T, b []byte, model string, usage bool) {
		if !Valid(b) {
			return
		}
		got, want := streamBodyNew(b, usage, model), streamBodyOld(b, usage, model)
		if string(got) != string(want) {
			t.Fatalf("Rewrite %s\nold way %s", got, want)
		}
		// Raw edits of two keys the body may hold, in either order.
		e1, e2 := EditRaw("a", []byte(`[1]`)), EditString("x", model)
		got = Rewrite(nil, b, e1, e2)
		want = SetString(nil, SetRaw(nil, b, "a", []byte(`[1]`)), "x", model)
		if string(got) != string(want) {
			t.Fatalf("Rewrite(a, x) %s\none at a time %s", got, want)
		}
		got = Rewrite(nil, b, e2, e1)
		want = SetRaw(nil, SetString(nil, b, "x", model), "a", []byte(`[1]`))
		if string(got) != string(want) {
			t.Fatalf("Rewrite(x, a) %s\none at a time %s", got, want)
		}
		if len(b) > 0 && b[len(b)-1] == '}' && !json.Valid(got) {
			t.Fatalf("Rewrite of valid JSON %s is not: %s", b, got)
		}
	})
}

// BenchmarkStreamBody: the upstream body of an OpenAI stream whose model is
// renamed, the old way (SetRaw twice, SetString) and in one Rewrite.
func BenchmarkStreamBody(b *testing.B) {
	body := []byte(`{"model":"demo-chat","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"hello there, how are you?"}],"stream":true,"temperature":0.7}`)
	b.Run("old", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			streamBodyOld(body, true, "gpt-4o-2024-08-06")
		}
	})
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			streamBodyNew(body, true, "gpt-4o-2024-08-06")
		}
	})
}

// Lookup reads the first field of each name in one walk, as Find would;
// a key named twice fills both slots; absent keys and non-objects give nil.
func TestLookup(t *testing.T) {
	obj := []byte(`{"a":1, "b" : {"x":[1,2]}, "\u0063":"see", "a":2, "d":null}`)
	v := Lookup(obj, "a", "b", "c", "d", "zz", "a")
	want := []string{"1", `{"x":[1,2]}`, `"see"`, "null", "", "1"}
	for i, w := range want {
		if string(v[i]) != w || (w == "") != (v[i] == nil) {
			t.Errorf("key %d: %q, want %q", i, v[i], w)
		}
	}
	for _, bad := range []string{`[{"a":1}]`, `"a"`, ``, `{"a":`, `{"a" 1}`} {
		if v := Lookup([]byte(bad), "a"); v[0] != nil && bad != `{"a":` {
			t.Errorf("%q: %q", bad, v[0])
		}
	}
	many := Lookup(obj, "a", "a", "a", "a", "a", "a", "a", "a", "b")
	if string(many[MaxLookup-1]) != "1" {
		t.Errorf("eighth key: %q", many[MaxLookup-1])
	}
	plain := []byte(`{"a":1, "b" : {"x":[1,2]}, "c":"see", "d":null}`) // no escaped key (KeyIs allocates for those)
	if n := testing.AllocsPerRun(100, func() { Lookup(plain, "a", "b", "d") }); n != 0 {
		t.Errorf("%v allocations", n)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		fv, _, _, ok := Find(obj, k)
		if lv := Lookup(obj, k); string(lv[0]) != string(fv) || (lv[0] != nil) != ok {
			t.Errorf("%s: Lookup %q, Find %q %v", k, lv[0], fv, ok)
		}
	}
}
