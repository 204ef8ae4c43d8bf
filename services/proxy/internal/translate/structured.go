package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Structured output: OpenAI's response_format has no Anthropic parameter
// of the same meaning that every model takes, so a json_schema becomes a
// tool the model is made to call, whose input is the answer, and json_object
// an instruction in the system prompt.

// jsonTool names the tool carrying a json_schema response. It is reserved:
// an OpenAI caller's function of this name is refused, and a tool_use of
// this name in an Anthropic response is the answer, given as content.
const jsonTool = "json_response"

// jsonObjectInstruction is added to the system prompt for
// response_format json_object.
const jsonObjectInstruction = "Respond only with a single valid JSON object, with no text before or after it."

// jsonToolInstruction is added to the system prompt when the model cannot
// be forced to call the json_response tool (with thinking, which allows
// tool_choice auto alone).
const jsonToolInstruction = "Give your final answer by calling the " + jsonTool + " tool, with the answer as its input, and write no other text."

// applyResponseFormat translates an OpenAI response_format into out's tools
// and tool_choice, once those of the caller are set. It returns an
// instruction for the system prompt, or "".
//
// For json_schema the json_response tool is added, its input_schema the
// schema, and the model is made to answer with it: tool_choice names it
// when the caller has no tools or chose none; with tools and tool_choice
// auto (or none given) it becomes any (a tool call, the caller's or the
// answer); with tool_choice required or a named function the caller wants
// a tool call, and response_format is dropped. With thinking, which
// Anthropic allows with tool_choice auto alone, the system prompt asks for
// the tool instead.
func applyResponseFormat(out *messagesRequestOut, raw json.RawMessage) (string, error) {
	if !present(raw) {
		return "", nil
	}
	var rf chatResponseFormat
	if err := json.Unmarshal(raw, &rf); err != nil {
		return "", malformed("OpenAI chat request response_format", err)
	}
	switch rf.Type {
	case "text":
		return "", nil
	case "json_object":
		return jsonObjectInstruction, nil
	case "json_schema":
	default:
		return "", unsupported(fmt.Sprintf("response_format of type %q", rf.Type))
	}
	js := rf.JSONSchema
	if js == nil || js.Name == "" {
		return "", fmt.Errorf("OpenAI chat request: response_format json_schema without a name: %w", ErrMalformed)
	}
	schema := js.Schema
	if !present(schema) {
		schema = emptySchema
	}
	var root struct {
		Type json.RawMessage `json:"type"`
	}
	if err := json.Unmarshal(schema, &root); err != nil {
		return "", malformed("OpenAI chat request response_format json_schema schema", err)
	}
	if present(root.Type) && !bytes.Equal(bytes.TrimSpace(root.Type), []byte(`"object"`)) {
		return "", unsupported("response_format json_schema whose root is not an object")
	}
	tc := out.ToolChoice
	if tc != nil && (tc.Type == "any" || tc.Type == "tool") {
		return "", nil // the caller wants a tool call: no answer to shape
	}
	desc := "Respond with the " + js.Name + " JSON object, as this tool's input."
	if js.Description != "" {
		desc += " " + js.Description
	}
	out.Tools = append(out.Tools, anthropicTool{Name: jsonTool, Description: desc, InputSchema: schema})
	if out.Thinking != nil {
		if tc != nil && tc.Type == "none" {
			out.ToolChoice = &anthropicToolChoice{Type: "auto"}
		}
		return jsonToolInstruction, nil
	}
	switch {
	case len(out.Tools) > 1 && (tc == nil || tc.Type == "auto"):
		out.ToolChoice = &anthropicToolChoice{Type: "any"}
		if tc != nil {
			out.ToolChoice.DisableParallelToolUse = tc.DisableParallelToolUse
		}
	default:
		out.ToolChoice = &anthropicToolChoice{Type: "tool", Name: jsonTool}
	}
	return "", nil
}

// checkReservedTools refuses an OpenAI caller's function named like the
// tool of json_schema responses.
func checkReservedTools(tools []chatTool) error {
	for i, t := range tools {
		if t.Function.Name == jsonTool {
			return fmt.Errorf("OpenAI chat request: tools[%d]: the function name %q is reserved by the gateway for response_format: %w", i, jsonTool, ErrMalformed)
		}
	}
	return nil
}

// chatResponseFormatFor translates Anthropic's structured output format
// (output_config.format, or the beta's output_format) into an OpenAI
// response_format json_schema, strict as Anthropic's always is, named
// "response" (OpenAI wants a name).
func chatResponseFormatFor(req *messagesRequest) (*chatResponseFormat, error) {
	f := req.OutputConfig.Format
	if f == nil {
		f = req.OutputFormat
	}
	if f == nil {
		return nil, nil
	}
	if f.Type != "json_schema" {
		return nil, unsupported(fmt.Sprintf("output format of type %q", f.Type))
	}
	if !present(f.Schema) {
		return nil, fmt.Errorf("Anthropic messages request: json_schema output format without a schema: %w", ErrMalformed)
	}
	return &chatResponseFormat{Type: "json_schema", JSONSchema: &chatJSONSchema{Name: "response", Schema: f.Schema, Strict: ptr(true)}}, nil
}
