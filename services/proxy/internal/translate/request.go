package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// defaultMaxTokens is the Anthropic max_tokens sent when an OpenAI request
// sets no limit: Anthropic requires one.
const defaultMaxTokens = 4096

// partSeparator joins texts that one format keeps apart and the other wants
// as one string: several system prompts, or the text blocks of a message.
const partSeparator = "\n\n"

// ChatToMessages translates an OpenAI chat completion request into an
// Anthropic messages request for upstreamModel.
//
// System and developer messages, wherever they appear, become the top-level
// system prompt, joined by a blank line. Consecutive messages of the same
// role are merged into one turn of text blocks, as Anthropic wants turns to
// alternate. A request using a feature listed in the package documentation
// as not translated fails with an *UnsupportedError; a body that is not a
// chat request fails with an error wrapping ErrMalformed.
func ChatToMessages(body []byte, upstreamModel string) ([]byte, error) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, malformed("OpenAI chat request", err)
	}
	if err := req.checkSupported(); err != nil {
		return nil, err
	}
	out := messagesRequestOut{
		Model:       upstreamModel,
		MaxTokens:   defaultMaxTokens,
		Temperature: req.Temperature,
		TopP:        req.TopP,
		Stream:      req.Stream,
	}
	if t := req.Temperature; t != nil && *t > 1 {
		out.Temperature = ptr(1.0) // OpenAI's range is 0 to 2, Anthropic's 0 to 1
	}
	switch {
	case req.MaxCompletionTokens != nil:
		out.MaxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		out.MaxTokens = *req.MaxTokens
	}
	if present(req.ReasoningEffort) {
		var effort string
		if err := json.Unmarshal(req.ReasoningEffort, &effort); err != nil {
			return nil, malformed("OpenAI chat request reasoning_effort", err)
		}
		if err := anthropicThinkingFor(&out, effort, req.MaxCompletionTokens != nil || req.MaxTokens != nil); err != nil {
			return nil, err
		}
	}
	if out.Thinking != nil {
		// Anthropic refuses thinking beside a temperature other than 1 or
		// a top_p below 0.95; OpenAI's reasoning models ignore both.
		out.Temperature, out.TopP = nil, nil
	}
	stops, err := parseStop(req.Stop)
	if err != nil {
		return nil, err
	}
	out.StopSequences = stops
	if req.User != "" {
		out.Metadata = &anthropicMetadata{UserID: req.User}
	}

	if len(req.Tools) > 0 {
		if out.Tools, err = anthropicTools(req.Tools); err != nil {
			return nil, fmt.Errorf("OpenAI chat request: %w", err)
		}
		if out.ToolChoice, err = anthropicToolChoiceFor(req.ToolChoice, req.ParallelToolCalls); err != nil {
			return nil, err
		}
		if err := checkReservedTools(req.Tools); err != nil {
			return nil, err
		}
	} else if err := checkNoToolChoice(req.ToolChoice); err != nil {
		return nil, err
	}
	instruction, err := applyResponseFormat(&out, req.ResponseFormat)
	if err != nil {
		return nil, err
	}
	// After applyResponseFormat, which drops response_format for a forced
	// tool call.
	toolInstruction := relaxToolChoiceForThinking(&out)
	if req.WebSearchOptions != nil {
		out.Tools = append(out.Tools, anthropicWebSearchTool(req.WebSearchOptions))
	}

	var system []anthropicBlock
	type turn struct {
		role     string
		blocks   []anthropicBlock
		isString bool // one message with string content
	}
	turns := make([]turn, 0, len(req.Messages))
	for i := range req.Messages {
		m := &req.Messages[i]
		role, blocks, isString, err := chatMessageBlocks(m)
		if err != nil {
			return nil, fmt.Errorf("OpenAI chat request: messages[%d]: %w", i, err)
		}
		if role == "system" {
			for _, b := range blocks {
				if b.Text != "" {
					system = append(system, b)
				}
			}
			continue
		}
		if n := len(turns); n > 0 && turns[n-1].role == role {
			turns[n-1].blocks = append(turns[n-1].blocks, blocks...)
			turns[n-1].isString = false
			continue
		}
		turns = append(turns, turn{role: role, blocks: blocks, isString: isString})
	}
	for _, in := range [...]string{instruction, toolInstruction} {
		if in != "" {
			system = append(system, anthropicBlock{Type: "text", Text: in})
		}
	}
	out.System = systemPrompt(system)
	out.Messages = make([]anthropicMessageOut, len(turns))
	for i, t := range turns {
		out.Messages[i].Role = t.role
		blocks := t.blocks[:0]
		for _, b := range t.blocks {
			if b.Type != "text" || b.Text != "" {
				blocks = append(blocks, b)
			}
		}
		switch {
		case len(blocks) == 0:
			out.Messages[i].Content = ""
		case len(blocks) == 1 && blocks[0].Type == "text" && t.isString && blocks[0].CacheControl == nil:
			out.Messages[i].Content = blocks[0].Text
		default:
			out.Messages[i].Content = blocks
		}
	}
	return marshal(&out)
}

