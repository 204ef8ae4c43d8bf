package translate

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestEventDecoder(t *testing.T) {
	long := strings.Repeat("x", 10000)
	tests := []struct {
		name    string
		data    string
		want    string // the decoded "a", when no error
		wantErr bool
	}{
		{"plain", `{"a":"1"}`, "1", false},
		{"surrounding space", " \n{\"a\":\"2\"}\r\n ", "2", false},
		{"trailing value", `{"a":"3"} {"a":"4"}`, "", true},
		{"after an error", `{"a":"5"}`, "5", false},
		{"trailing garbage", `{"a":"6"}x`, "", true},
		{"cut value", `{"a":`, "", true},
		{"after a cut value", `{"a":"7"}`, "7", false},
		{"larger than the buffer", `{"a":"` + long + `"}`, long, false},
		{"wrong type", `{"a":1}`, "", true},
		{"after a type error", `{"a":"8"}`, "8", false},
		{"empty", ``, "", true},
		{"not JSON", `[DONE]`, "", true},
		{"last", `{"b":true,"a":"9"}`, "9", false},
	}
	var d eventDecoder
	for _, tt := range tests {
		var v struct {
			A string `json:"a"`
		}
		err := d.decode([]byte(tt.data), &v)
		if (err != nil) != tt.wantErr {
			t.Fatalf("%s: err = %v, want error %v", tt.name, err, tt.wantErr)
		}
		if err == nil && v.A != tt.want {
			t.Fatalf("%s: a = %.20q, want %.20q", tt.name, v.A, tt.want)
		}
	}
}

// FuzzStreamConverters checks that no event sequence makes a converter
// panic or write a frame that does not end in a blank line.
func FuzzStreamConverters(f *testing.F) {
	f.Add([]byte("message_start"), []byte(`{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":1}}}`), []byte(`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"hi"}}]}`))
	f.Add([]byte("content_block_delta"), []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a\"b"}}`), []byte(`[DONE]`))
	f.Add([]byte(""), []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`), []byte(`{"error":{"message":"x"}}`))
	f.Add([]byte("error"), []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), []byte(`{"choices":[],"usage":{"prompt_tokens":3}}`))
	f.Add([]byte("content_block_start"), []byte(`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}`), []byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\""}}]}}]}`))
	f.Add([]byte("content_block_delta"), []byte(`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}`), []byte(`{"choices":[{"index":0,"delta":{"content":"x","tool_calls":[{"index":1,"function":{"name":"g","arguments":":1}"}}]},"finish_reason":"tool_calls"}]}`))
	f.Fuzz(func(t *testing.T, name, anthropicData, openAIData []byte) {
		a := NewMessagesToChatStream(callerModel, true)
		o := NewChatToMessagesStream(callerModel)
		check := func(frames []byte) {
			if len(frames) > 0 && !strings.HasSuffix(string(frames), "\n\n") {
				t.Fatalf("frames %q do not end in a blank line", frames)
			}
			for _, ev := range events(t, frames) {
				if string(ev.Data) != "[DONE]" && !json.Valid(ev.Data) {
					t.Fatalf("frame data %q is not JSON", ev.Data)
				}
			}
		}
		for range 2 {
			frames, _, _ := a.Event(name, anthropicData)
			check(frames)
			frames, _, _ = o.Event(nil, openAIData)
			check(frames)
		}
	})
}
