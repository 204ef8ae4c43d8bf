package route

import (
	"encoding/json"
	"testing"
)

func TestNeeds(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		needs  Caps
		maxOut int64
		bug    string // a known bug: skipped
	}{
		{"plain text", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, 0, 0, ""},
		{"openai image_url, compact",
			`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}`,
			CapVision, 0, ""},
		{"openai image_url, spaced",
			`{"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, {"type" : "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]}`,
			CapVision, 0, ""},
		{"openai image_url, pretty-printed",
			"{\n  \"model\": \"gpt-4o\",\n  \"messages\": [\n    {\n      \"role\": \"user\",\n      \"content\": [\n        {\n          \"type\":\n\t\"image_url\",\n          \"image_url\": {\"url\": \"https://x/y.jpg\"}\n        }\n      ]\n    }\n  ]\n}",
			CapVision, 0, ""},
		{"text that mentions an image part",
			`{"model":"gpt-4o","messages":[{"role":"user","content":"Explain this JSON: {\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}} and {\"type\": \"input_audio\"}"}]}`,
			0, 0, ""},
		{"text part that mentions an image part",
			`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"the part is {\"type\" : \"image\"}"}]}]}`,
			0, 0, ""},
		{"a key named type outside messages",
			`{"model":"gpt-4o","metadata":{"type":"image"},"messages":[{"role":"user","content":"hi"}]}`,
			0, 0, ""},
		{"openai input_image (responses-style part)",
			`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/y.png"}]}]}`,
			CapVision, 0, ""},
		{"openai file part",
			`{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-abc"}}]}]}`,
			CapVision, 0, ""},
		{"anthropic image block",
			`{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4AAQ"}},{"type":"text","text":"Describe this image."}]}]}`,
			CapVision, 1024, ""},
		{"anthropic document block",
			`{"model":"claude-sonnet-4-5","max_tokens":2048,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0x"}},{"type":"text","text":"Summarize"}]}]}`,
			CapVision, 2048, ""},
		{"anthropic image in a tool result",
			`{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]}]}`,
			CapVision, 100, ""},
		{"tools, non-empty",
			`{"model":"gpt-4o","messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`,
			CapTools, 0, ""},
		{"tools, empty array", `{"model":"gpt-4o","messages":[],"tools":[]}`, 0, 0, ""},
		{"tools, empty array with spaces", `{"model":"gpt-4o","messages":[],"tools":[ ]}`, 0, 0, ""},
		{"tools, null", `{"model":"gpt-4o","messages":[],"tools":null}`, 0, 0, ""},
		{"legacy functions", `{"model":"gpt-4o","messages":[],"functions":[{"name":"f","parameters":{}}]}`, CapTools, 0, ""},
		{"anthropic tools", `{"model":"claude-sonnet-4-5","max_tokens":64,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[]}`, CapTools, 64, ""},
		{"response_format json_schema",
			`{"model":"gpt-4o","messages":[],"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"type":"object"}}}}`,
			CapJSONSchema, 0, ""},
		{"response_format json_schema, spaced",
			`{"model":"gpt-4o","messages":[],"response_format": { "type" : "json_schema", "json_schema": {"name":"r"}}}`,
			CapJSONSchema, 0, ""},
		{"response_format json_object", `{"model":"gpt-4o","messages":[],"response_format":{"type":"json_object"}}`, 0, 0, ""},
		{"response_format text", `{"model":"gpt-4o","messages":[],"response_format":{"type":"text"}}`, 0, 0, ""},
		{"anthropic output_format json_schema", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[],"output_format":{"type":"json_schema","schema":{"type":"object"}}}`, CapJSONSchema, 10, ""},
		{"reasoning_effort", `{"model":"o3","messages":[],"reasoning_effort":"high"}`, CapReasoning, 0, ""},
		{"reasoning object", `{"model":"o3","messages":[],"reasoning":{"effort":"low"}}`, CapReasoning, 0, ""},
		{"anthropic thinking enabled",
			`{"model":"claude-sonnet-4-5","max_tokens":16000,"thinking":{"type":"enabled","budget_tokens":10000},"messages":[{"role":"user","content":"prove it"}]}`,
			CapReasoning, 16000, ""},
		{"anthropic thinking adaptive", `{"model":"claude-sonnet-4-5","max_tokens":5,"thinking":{"type":"adaptive"},"messages":[]}`, CapReasoning, 5, ""},
		{"anthropic thinking disabled", `{"model":"claude-sonnet-4-5","max_tokens":5,"thinking":{"type":"disabled"},"messages":[]}`, 0, 5, ""},
		{"input_audio part",
			`{"model":"gpt-4o-audio-preview","messages":[{"role":"user","content":[{"type":"text","text":"transcribe"},{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}}]}]}`,
			CapAudio, 0, ""},
		{"modalities audio",
			`{"model":"gpt-4o-audio-preview","modalities":["text","audio"],"audio":{"voice":"alloy","format":"wav"},"messages":[{"role":"user","content":"hi"}]}`,
			CapAudio, 0, ""},
		{"modalities text only", `{"model":"gpt-4o","modalities":["text"],"messages":[]}`, 0, 0, ""},
		{"max_tokens", `{"model":"gpt-4o","max_tokens":256,"messages":[]}`, 0, 256, ""},
		{"max_completion_tokens", `{"model":"o3","max_completion_tokens":4096,"messages":[]}`, 0, 4096, ""},
		{"max_completion_tokens wins over max_tokens", `{"model":"o3","max_tokens":100,"max_completion_tokens":4096,"messages":[]}`, 0, 4096, ""},
		{"max_tokens null", `{"model":"gpt-4o","max_tokens":null,"messages":[]}`, 0, 0, ""},
		{"max_tokens zero", `{"model":"gpt-4o","max_tokens":0,"messages":[]}`, 0, 0, ""},
		{"max_tokens negative", `{"model":"gpt-4o","max_tokens":-5,"messages":[]}`, 0, 0, ""},
		{"max tokens nested, not top level", `{"model":"gpt-4o","metadata":{"max_tokens":99},"messages":[]}`, 0, 0, ""},
		{"everything",
			`{"model":"gpt-4o","max_completion_tokens":500,"reasoning_effort":"low","modalities":["text","audio"],"response_format":{"type":"json_schema","json_schema":{}},"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`,
			CapTools | CapVision | CapAudio | CapJSONSchema | CapReasoning, 500, ""},
		{"not an object", `[1,2,3]`, 0, 0, ""},
		{"empty", ``, 0, 0, ""},
		{"anthropic tool_use whose input has a type field",
			`{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"file it"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"create_record","input":{"type":"document","title":"Q3"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`,
			0, 10, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.bug != "" {
				t.Skip(tt.bug)
			}
			if tt.body != "" && !json.Valid([]byte(tt.body)) {
				t.Fatalf("test body is not valid JSON")
			}
			needs, maxOut := Needs([]byte(tt.body))
			if needs != tt.needs || maxOut != tt.maxOut {
				t.Errorf("Needs = %v (%v), %d; want %v (%v), %d", needs, needs.Names(), maxOut, tt.needs, tt.needs.Names(), tt.maxOut)
			}
		})
	}
}

