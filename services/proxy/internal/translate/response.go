package translate

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MessagesResponseToChat translates an Anthropic message into an OpenAI
// chat.completion answering for model, the name the caller asked for.
//
// Text blocks are concatenated into the message content (null when there
// are tool calls and no text); tool_use blocks become tool_calls, with the
// input as compact JSON arguments; thinking blocks become reasoning_content
// (their text) and thinking_blocks (the blocks, signed, redacted ones too, to
// be sent back); a call of the json_response tool (see ChatToMessages and
// response_format) becomes the content, its input as compact JSON, and
// finish_reason "stop". Any other block (a server tool's, say) fails
// with an *UnsupportedError.
func MessagesResponseToChat(body []byte, model string) ([]byte, error) {
	var in anthropicResponse
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, malformed("Anthropic message", err)
	}
	if in.Type != "message" && in.Type != "" {
		return nil, fmt.Errorf("decode Anthropic message: type is %q: %w", in.Type, ErrMalformed)
	}
	var sb strings.Builder
	var calls []chatToolCall
	var thinking []anthropicBlock
	var answer *string // the input of the json_response tool
	var annotations []chatAnnotation
	runes := 0 // the characters of sb, where a block's annotations start
	for i := range in.Content {
		b := &in.Content[i]
		switch b.Type {
		case "thinking", "redacted_thinking":
			thinking = append(thinking, anthropicBlock{Type: b.Type, Thinking: b.Thinking, Signature: b.Signature, Data: b.Data})
		case "text":
			annotations = appendAnnotations(annotations, b, runes)
			sb.WriteString(b.Text)
			runes += utf8.RuneCountInString(b.Text)
		case "server_tool_use", "web_search_tool_result":
			if b.Type == "server_tool_use" && b.Name != webSearchToolName {
				return nil, fmt.Errorf("Anthropic message: %w", blockError(b.Type))
			}
			// The search itself: the chat format shows its citations alone.
		case "tool_use":
			call, err := chatToolCallFor(b)
			if err != nil {
				return nil, fmt.Errorf("decode Anthropic message: %w", err)
			}
			if b.Name == jsonTool {
				// The answer to a response_format json_schema.
				answer = &call.Function.Arguments
				continue
			}
			calls = append(calls, call)
		default:
			return nil, fmt.Errorf("Anthropic message: %w", blockError(b.Type))
		}
	}
	msg := chatResponseMessage{Role: "assistant", ToolCalls: calls, ReasoningContent: reasoningText(thinking), ThinkingBlocks: thinking, Annotations: annotations}
	switch content := sb.String(); {
	case answer != nil:
		msg.Content = answer // text around it would spoil the JSON
	case content != "" || len(calls) == 0:
		msg.Content = &content // null beside tool calls, as OpenAI writes it
	}
	out := chatCompletion{
		ID:      chatIDFromMessageID(in.ID),
		Object:  "chat.completion",
		Created: now().Unix(),
		Model:   model,
		Choices: []chatChoice{{Message: msg}},
		Usage:   chatUsageFrom(in.Usage),
	}
	if in.StopReason != nil {
		fr := finishReasonFor(*in.StopReason)
		if fr == "tool_calls" && len(calls) == 0 {
			fr = "stop" // the json_response tool alone: an answer
		}
		out.Choices[0].FinishReason = &fr
	}
	return marshal(&out)
}

// ChatResponseToMessages translates an OpenAI chat.completion into an
// Anthropic message answering for model, the name the caller asked for.
//
// The content becomes a text block, then each tool call a tool_use block
// whose input is the parsed arguments (arguments that are not a JSON object
// are an error wrapping ErrMalformed). A refusal becomes a text block with
// stop_reason "refusal". Legacy function calls, audio and more than one
// choice fail with an *UnsupportedError.
func ChatResponseToMessages(body []byte, model string) ([]byte, error) {
	var in chatCompletion
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, malformed("OpenAI chat completion", err)
	}
	switch {
	case len(in.Choices) == 0:
		return nil, fmt.Errorf("decode OpenAI chat completion: no choices: %w", ErrMalformed)
	case len(in.Choices) > 1:
		return nil, unsupported("n > 1")
	}
	c := &in.Choices[0]
	switch {
	case present(c.Message.FunctionCall):
		return nil, unsupported("functions")
	case present(c.Message.Audio):
		return nil, unsupported("audio content")
	}
	out := anthropicResponse{
		ID:      messageIDFromChatID(in.ID),
		Type:    "message",
		Role:    "assistant",
		Model:   model,
		Content: []anthropicBlock{},
		Usage:   anthropicUsageFrom(in.Usage),
	}
	if c.FinishReason != nil {
		sr := stopReasonFor(*c.FinishReason)
		out.StopReason = &sr
	}
	switch {
	case len(c.Message.ThinkingBlocks) > 0:
		out.Content = append(out.Content, signedThinking(c.Message.ThinkingBlocks)...)
	case c.Message.ReasoningContent != nil && *c.Message.ReasoningContent != "":
		// Reasoning from an OpenAI-compatible provider, unsigned.
		out.Content = append(out.Content, anthropicBlock{Type: "thinking", Thinking: *c.Message.ReasoningContent, Signature: ptr("")})
	}
	if m := c.Message.Content; m != nil && *m != "" {
		out.Content = append(out.Content, anthropicBlock{Type: "text", Text: *m})
	}
	if r := c.Message.Refusal; r != nil && *r != "" {
		out.Content = append(out.Content, anthropicBlock{Type: "text", Text: *r})
		sr := "refusal"
		out.StopReason = &sr
	}
	for i := range c.Message.ToolCalls {
		call := &c.Message.ToolCalls[i]
		b, err := toolUseBlock(call)
		if err != nil {
			return nil, fmt.Errorf("decode OpenAI chat completion: tool_calls[%d]: %w", i, err)
		}
		if b.ID == "" {
			b.ID = toolUseIDPrefix + newIDSuffix()
		}
		out.Content = append(out.Content, b)
	}
	return marshal(&out)
}

// finishReasonFor maps an Anthropic stop_reason to an OpenAI finish_reason.
func finishReasonFor(stopReason string) string {
	switch stopReason {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop" // end_turn, stop_sequence, pause_turn
}

// stopReasonFor maps an OpenAI finish_reason to an Anthropic stop_reason.
// OpenAI does not say whether "stop" was a stop sequence, so it is end_turn.
func stopReasonFor(finishReason string) string {
	switch finishReason {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

// chatUsageFrom maps Anthropic usage to OpenAI's, where prompt_tokens
// includes the cache reads and writes, and cached_tokens counts the reads.
func chatUsageFrom(u anthropicUsage) *chatUsage {
	prompt := u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
	return &chatUsage{
		PromptTokens:        prompt,
		CompletionTokens:    u.OutputTokens,
		TotalTokens:         prompt + u.OutputTokens,
		PromptTokensDetails: &chatPromptTokenUse{CachedTokens: u.CacheReadInputTokens},
	}
}

// anthropicUsageFrom maps OpenAI usage to Anthropic's, where input_tokens
// excludes the cached tokens.
func anthropicUsageFrom(u *chatUsage) anthropicUsage {
	if u == nil {
		return anthropicUsage{}
	}
	cached := 0
	if u.PromptTokensDetails != nil {
		cached = min(u.PromptTokensDetails.CachedTokens, u.PromptTokens)
	}
	return anthropicUsage{
		InputTokens:          u.PromptTokens - cached,
		CacheReadInputTokens: cached,
		OutputTokens:         u.CompletionTokens,
	}
}