// chatMessageBlocks returns the Anthropic role ("system" for system and
// developer messages) and content blocks of an OpenAI message: text blocks
// then tool_use blocks for an assistant, a tool_result block for a tool
// message. isString reports string content.
func chatMessageBlocks(m *chatMessage) (role string, blocks []anthropicBlock, isString bool, err error) {
	switch m.Role {
	case "system", "developer", "user", "assistant":
	case "tool":
		b, err := toolResultBlock(m)
		if err != nil {
			return "", nil, false, err
		}
		return "user", []anthropicBlock{b}, false, nil
	case "function":
		return "", nil, false, unsupported("functions")
	default:
		return "", nil, false, fmt.Errorf("unknown role %q: %w", m.Role, ErrMalformed)
	}
	if len(m.ToolCalls) > 0 && m.Role != "assistant" {
		return "", nil, false, fmt.Errorf("tool_calls in a %s message: %w", m.Role, ErrMalformed)
	}
	content, isString, err := chatBlocks(m)
	if err != nil {
		return "", nil, false, err
	}
	if m.Role == "system" || m.Role == "developer" {
		if _, err := textOnly(content, m.Role+" messages"); err != nil {
			return "", nil, false, err
		}
	}
	var thinking []anthropicBlock
	if m.Role == "assistant" {
		// reasoning_content is dropped: without a signature Anthropic
		// refuses it.
		thinking = signedThinking(m.ThinkingBlocks)
	}
	blocks = make([]anthropicBlock, 0, len(thinking)+len(content)+len(m.ToolCalls))
	blocks = append(blocks, thinking...)
	blocks = append(blocks, content...)
	for j := range m.ToolCalls {
		b, err := toolUseBlock(&m.ToolCalls[j])
		if err != nil {
			return "", nil, false, fmt.Errorf("tool_calls[%d]: %w", j, err)
		}
		blocks = append(blocks, b)
	}
	if m.Role == "developer" {
		return "system", blocks, isString, nil
	}
	return m.Role, blocks, isString && len(m.ToolCalls) == 0 && len(thinking) == 0, nil
}

// systemPrompt is the Anthropic system prompt of the text blocks of the
// system and developer messages: a string, joined by a blank line, unless a
// block carries cache_control, which only blocks can keep.
func systemPrompt(blocks []anthropicBlock) any {
	texts := make([]string, len(blocks))
	for i, b := range blocks {
		if b.CacheControl != nil {
			return blocks
		}
		texts[i] = b.Text
	}
	if len(texts) == 0 {
		return nil
	}
	return strings.Join(texts, partSeparator)
}

// checkNoToolChoice accepts a tool_choice without tools only when it asks
// for no tool call: "none" or "auto", dropped.
func checkNoToolChoice(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if !present(raw) || bytes.Equal(raw, []byte(`"none"`)) || bytes.Equal(raw, []byte(`"auto"`)) {
		return nil
	}
	return fmt.Errorf("OpenAI chat request: tool_choice without tools: %w", ErrMalformed)
}

