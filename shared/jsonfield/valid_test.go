package jsonfield

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// validCases are inputs with encoding/json.Valid's verdict on them.
var validCases = []struct {
	in    string
	valid bool
}{
	// Empty and whitespace.
	{``, false},
	{` `, false},
	{" \t\r\n", false},
	{"\f1", false}, // form feed is not JSON whitespace
	{"\v1", false},
	{"\u00a01", false}, // nor is a no-break space
	{" \t\r\n1 \t\r\n", true},

	// Literals.
	{`true`, true},
	{`false`, true},
	{`null`, true},
	{`tru`, false},
	{`nul`, false},
	{`fals`, false},
	{`True`, false},
	{`NULL`, false},
	{`truex`, false},
	{`true false`, false},
	{`nulll`, false},
	{`[true,false,null]`, true},
	{`[truefalse]`, false},

	// Numbers.
	{`0`, true},
	{`-0`, true},
	{`1`, true},
	{`-1`, true},
	{`123456789012345678901234567890`, true},
	{`1.5`, true},
	{`-0.0`, true},
	{`0.000`, true},
	{`1e5`, true},
	{`1E5`, true},
	{`1e+5`, true},
	{`1e-5`, true},
	{`1.5e-005`, true},
	{`-0e0`, true},
	{`01`, false},
	{`-01`, false},
	{`00`, false},
	{`0.1.2`, false},
	{`-`, false},
	{`--1`, false},
	{`+1`, false},
	{`.5`, false},
	{`1.`, false},
	{`1.e5`, false},
	{`1e`, false},
	{`1e+`, false},
	{`1e-`, false},
	{`1E`, false},
	{`1ee5`, false},
	{`1e5.0`, false},
	{`0x10`, false},
	{`Infinity`, false},
	{`NaN`, false},
	{`-Infinity`, false},
	{`1 2`, false},
	{`[1,-]`, false},
	{`[-0,1.0e+1]`, true},
	{`{"a":01}`, false},
	{`{"a":1.}`, false},

	// Strings.
	{`""`, true},
	{`"abc"`, true},
	{`"`, false},
	{`"abc`, false},
	{`"abcdefghijklmnopqrstuvwxyz`, false},
	{`"\"\\\/\b\f\n\r\t"`, true},
	{`"\u0041\u00e9\uD83D\uDE00"`, true},
	{`"\uabcd\uABCD\u0000"`, true},
	{`"\u12"`, false},
	{`"\u12`, false},
	{`"\u123"`, false},
	{`"\u123g"`, false},
	{`"\uGHIJ"`, false},
	{`"\U0041"`, false},
	{`"\x41"`, false},
	{`"\a"`, false},
	{`"\'"`, false},
	{`"\0"`, false},
	{`"\`, false},
	{`"\"`, false},
	{`"abc\"`, false},
	{`"abcdefghijklmn\"`, false},
	{`"\\"`, true},
	{`"abcdefghijklmn\\"`, true},
	{`"\uD800"`, true},                   // a lone high surrogate: encoding/json accepts it
	{`"\uDC00"`, true},                   // a lone low surrogate
	{`"\uDC00\uD800"`, true},             // reversed pair
	{"\"a\x00b\"", false},                // raw control characters
	{"\"a\nb\"", false},                  //
	{"\"a\tb\"", false},                  //
	{"\"abcdefghijklmnop\x1fq\"", false}, // past the first eight bytes
	{"\"abcdefghijklmnop\x7fq\"", true},  // DEL is not a control byte to JSON
	{"\"\x20\"", true},
	{"\"héllo wörld 你好 😀\"", true},
	{"\"\xff\"", true},                     // invalid UTF-8: encoding/json accepts it
	{"\"\xc3\"", true},                     // a truncated sequence
	{"\"\xed\xa0\x80\"", true},             // an encoded surrogate
	{"\"abcdefgh\x80\x81\x82\x83\"", true}, // continuation bytes alone
	{"\"\xa2\xa2\xa2\xa2\xa2\xa2\xa2\xa2\xa2\"", true},
	{"\"\xdc\xdc\xdc\xdc\xdc\xdc\xdc\xdc\\n\"", true},
	{"\xff", false},           // invalid UTF-8 outside a string
	{"[1,\xff]", false},       //
	{"\xef\xbb\xbf{}", false}, // a byte order mark
	{"{}\xef\xbb\xbf", false},
	{`'a'`, false},

	// Objects.
	{`{}`, true},
	{`{ }`, true},
	{"{\n}", true},
	{`{"a":1}`, true},
	{` { "a" : 1 , "b" : [ ] } `, true},
	{`{"a":1,"a":2}`, true}, // duplicates are syntactically valid
	{`{`, false},
	{`}`, false},
	{`{"a"`, false},
	{`{"a":`, false},
	{`{"a":1`, false},
	{`{"a":1,`, false},
	{`{"a":1,}`, false}, // trailing comma
	{`{,}`, false},
	{`{,"a":1}`, false},
	{`{"a":1,,"b":2}`, false},
	{`{"a" 1}`, false},
	{`{"a"::1}`, false},
	{`{"a":}`, false},
	{`{a:1}`, false},
	{`{1:1}`, false},
	{`{null:1}`, false},
	{`{"a":1 "b":2}`, false},
	{`{"a":1]`, false},
	{`{"a":1}}`, false},
	{`{"a":{"b":{}}}`, true},
	{`{"\u0061":1}`, true},
	{`{"\u61":1}`, false},
	{"{\"a\x01\":1}", false},

	// Arrays.
	{`[]`, true},
	{`[ ]`, true},
	{`[1]`, true},
	{`[1,2,3]`, true},
	{`[[],[[]],{}]`, true},
	{`[`, false},
	{`]`, false},
	{`[1`, false},
	{`[1,`, false},
	{`[1,]`, false}, // trailing comma
	{`[,1]`, false},
	{`[,]`, false},
	{`[1,,2]`, false},
	{`[1 2]`, false},
	{`[1}`, false},
	{`[1]]`, false},
	{`[1:2]`, false},
	{`[{]}`, false},
	{`[}`, false},
	{`{]`, false},

	// Trailing garbage.
	{`{}x`, false},
	{`[] []`, false},
	{`"a" "b"`, false},
	{`1,`, false},
	{`{}/`, false},
	{"{}\x00", false},

	// FuzzValid (7 minutes, about 10.5 million inputs) found no disagreement
	// with encoding/json; add any it finds here and under testdata/fuzz.
}

// deep returns n nested arrays (or objects, each holding the next under
// key "a"), with a string at the bottom.
func deep(n int, objects bool) string {
	if objects {
		return strings.Repeat(`{"a":`, n) + `"x"` + strings.Repeat(`}`, n)
	}
	return strings.Repeat(`[`, n) + `"x"` + strings.Repeat(`]`, n)
}

// depthCases cross the stack word (64 levels) and MaxDepth.
var depthCases = []struct {
	in    string
	valid bool
}{
	{deep(63, false), true},
	{deep(64, false), true},
	{deep(65, false), true},
	{deep(65, true), true},
	{deep(200, true), true},
	{deep(MaxDepth, false), true},
	{deep(MaxDepth, true), true},
	{deep(MaxDepth+1, false), false},
	{deep(MaxDepth+1, true), false},
	{deep(3*MaxDepth, false), false},
	{strings.Repeat(`[`, MaxDepth), false}, // unclosed, at the limit
	{strings.Repeat(`[`, MaxDepth) + strings.Repeat(`]`, MaxDepth), true},
	{strings.Repeat(`[`, MaxDepth+1) + strings.Repeat(`]`, MaxDepth+1), false},
	{strings.Repeat(`[{"a":`, MaxDepth/2) + `1` + strings.Repeat(`}]`, MaxDepth/2), true},
	{strings.Repeat(`[{"a":`, MaxDepth/2) + `[]` + strings.Repeat(`}]`, MaxDepth/2), false},
	// The container kinds must survive a pop across a word boundary.
	{strings.Repeat(`[`, 70) + strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat(`}`, 70) + strings.Repeat(`]`, 70), true},
	{strings.Repeat(`[`, 70) + strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat(`}`, 69) + `]` + strings.Repeat(`]`, 70), false},
	{strings.Repeat(`{"a":[`, 40) + `1` + strings.Repeat(`],"b":0}`, 40), true},
	{strings.Repeat(`{"a":[`, 40) + `1` + strings.Repeat(`},"b":0]`, 40), false},
}

func TestValid(t *testing.T) {
	for _, tt := range validCases {
		if got := Valid([]byte(tt.in)); got != tt.valid {
			t.Errorf("Valid(%q) = %v, want %v", tt.in, got, tt.valid)
		}
	}
	for i, tt := range depthCases {
		if got := Valid([]byte(tt.in)); got != tt.valid {
			t.Errorf("depth case %d (%d bytes) = %v, want %v", i, len(tt.in), got, tt.valid)
		}
	}
	for name, body := range benchBodies() {
		if !Valid(body) {
			t.Errorf("Valid(%s body) = false", name)
		}
	}
}

// TestValidMatchesEncodingJSON checks the table against encoding/json
// itself, and every prefix and one-byte corruption of the table and of the
// realistic bodies.
func TestValidMatchesEncodingJSON(t *testing.T) {
	check := func(what string, b []byte) {
		t.Helper()
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Errorf("%s: Valid(%q) = %v, json.Valid = %v", what, clip(b), got, want)
		}
	}
	for _, tt := range validCases {
		if json.Valid([]byte(tt.in)) != tt.valid {
			t.Errorf("table: json.Valid(%q) = %v, the table says %v", tt.in, !tt.valid, tt.valid)
		}
		check("table", []byte(tt.in))
	}
	for i, tt := range depthCases {
		check(fmt.Sprintf("depth case %d", i), []byte(tt.in))
	}
	inputs := [][]byte{}
	for _, tt := range validCases {
		inputs = append(inputs, []byte(tt.in))
	}
	small := benchBodies()
	inputs = append(inputs, small["request"], small["response"])
	for _, in := range inputs {
		for n := range len(in) {
			check("prefix", in[:n])
		}
		for i := range in {
			b := []byte(string(in))
			for _, c := range []byte{' ', '"', '\\', ',', ':', '}', ']', '{', '[', '0', '-', 'e', '.', 'x', 0x01, 0x80, 0xff} {
				b[i] = c
				check("corrupt", b)
			}
		}
	}
}

