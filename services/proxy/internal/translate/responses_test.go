package translate

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestResponsesStreamOutputIndexes: every output item a translated
// Responses stream adds is named by the output_index it has in the final
// response's output, whether the answer is a tool call alone, text then a
// call, or a call then text (openai-node's stream accumulator throws on an
// index that is not there).
func TestResponsesStreamOutputIndexes(t *testing.T) {
	const (
		call1 = `{"id":"chatcmpl-1","created":1,"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}}]}`
		args1 = `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`
		text  = `{"id":"chatcmpl-1","created":1,"choices":[{"index":0,"delta":{"content":"hi"}}]}`
		stop  = `{"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`
	)
	for name, chunks := range map[string][]string{
		"tool call only":     {call1, args1, stop, "[DONE]"},
		"text, then a call":  {text, call1, args1, stop, "[DONE]"},
		"a call, then text":  {call1, args1, text, stop, "[DONE]"},
		"text only, no call": {text, stop, "[DONE]"},
		"two calls numbered 0 (Ollama)": {call1, args1,
			`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_2","type":"function","function":{"name":"g","arguments":"{}"}}]}}]}`, stop, "[DONE]"},
	} {
		t.Run(name, func(t *testing.T) {
			s := NewChatToResponsesStream("m")
			var events []map[string]any
			for _, c := range chunks {
				out, _, err := s.Event(nil, []byte(c))
				if err != nil {
					t.Fatal(err)
				}
				for l := range strings.Lines(string(out)) {
					if d, ok := strings.CutPrefix(strings.TrimSpace(l), "data: "); ok {
						var ev map[string]any
						if err := json.Unmarshal([]byte(d), &ev); err != nil {
							t.Fatal(err)
						}
						events = append(events, ev)
					}
				}
			}
			final := events[len(events)-1]
			if final["type"] != "response.completed" {
				t.Fatalf("last event %v", final["type"])
			}
			output := final["response"].(map[string]any)["output"].([]any)
			added := 0
			for _, ev := range events {
				i, ok := ev["output_index"].(float64)
				if !ok {
					continue
				}
				if int(i) >= len(output) {
					t.Fatalf("%s names output_index %v of %d items", ev["type"], i, len(output))
				}
				want := output[int(i)].(map[string]any)["id"]
				if item, ok := ev["item"].(map[string]any); ok && item["id"] != want {
					t.Fatalf("%s at output_index %v is %v, the final output has %v there", ev["type"], i, item["id"], want)
				}
				if id, ok := ev["item_id"]; ok && id != want {
					t.Fatalf("%s at output_index %v names %v, the final output has %v there", ev["type"], i, id, want)
				}
				if ev["type"] == "response.output_item.added" {
					if int(i) != added {
						t.Fatalf("item %d added at output_index %v", added, i)
					}
					added++
				}
			}
			if added != len(output) {
				t.Fatalf("%d items added, %d in the final output", added, len(output))
			}
			if strings.Contains(name, "Ollama") && (len(output) != 2 || output[1].(map[string]any)["call_id"] != "call_2") {
				t.Fatalf("two calls numbered 0: output %v", output)
			}
		})
	}
}

// TestResponsesIncomplete: an answer cut by its length or stopped by a
// content filter (an Anthropic refusal becomes one) is incomplete, with the
// reason, in a translated Responses stream and answer.
func TestResponsesIncomplete(t *testing.T) {
	for finish, reason := range map[string]string{"length": "max_output_tokens", "content_filter": "content_filter"} {
		s := NewChatToResponsesStream("m")
		var last []byte
		for _, c := range []string{
			`{"id":"chatcmpl-1","created":1,"choices":[{"index":0,"delta":{"content":"hi"}}]}`,
			`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"` + finish + `"}]}`,
			"[DONE]",
		} {
			out, _, err := s.Event(nil, []byte(c))
			if err != nil {
				t.Fatal(err)
			}
			if len(out) > 0 {
				last = out
			}
		}
		if !strings.Contains(string(last), "event: response.incomplete") || !strings.Contains(string(last), `"incomplete_details":{"reason":"`+reason+`"}`) {
			t.Errorf("finish %s: last frames %s", finish, last)
		}
		r := responseObject("chatcmpl-1", 1, "m", nil, finish, nil)
		if r["status"] != "incomplete" || r["incomplete_details"].(map[string]string)["reason"] != reason {
			t.Errorf("finish %s: response %v", finish, r)
		}
	}
}

// TestResponsesParallelToolCalls: parallel_tool_calls of a Responses
// request reaches the chat request it becomes (and from there Anthropic's
// disable_parallel_tool_use); it was dropped.
func TestResponsesParallelToolCalls(t *testing.T) {
	out, err := ResponsesToChat([]byte(`{"input":"hi","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"parallel_tool_calls":false}`), "m", false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"parallel_tool_calls":false`) {
		t.Fatalf("chat request %s", out)
	}
	// Without tools OpenAI refuses the field: it is left out.
	if bare, _ := ResponsesToChat([]byte(`{"input":"hi","parallel_tool_calls":false}`), "m", false); strings.Contains(string(bare), "parallel_tool_calls") {
		t.Fatalf("without tools: %s", bare)
	}
	msgs, err := ChatToMessages(out, "claude")
	if err != nil || !strings.Contains(string(msgs), `"disable_parallel_tool_use":true`) {
		t.Fatalf("messages request %s, %v", msgs, err)
	}
}