// TestNeedsAllocs: Needs reads the body in place.
func TestNeedsAllocs(t *testing.T) {
	tests := []struct {
		name string
		body string
		bug  string
	}{
		{"vision, tools, audio, reasoning_effort, max tokens",
			`{"model":"gpt-4o","max_completion_tokens":500,"reasoning_effort":"low","modalities":["text","audio"],"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}},{"type":"input_audio","input_audio":{"data":"x"}}]}]}`, ""},
		{"anthropic document, tools",
			`{"model":"claude-sonnet-4-5","max_tokens":16000,"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","data":"x"}}]}]}`, ""},
		{"text mentioning a part", `{"model":"gpt-4o","messages":[{"role":"user","content":"Explain {\"type\":\"image_url\"}"}]}`, ""},
		{"response_format json_schema",
			`{"model":"gpt-4o","response_format":{"type":"json_schema","json_schema":{}},"messages":[]}`, ""},
		{"response_format json_object",
			`{"model":"gpt-4o","response_format":{"type":"json_object"},"messages":[]}`, ""},
		{"anthropic thinking",
			`{"model":"claude-sonnet-4-5","max_tokens":16000,"thinking":{"type":"enabled","budget_tokens":10000},"messages":[]}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.bug != "" {
				t.Skip(tt.bug)
			}
			body := []byte(tt.body)
			if n := testing.AllocsPerRun(100, func() { Needs(body) }); n != 0 {
				t.Errorf("%v allocations per Needs", n)
			}
		})
	}
}

func BenchmarkNeeds(b *testing.B) {
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":16000,"thinking":{"type":"enabled","budget_tokens":10000},"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4AAQ"}},{"type":"text","text":"Describe this image."}]}]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		Needs(body)
	}
}

// TestHashStable: Hash is FNV-1a 64 followed by the murmur3 fmix64
// finalizer; these values are what every proxy computes, now and after
// an upgrade (a change would move every sticky conversation).
func TestHashStable(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
	}{
		{"", 0xefd01f60ba992926},
		{"a", 0x82a2a958a9bece5b},
		{"conversation-42", 0x002e3681e934545d},
		{"client:team-alpha", 0x3d53495c61cca480},
	}
	for _, tt := range tests {
		if got := Hash(tt.in); got != tt.want {
			t.Errorf("Hash(%q) = %#016x, want %#016x", tt.in, got, tt.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Hash("conversation-42") }); n != 0 {
		t.Errorf("Hash allocates %v", n)
	}
}

// TestHashSpread: sequential ids spread evenly over small moduli (what the
// weighted wheels take) and over the high bits, and one changed byte flips
// about half the bits.
func TestHashSpread(t *testing.T) {
	const n = 100_000
	for _, buckets := range []uint64{2, 4, 7, 10, 16, 100} {
		counts := make([]int, buckets)
		for i := range n {
			counts[Hash("user-"+itoa(i))%buckets]++
		}
		// Chi-square against uniform; the 99.9th percentile for 99 degrees
		// of freedom is about 149, for fewer well under that.
		exp := float64(n) / float64(buckets)
		chi := 0.0
		for _, c := range counts {
			d := float64(c) - exp
			chi += d * d / exp
		}
		if chi > 150 {
			t.Errorf("mod %d: chi-square %.1f, counts %v", buckets, chi, counts)
		}
	}
	top := make([]int, 16)
	for i := range n {
		top[Hash(itoa(i))>>60]++
	}
	for b, c := range top {
		if c < n/16*9/10 || c > n/16*11/10 {
			t.Errorf("top nibble %d: %d of %d", b, c, n)
		}
	}
	// Avalanche: flipping one input bit flips 32 output bits on average.
	flips, trials := 0, 0
	for i := range 2000 {
		s := []byte("conversation-" + itoa(i))
		h := Hash(string(s))
		for j := range s {
			for bit := range 8 {
				s[j] ^= 1 << bit
				flips += popcount(h ^ Hash(string(s)))
				s[j] ^= 1 << bit
				trials++
			}
		}
	}
	if avg := float64(flips) / float64(trials); avg < 31 || avg > 33 {
		t.Errorf("avalanche: %.2f bits flip on average, want ~32", avg)
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for ; i > 0; i /= 10 {
		n--
		b[n] = byte('0' + i%10)
	}
	return string(b[n:])
}

func popcount(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}