// checkSupported refuses the request parameters that have no translation.
func (r *chatRequest) checkSupported() error {
	switch {
	case presentNonEmpty(r.Functions),
		present(r.FunctionCall) && !bytes.Equal(bytes.TrimSpace(r.FunctionCall), []byte(`"none"`)):
		return unsupported("functions")
	case r.N != nil && *r.N > 1:
		return unsupported("n > 1")
	case r.Logprobs != nil && *r.Logprobs, r.TopLogprobs != nil && *r.TopLogprobs > 0:
		return unsupported("logprobs")
	case present(r.Audio):
		return unsupported("audio output")
	}
	for _, m := range r.Modalities {
		if m != "text" {
			return unsupported("audio output")
		}
	}
	return nil
}

// parseStop reads OpenAI's stop: null, a string, or an array of strings.
// Sequences that are empty or whitespace alone ("\n") are dropped:
// Anthropic refuses them.
func parseStop(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if !present(raw) {
		return nil, nil
	}
	var stops []string
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, malformed("OpenAI chat request stop", err)
		}
		stops = []string{s}
	} else if err := json.Unmarshal(raw, &stops); err != nil {
		return nil, malformed("OpenAI chat request stop", err)
	}
	stops = slices.DeleteFunc(stops, func(s string) bool { return strings.TrimSpace(s) == "" })
	if len(stops) == 0 {
		return nil, nil
	}
	return stops, nil
}

// MessagesToChat translates an Anthropic messages request into an OpenAI
// chat completion request for upstreamModel.
//
// The system prompt becomes a first system message; text blocks are joined
// by a blank line into string content. A streaming request asks for usage
// (stream_options.include_usage) so the stream's usage can be translated.
// Errors are as for ChatToMessages.
func MessagesToChat(body []byte, upstreamModel string) ([]byte, error) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, malformed("Anthropic messages request", err)
	}
	if err := req.checkSupported(); err != nil {
		return nil, err
	}
	out := chatRequestOut{
		Model:       upstreamModel,
		MaxTokens:   req.MaxTokens,
		Temperature: req.Temperature,
		TopP:        req.TopP,
		Stop:        req.StopSequences,
		Stream:      req.Stream,
		User:        req.Metadata.UserID,
	}
	if req.Stream {
		out.StreamOptions = &chatStreamOptions{IncludeUsage: true}
	}
	if t := req.Thinking; t != nil {
		switch t.Type {
		case "enabled":
			out.ReasoningEffort = effortFor(t.BudgetTokens)
		case "adaptive":
			out.ReasoningEffort = effortForAdaptive(req.OutputConfig.Effort)
		case "disabled":
		default:
			return nil, fmt.Errorf("Anthropic messages request: thinking type %q: %w", t.Type, ErrMalformed)
		}
		if out.ReasoningEffort != "" {
			// OpenAI's reasoning models take max_completion_tokens alone.
			out.MaxTokens, out.MaxCompletionTokens = nil, req.MaxTokens
		}
	}
	if len(out.Stop) == 0 {
		out.Stop = nil
	}
	var err error
	if out.ResponseFormat, err = chatResponseFormatFor(&req); err != nil {
		return nil, err
	}
	tools, search, err := splitServerTools(req.Tools)
	if err != nil {
		return nil, err
	}
	if search != nil {
		if out.WebSearchOptions, err = chatWebSearchOptionsFor(search); err != nil {
			return nil, err
		}
	}
	if len(tools) > 0 {
		if out.Tools, err = chatTools(tools); err != nil {
			return nil, fmt.Errorf("Anthropic messages request: %w", err)
		}
		if out.ToolChoice, out.ParallelToolCalls, err = chatToolChoiceFor(req.ToolChoice); err != nil {
			return nil, err
		}
	} else if tc := req.ToolChoice; tc != nil && tc.Type != "none" && tc.Type != "auto" && (search == nil || tc.Type != "any") {
		return nil, fmt.Errorf("Anthropic messages request: tool_choice without tools: %w", ErrMalformed)
	}
	system, err := anthropicTexts(req.System, "")
	if err != nil {
		return nil, fmt.Errorf("Anthropic messages request: system: %w", err)
	}
	out.Messages = make([]chatMessageOut, 0, len(req.Messages)+1)
	if system = nonEmpty(system); len(system) > 0 {
		out.Messages = append(out.Messages, chatMessageOut{Role: "system", Content: ptr(strings.Join(system, partSeparator))})
	}
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return nil, fmt.Errorf("Anthropic messages request: messages[%d]: unknown role %q: %w", i, m.Role, ErrMalformed)
		}
		if out.Messages, err = appendChatMessages(out.Messages, m); err != nil {
			return nil, fmt.Errorf("Anthropic messages request: messages[%d]: %w", i, err)
		}
	}
	return marshal(&out)
}

