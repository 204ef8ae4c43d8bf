package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Tool definitions, tool choices, tool calls and tool results, between
// OpenAI's function tools and Anthropic's client tools.

// emptySchema is the input_schema of a function declared without
// parameters: OpenAI reads that as "no arguments", Anthropic requires one.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

// anthropicTools translates OpenAI tool definitions.
func anthropicTools(tools []chatTool) ([]anthropicTool, error) {
	out := make([]anthropicTool, len(tools))
	for i, t := range tools {
		if t.Type != "function" {
			return nil, fmt.Errorf("tools[%d]: %w", i, unsupported(fmt.Sprintf("tools of type %q", t.Type)))
		}
		if t.Function.Name == "" {
			return nil, fmt.Errorf("tools[%d]: function without a name: %w", i, ErrMalformed)
		}
		schema := t.Function.Parameters
		if !present(schema) {
			schema = emptySchema
		}
		out[i] = anthropicTool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: schema, CacheControl: t.CacheControl}
	}
	return out, nil
}

// chatTools translates Anthropic client tool definitions.
func chatTools(tools []anthropicTool) ([]chatTool, error) {
	out := make([]chatTool, len(tools))
	for i, t := range tools {
		if t.Type != "" && t.Type != "custom" {
			return nil, fmt.Errorf("tools[%d]: %w", i, unsupported(fmt.Sprintf("tools of type %q", t.Type)))
		}
		if t.Name == "" {
			return nil, fmt.Errorf("tools[%d]: tool without a name: %w", i, ErrMalformed)
		}
		out[i] = chatTool{Type: "function", Function: chatFunction{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}}
	}
	return out, nil
}

// anthropicToolChoice translates OpenAI's tool_choice and
// parallel_tool_calls, for a request with tools: "auto" -> auto, "required"
// -> any, a named function -> tool, "none" -> none; parallel_tool_calls
// false -> disable_parallel_tool_use (which tool_choice none cannot carry).
// It returns nil when both are absent.
func anthropicToolChoiceFor(raw json.RawMessage, parallel *bool) (*anthropicToolChoice, error) {
	var tc anthropicToolChoice
	raw = bytes.TrimSpace(raw)
	switch {
	case !present(raw):
		if parallel == nil || *parallel {
			return nil, nil
		}
		tc.Type = "auto"
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, malformed("OpenAI chat request tool_choice", err)
		}
		switch s {
		case "auto", "none":
			tc.Type = s
		case "required":
			tc.Type = "any"
		default:
			return nil, fmt.Errorf("OpenAI chat request: tool_choice %q: %w", s, ErrMalformed)
		}
	default:
		var named chatNamedToolChoice
		if err := json.Unmarshal(raw, &named); err != nil {
			return nil, malformed("OpenAI chat request tool_choice", err)
		}
		if named.Type != "function" {
			return nil, unsupported(fmt.Sprintf("tool_choice of type %q", named.Type))
		}
		if named.Function.Name == "" {
			return nil, fmt.Errorf("OpenAI chat request: tool_choice function without a name: %w", ErrMalformed)
		}
		tc.Type, tc.Name = "tool", named.Function.Name
	}
	tc.DisableParallelToolUse = parallel != nil && !*parallel && tc.Type != "none"
	return &tc, nil
}

// relaxToolChoiceForThinking makes a forced tool call (tool_choice any, or
// a named tool) of a request with thinking, which Anthropic allows with
// tool_choice auto and none alone, tool_choice auto (keeping
// disable_parallel_tool_use), and returns an instruction for the system
// prompt that asks for the call instead, as applyResponseFormat asks for
// the json_response tool; "" when nothing changed.
func relaxToolChoiceForThinking(out *messagesRequestOut) string {
	tc := out.ToolChoice
	if out.Thinking == nil || tc == nil || tc.Type != "any" && tc.Type != "tool" {
		return ""
	}
	out.ToolChoice = &anthropicToolChoice{Type: "auto", DisableParallelToolUse: tc.DisableParallelToolUse}
	if tc.Type == "tool" {
		return fmt.Sprintf(namedToolInstruction, tc.Name)
	}
	return anyToolInstruction
}

