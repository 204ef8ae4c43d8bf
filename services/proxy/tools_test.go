package proxy

import (
	"encoding/json"
	"testing"

	"switchyard.dev/shared/config"
)

// The fake providers answer with text only, so these tests check the tool
// parts of requests translated upstream, as the fakes record them.

func TestToolsTranslatedToAnthropic(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		ch := c.Chains["demo-chat"]
		ch.Steps[0].Active = bptr(false) // straight to fake-anthropic
		c.Chains["demo-chat"] = ch
	})
	body := `{"model":"demo-chat","messages":[` +
		`{"role":"user","content":"Weather in Paris?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"18C"}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],` +
		`"tool_choice":"required","parallel_tool_calls":false}`
	status, h, resp := f.call(t, "/v1/chat/completions", body)
	if status != 200 || h.Get("X-Switchyard-Provider") != "fake-anthropic" {
		t.Fatalf("status %d provider %q: %s", status, h.Get("X-Switchyard-Provider"), resp)
	}
	calls := f.anthropic.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d anthropic calls", len(calls))
	}
	var got struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools      []map[string]any `json:"tools"`
		ToolChoice map[string]any   `json:"tool_choice"`
	}
	if err := json.Unmarshal(calls[0].Body, &got); err != nil {
		t.Fatalf("anthropic request %s: %v", calls[0].Body, err)
	}
	if len(got.Tools) != 1 || got.Tools[0]["name"] != "get_weather" || got.Tools[0]["input_schema"] == nil {
		t.Errorf("tools: %s", calls[0].Body)
	}
	if got.ToolChoice["type"] != "any" || got.ToolChoice["disable_parallel_tool_use"] != true {
		t.Errorf("tool_choice: %s", calls[0].Body)
	}
	if len(got.Messages) != 3 || got.Messages[1].Role != "assistant" || got.Messages[2].Role != "user" ||
		string(got.Messages[1].Content) != `[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}}]` ||
		string(got.Messages[2].Content) != `[{"type":"tool_result","tool_use_id":"call_1","content":"18C"}]` {
		t.Errorf("messages: %s", calls[0].Body)
	}
}

func TestToolsTranslatedToOpenAI(t *testing.T) {
	f := newFixture(t) // demo-chat starts at fake-openai
	body := `{"model":"demo-chat","max_tokens":100,"messages":[` +
		`{"role":"user","content":"Weather in Paris?"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"18C"}]}],` +
		`"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],` +
		`"tool_choice":{"type":"tool","name":"get_weather"}}`
	status, h, resp := f.call(t, "/v1/messages", body)
	if status != 200 || h.Get("X-Switchyard-Provider") != "fake-openai" {
		t.Fatalf("status %d provider %q: %s", status, h.Get("X-Switchyard-Provider"), resp)
	}
	calls := f.openai.Calls()
	if len(calls) != 1 {
		t.Fatalf("%d openai calls", len(calls))
	}
	var got struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    *string
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools      []json.RawMessage `json:"tools"`
		ToolChoice json.RawMessage   `json:"tool_choice"`
	}
	if err := json.Unmarshal(calls[0].Body, &got); err != nil {
		t.Fatalf("openai request %s: %v", calls[0].Body, err)
	}
	if len(got.Tools) != 1 || string(got.ToolChoice) != `{"type":"function","function":{"name":"get_weather"}}` {
		t.Errorf("tools: %s", calls[0].Body)
	}
	if len(got.Messages) != 3 {
		t.Fatalf("messages: %s", calls[0].Body)
	}
	a, r := got.Messages[1], got.Messages[2]
	if a.Role != "assistant" || len(a.ToolCalls) != 1 || a.ToolCalls[0].ID != "toolu_1" ||
		a.ToolCalls[0].Function.Name != "get_weather" || a.ToolCalls[0].Function.Arguments != `{"city":"Paris"}` {
		t.Errorf("assistant message: %s", calls[0].Body)
	}
	if r.Role != "tool" || r.ToolCallID != "toolu_1" || r.Content == nil || *r.Content != "18C" {
		t.Errorf("tool message: %s", calls[0].Body)
	}
}