func TestValidAllocs(t *testing.T) {
	bodies := benchBodies()
	inputs := [][]byte{bodies["request"], bodies["response"], bodies["large"], []byte(deep(MaxDepth, true)), []byte(deep(MaxDepth+1, false)), []byte(`{"a":`)}
	for _, in := range inputs {
		if n := testing.AllocsPerRun(20, func() { Valid(in) }); n != 0 {
			t.Errorf("Valid(%q) allocates %v times", clip(in), n)
		}
	}
}

func clip(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}

func FuzzValid(f *testing.F) {
	for _, tt := range validCases {
		f.Add([]byte(tt.in))
	}
	for _, tt := range depthCases[:5] {
		f.Add([]byte(tt.in))
	}
	bodies := benchBodies()
	f.Add(bodies["request"])
	f.Add(bodies["response"])
	f.Add(bodies["large"][:4096])
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid = %v", b, got, want)
		}
	})
}

// benchBodies returns realistic bodies: a chat request (about 600 bytes), a
// chat response (about 1.5 KB, pretty-printed as some upstreams send it)
// and a large request (about 100 KB: a long conversation with tool calls,
// long strings with escapes and non-ASCII text, and nested arrays).
func benchBodies() map[string][]byte {
	request := `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant. Answer concisely and cite your sources when you can."},{"role":"user","content":"What is the capital of France, and what is its population? Please also tell me something about the history of the Eiffel Tower, in two or three sentences."}],"temperature":0.7,"top_p":1,"max_tokens":512,"stream":false,"stream_options":null,"user":"user-1234","metadata":{"session":"a1b2c3d4","tags":["geo","history"]}}`
	response := `{
  "id": "chatcmpl-AbCdEfGhIjKlMnOpQrStUvWxYz012",
  "object": "chat.completion",
  "created": 1735689600,
  "model": "gpt-4o-mini-2024-07-18",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "The capital of France is **Paris**, with a population of about 2.1 million people in the city proper (and roughly 12 million in the metropolitan area).\n\nThe Eiffel Tower was built by Gustave Eiffel's company for the 1889 World's Fair (Exposition Universelle), marking the centenary of the French Revolution. Initially criticised by some of France's leading artists and intellectuals, it became a global icon of France and one of the most recognisable structures in the world. At 330 m, it was the tallest man-made structure until 1930.",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 58,
    "completion_tokens": 121,
    "total_tokens": 179,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_0123456789"
}`
	var large strings.Builder
	large.WriteString(`{"model":"claude-sonnet-4","max_tokens":4096,"messages":[`)
	for i := 0; large.Len() < 100_000; i++ {
		if i > 0 {
			large.WriteByte(',')
		}
		fmt.Fprintf(&large, `{"role":"user","content":[{"type":"text","text":"Turn %d. Here is a long passage of the document to summarise: `+
			`Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. `+
			`Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat. `+
			`Duis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur. `+
			`Excepteur sint occaecat cupidatat non proident, sunt in culpa qui officia deserunt mollit anim id est laborum.\n\n`+
			`Quoted: \"il était une fois\" — naïve café, 日本語のテキスト, emoji 🚀.\tTabbed\\path\\to\\file.go\n"}]},`+
			`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_%04d","name":"search","input":{"query":"summary %d","filters":[[1,2,3],[4.5,-6e2,0],[true,false,null]],"limit":10}}]}`, i, i, i)
	}
	large.WriteString(`],"tools":[{"name":"search","input_schema":{"type":"object","properties":{"query":{"type":"string"}}}}]}`)
	return map[string][]byte{
		"request":  []byte(request),
		"response": []byte(response),
		"large":    []byte(large.String()),
	}
}