// The instructions of relaxToolChoiceForThinking.
const (
	anyToolInstruction   = "Answer by calling one or more of the tools provided, not with text alone."
	namedToolInstruction = "Answer by calling the %s tool, not with text alone."
)

// chatToolChoiceFor translates Anthropic's tool_choice, for a request with
// tools, into OpenAI's tool_choice and parallel_tool_calls.
func chatToolChoiceFor(tc *anthropicToolChoice) (choice any, parallel *bool, err error) {
	if tc == nil {
		return nil, nil, nil
	}
	switch tc.Type {
	case "auto", "none":
		choice = tc.Type
	case "any":
		choice = "required"
	case "tool":
		if tc.Name == "" {
			return nil, nil, fmt.Errorf("Anthropic messages request: tool_choice tool without a name: %w", ErrMalformed)
		}
		named := chatNamedToolChoice{Type: "function"}
		named.Function.Name = tc.Name
		choice = named
	default:
		return nil, nil, fmt.Errorf("Anthropic messages request: tool_choice type %q: %w", tc.Type, ErrMalformed)
	}
	if tc.DisableParallelToolUse && tc.Type != "none" {
		f := false
		parallel = &f
	}
	return choice, parallel, nil
}

// toolUseBlock translates an OpenAI tool call into a tool_use block. The
// arguments must be a JSON object (or empty, read as no arguments).
func toolUseBlock(call *chatToolCall) (anthropicBlock, error) {
	if call.Type != "function" && call.Type != "" {
		return anthropicBlock{}, unsupported(fmt.Sprintf("tool calls of type %q", call.Type))
	}
	input, err := argumentsObject(call.Function.Arguments)
	if err != nil {
		return anthropicBlock{}, fmt.Errorf("tool call %q (%s): %w", call.ID, call.Function.Name, err)
	}
	return anthropicBlock{Type: "tool_use", ID: call.ID, Name: call.Function.Name, Input: input}, nil
}

// argumentsObject checks that a tool call's arguments are a JSON object and
// returns them compacted.
func argumentsObject(args string) (json.RawMessage, error) {
	if strings.TrimSpace(args) == "" {
		return json.RawMessage(`{}`), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(args)); err != nil {
		return nil, fmt.Errorf("arguments are not valid JSON: %w: %w", ErrMalformed, err)
	}
	if buf.Bytes()[0] != '{' {
		return nil, fmt.Errorf("arguments are not a JSON object: %w", ErrMalformed)
	}
	return buf.Bytes(), nil
}

// chatToolCallFor translates a tool_use block into an OpenAI tool call
// whose arguments are the compact JSON of the input.
func chatToolCallFor(b *anthropicBlock) (chatToolCall, error) {
	call := chatToolCall{ID: b.ID, Type: "function"}
	call.Function.Name = b.Name
	if !present(b.Input) {
		call.Function.Arguments = "{}"
		return call, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b.Input); err != nil {
		return call, fmt.Errorf("tool_use %q input: %w: %w", b.ID, ErrMalformed, err)
	}
	if buf.Bytes()[0] != '{' {
		return call, fmt.Errorf("tool_use %q input is not a JSON object: %w", b.ID, ErrMalformed)
	}
	call.Function.Arguments = buf.String()
	return call, nil
}

// toolResultBlock translates an OpenAI tool message into a tool_result
// block: string content stays a string, text parts become text blocks.
func toolResultBlock(m *chatMessage) (anthropicBlock, error) {
	if m.ToolCallID == "" {
		return anthropicBlock{}, fmt.Errorf("tool message without a tool_call_id: %w", ErrMalformed)
	}
	b := anthropicBlock{Type: "tool_result", ToolUseID: m.ToolCallID}
	content, isString, err := chatBlocks(m)
	if err != nil {
		return b, err
	}
	blocks := content[:0]
	for _, c := range content {
		if c.Type != "text" || c.Text != "" {
			blocks = append(blocks, c)
		}
	}
	switch {
	case len(blocks) == 0:
	case len(blocks) == 1 && isString:
		b.Content = quote(blocks[0].Text)
	default:
		if b.Content, err = marshal(blocks); err != nil {
			return b, err
		}
	}
	return b, nil
}
