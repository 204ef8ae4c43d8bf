package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The Responses API for providers that do not serve it: a request is
// translated into a chat completions request (then, for Anthropic
// providers, into a messages request as any chat request is), and the
// answer back into a Response object or the Responses API's stream events.
// What translates: instructions, text and image input, earlier assistant
// turns, function tools and their calls and outputs, tool_choice,
// parallel_tool_calls,
// text.format (json_schema, json_object), reasoning.effort,
// max_output_tokens, temperature, top_p, user. What cannot (stored state:
// previous_response_id, conversation; built-in tools such as web_search or
// file_search) is refused with 400 unsupported_translation.

// responsesUnsupported is a Responses request a provider without the
// Responses API cannot serve.
func responsesUnsupported(what string) error {
	return fmt.Errorf("%s cannot be translated for a provider without the Responses API", what)
}

// ResponsesToChat translates a Responses API request into a chat
// completions request for upstreamModel.
func ResponsesToChat(body []byte, upstreamModel string, stream bool) ([]byte, error) {
	var in struct {
		Instructions string          `json:"instructions"`
		Input        json.RawMessage `json:"input"`
		Tools        []struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		} `json:"tools"`
		ToolChoice        json.RawMessage `json:"tool_choice"`
		ParallelToolCalls *bool           `json:"parallel_tool_calls"`
		Text              *struct {
			Format *struct {
				Type   string          `json:"type"`
				Name   string          `json:"name"`
				Schema json.RawMessage `json:"schema"`
				Strict *bool           `json:"strict"`
			} `json:"format"`
		} `json:"text"`
		Reasoning *struct {
			Effort string `json:"effort"`
		} `json:"reasoning"`
		MaxOutputTokens    *int64          `json:"max_output_tokens"`
		Temperature        *float64        `json:"temperature"`
		TopP               *float64        `json:"top_p"`
		User               string          `json:"user"`
		PreviousResponseID string          `json:"previous_response_id"`
		Conversation       json.RawMessage `json:"conversation"`
		Prompt             json.RawMessage `json:"prompt"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("decode Responses API request: %w: %w", ErrMalformed, err)
	}
	switch {
	case in.PreviousResponseID != "":
		return nil, responsesUnsupported("previous_response_id (the conversation is stored by OpenAI)")
	case len(in.Conversation) > 0 && string(in.Conversation) != "null":
		return nil, responsesUnsupported("conversation (stored by OpenAI)")
	case len(in.Prompt) > 0 && string(in.Prompt) != "null":
		return nil, responsesUnsupported("prompt (a prompt template stored by OpenAI)")
	}
	out := map[string]any{"model": upstreamModel}
	var msgs []map[string]any
	if in.Instructions != "" {
		msgs = append(msgs, map[string]any{"role": "system", "content": in.Instructions})
	}
	items, err := inputItems(in.Input)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		// input is optional where OpenAI keeps the turn (a prompt
		// template, a stored conversation); a chat request needs one.
		return nil, responsesUnsupported("a request without input")
	}
	msgs = append(msgs, items...)
	out["messages"] = msgs
	if len(in.Tools) > 0 {
		var tools []map[string]any
		for _, t := range in.Tools {
			if t.Type != "function" {
				return nil, responsesUnsupported("the built-in tool " + strconv.Quote(t.Type))
			}
			fn := map[string]any{"name": t.Name}
			if t.Description != "" {
				fn["description"] = t.Description
			}
			if len(t.Parameters) > 0 {
				fn["parameters"] = t.Parameters
			}
			if t.Strict != nil {
				fn["strict"] = *t.Strict
			}
			tools = append(tools, map[string]any{"type": "function", "function": fn})
		}
		out["tools"] = tools
	}
	if len(in.ToolChoice) > 0 && in.ToolChoice[0] == '"' {
		out["tool_choice"] = in.ToolChoice
	} else if len(in.ToolChoice) > 0 && in.ToolChoice[0] == '{' {
		var tc struct{ Type, Name string }
		_ = json.Unmarshal(in.ToolChoice, &tc)
		if tc.Type != "function" || tc.Name == "" {
			return nil, responsesUnsupported("tool_choice " + string(in.ToolChoice))
		}
		out["tool_choice"] = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
	}
	if in.ParallelToolCalls != nil && len(in.Tools) > 0 { // OpenAI refuses it without tools
		out["parallel_tool_calls"] = *in.ParallelToolCalls
	}
	if in.Text != nil && in.Text.Format != nil {
		switch f := in.Text.Format; f.Type {
		case "json_schema":
			js := map[string]any{"name": f.Name, "schema": f.Schema}
			if f.Strict != nil {
				js["strict"] = *f.Strict
			}
			out["response_format"] = map[string]any{"type": "json_schema", "json_schema": js}
		case "json_object":
			out["response_format"] = map[string]any{"type": "json_object"}
		}
	}
	if in.Reasoning != nil && in.Reasoning.Effort != "" {
		out["reasoning_effort"] = in.Reasoning.Effort
	}
	if in.MaxOutputTokens != nil {
		out["max_tokens"] = *in.MaxOutputTokens
	}
	if in.Temperature != nil {
		out["temperature"] = *in.Temperature
	}
	if in.TopP != nil {
		out["top_p"] = *in.TopP
	}
	if in.User != "" {
		out["user"] = in.User
	}
	if stream {
		out["stream"] = true
		out["stream_options"] = map[string]bool{"include_usage": true}
	}
	return json.Marshal(out)
}

// inputItems translates a Responses input (a string, or input items) into
// chat messages.
func inputItems(raw json.RawMessage) ([]map[string]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil // absent
	}
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return []map[string]any{{"role": "user", "content": s}}, nil
	}
	var items []struct {
		Type      string          `json:"type"`
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Arguments string          `json:"arguments"`
		Output    json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, malformedAt("input[]", err)
	}
	var out []map[string]any
	for _, it := range items {
		switch it.Type {
		case "", "message":
			role := it.Role
			if role == "developer" {
				role = "system"
			}
			content, err := inputContent(it.Content)
			if err != nil {
				return nil, err
			}
			out = append(out, map[string]any{"role": role, "content": content})
		case "function_call":
			call := map[string]any{"id": it.CallID, "type": "function", "function": map[string]string{"name": it.Name, "arguments": it.Arguments}}
			if n := len(out); n > 0 && out[n-1]["role"] == "assistant" && out[n-1]["tool_calls"] != nil {
				out[n-1]["tool_calls"] = append(out[n-1]["tool_calls"].([]map[string]any), call)
				continue
			}
			out = append(out, map[string]any{"role": "assistant", "content": nil, "tool_calls": []map[string]any{call}})
		case "function_call_output":
			var s string
			if json.Unmarshal(it.Output, &s) != nil {
				s = string(it.Output)
			}
			out = append(out, map[string]any{"role": "tool", "tool_call_id": it.CallID, "content": s})
		case "reasoning":
			// a previous turn's reasoning: chat has no place for it
		default:
			return nil, responsesUnsupported("the input item type " + strconv.Quote(it.Type))
		}
	}
	return out, nil
}

// inputContent translates a message's content (a string, or parts).
func inputContent(raw json.RawMessage) (any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s, nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL string `json:"image_url"`
		Detail   string `json:"detail"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, malformedAt("input[].content", err)
	}
	var out []map[string]any
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			out = append(out, map[string]any{"type": "text", "text": p.Text})
		case "input_image":
			img := map[string]any{"url": p.ImageURL}
			if p.Detail != "" {
				img["detail"] = p.Detail
			}
			out = append(out, map[string]any{"type": "image_url", "image_url": img})
		default:
			return nil, responsesUnsupported("the content part type " + strconv.Quote(p.Type))
		}
	}
	return out, nil
}