func BenchmarkValid(b *testing.B) {
	bodies := benchBodies()
	for _, name := range []string{"request", "response", "large"} {
		body := bodies[name]
		b.Run(name+"/jsonfield", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if !Valid(body) {
					b.Fatal("invalid")
				}
			}
		})
		b.Run(name+"/encoding_json", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if !json.Valid(body) {
					b.Fatal("invalid")
				}
			}
		})
	}
	deepBody := []byte(deep(MaxDepth, true))
	b.Run("deep/jsonfield", func(b *testing.B) {
		b.SetBytes(int64(len(deepBody)))
		b.ReportAllocs()
		for b.Loop() {
			Valid(deepBody)
		}
	})
	b.Run("deep/encoding_json", func(b *testing.B) {
		b.SetBytes(int64(len(deepBody)))
		b.ReportAllocs()
		for b.Loop() {
			json.Valid(deepBody)
		}
	})
}

// TestStringMask checks stringMask against a byte-at-a-time test for every
// byte value at every position, among neighbours of every kind.
func TestStringMask(t *testing.T) {
	special := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }
	fill := []byte{'a', 0x00, '"', '\\', 0x1f, 0x20, 0x7f, 0x80, 0xa2, 0xdc, 0xff}
	for pos := range 8 {
		for c := range 256 {
			for _, f := range fill {
				var w [8]byte
				for k := range w {
					w[k] = f
				}
				w[pos] = byte(c)
				x := uint64(0)
				for k := range 8 {
					x |= uint64(w[k]) << (8 * k)
				}
				m := stringMask(x)
				for k := range 8 {
					if got, want := m>>(8*k+7)&1 == 1, special(w[k]); got != want {
						t.Fatalf("stringMask(% x) byte %d: %v, want %v", w, k, got, want)
					}
				}
			}
		}
	}
}