// appendChatMessages appends the OpenAI messages for an Anthropic message.
// An assistant's text blocks, joined by a blank line, become its content and
// its tool_use blocks its tool_calls. A user's tool_result blocks become tool
// messages, each in place, and its text blocks the user message after them
// (OpenAI wants tool messages right after the assistant's tool calls, as
// Anthropic wants the results first in the turn).
func appendChatMessages(msgs []chatMessageOut, m anthropicMessage) ([]chatMessageOut, error) {
	raw := bytes.TrimSpace(m.Content)
	if !present(raw) || raw[0] != '[' {
		texts, err := anthropicTexts(raw, "")
		if err != nil {
			return nil, err
		}
		return append(msgs, chatMessageOut{Role: m.Role, Content: ptr(strings.Join(texts, partSeparator))}), nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	var texts []string
	var parts []chatPartOut
	mediaParts := false // parts has images or files: content is parts
	var calls []chatToolCall
	for i := range blocks {
		b := &blocks[i]
		switch {
		case b.Type == "text":
			texts = append(texts, b.Text)
			if b.Text != "" {
				parts = append(parts, chatPartOut{Type: "text", Text: &b.Text})
			}
		case (b.Type == "image" || b.Type == "document") && m.Role == "user":
			p, err := chatPartFor(b)
			if err != nil {
				return nil, fmt.Errorf("content[%d]: %w", i, err)
			}
			parts = append(parts, p)
			if p.Type == "file" || p.Type == "image_url" {
				mediaParts = true
			} else {
				texts = append(texts, *p.Text)
			}
		case b.Type == "tool_use" && m.Role == "assistant":
			call, err := chatToolCallFor(b)
			if err != nil {
				return nil, err
			}
			calls = append(calls, call)
		case (b.Type == "thinking" || b.Type == "redacted_thinking") && m.Role == "assistant":
			// Dropped: OpenAI takes no reasoning back.
		case b.Type == "tool_result" && m.Role == "user":
			// OpenAI tool messages hold text alone.
			results, err := anthropicTexts(b.Content, "tool results")
			if err != nil {
				return nil, fmt.Errorf("tool_result %q: %w", b.ToolUseID, err)
			}
			msgs = append(msgs, chatMessageOut{Role: "tool", ToolCallID: b.ToolUseID, Content: ptr(strings.Join(nonEmpty(results), partSeparator))})
		default:
			return nil, blockError(b.Type)
		}
	}
	text := strings.Join(nonEmpty(texts), partSeparator)
	switch {
	case mediaParts:
		msgs = append(msgs, chatMessageOut{Role: m.Role, Content: parts})
	case len(calls) > 0:
		out := chatMessageOut{Role: m.Role, ToolCalls: calls}
		if text != "" {
			out.Content = &text
		}
		msgs = append(msgs, out)
	case text != "" || len(texts) > 0 || len(blocks) == 0 || m.Role == "assistant":
		// An assistant turn of thinking alone stays a turn, empty.
		msgs = append(msgs, chatMessageOut{Role: m.Role, Content: &text})
	}
	return msgs, nil
}

func ptr[T any](v T) *T { return &v }

// checkSupported refuses the request parameters that have no translation.
func (r *messagesRequest) checkSupported() error {
	switch {
	case presentNonEmpty(r.MCPServers):
		return unsupported("mcp_servers")
	case present(r.Container):
		return unsupported("container")
	}
	return nil
}