// responsesChatAnswer is what the Responses translation reads of a chat
// completion (non-stream).
type responsesChatAnswer struct {
	ID      string `json:"id"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *responsesChatUsage `json:"usage"`
}

type responsesChatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// responsesUsage is a chat usage in the Responses API's shape.
func responsesUsage(u *responsesChatUsage) map[string]any {
	if u == nil {
		return nil
	}
	var cached, reasoning int64
	if u.PromptTokensDetails != nil {
		cached = u.PromptTokensDetails.CachedTokens
	}
	if u.CompletionTokensDetails != nil {
		reasoning = u.CompletionTokensDetails.ReasoningTokens
	}
	return map[string]any{
		"input_tokens": u.PromptTokens, "input_tokens_details": map[string]int64{"cached_tokens": cached},
		"output_tokens": u.CompletionTokens, "output_tokens_details": map[string]int64{"reasoning_tokens": reasoning},
		"total_tokens": u.PromptTokens + u.CompletionTokens,
	}
}

// ChatToResponse translates a chat completion into a Response object
// named for model (the model the caller asked for).
func ChatToResponse(body []byte, model string) ([]byte, error) {
	var cc responsesChatAnswer
	if err := json.Unmarshal(body, &cc); err != nil || len(cc.Choices) == 0 {
		return nil, fmt.Errorf("%w: not a chat completion", ErrMalformed)
	}
	ch := cc.Choices[0]
	var output []map[string]any
	text := ""
	if ch.Message.Content != nil {
		text = *ch.Message.Content
	}
	if text != "" || len(ch.Message.ToolCalls) == 0 {
		output = append(output, messageItem("msg_"+cc.ID, text, "completed"))
	}
	for _, tc := range ch.Message.ToolCalls {
		output = append(output, map[string]any{"type": "function_call", "id": "fc_" + tc.ID, "call_id": tc.ID,
			"name": tc.Function.Name, "arguments": tc.Function.Arguments, "status": "completed"})
	}
	resp := responseObject(cc.ID, cc.Created, model, output, ch.FinishReason, responsesUsage(cc.Usage))
	return json.Marshal(resp)
}

func messageItem(id, text, status string) map[string]any {
	return map[string]any{"type": "message", "id": id, "status": status, "role": "assistant",
		"content": []map[string]any{{"type": "output_text", "text": text, "annotations": []any{}}}}
}

// responseObject is a Response (status from the chat finish reason).
func responseObject(id string, created int64, model string, output []map[string]any, finish string, usage map[string]any) map[string]any {
	if output == nil {
		output = []map[string]any{}
	}
	r := map[string]any{"id": "resp_" + strings.TrimPrefix(id, "chatcmpl-"), "object": "response", "created_at": created,
		"status": "completed", "model": model, "output": output, "usage": usage, "error": nil, "incomplete_details": nil}
	switch finish {
	case "length":
		r["status"] = "incomplete"
		r["incomplete_details"] = map[string]string{"reason": "max_output_tokens"}
	case "content_filter": // an Anthropic refusal, say
		r["status"] = "incomplete"
		r["incomplete_details"] = map[string]string{"reason": "content_filter"}
	}
	return r
}
