package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	switch {
	case req.MaxCompletionTokens != nil:
		out.MaxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		out.MaxTokens = *req.MaxTokens
	}
	stops, err := parseStop(req.Stop)
	if err != nil {
		return nil, err
	}
	out.StopSequences = stops
	if req.User != "" {
		out.Metadata = &anthropicMetadata{UserID: req.User}
	}

	var system []string
	type turn struct {
		role     string
		texts    []string
		isString bool // one message with string content
	}
	turns := make([]turn, 0, len(req.Messages))
	for i := range req.Messages {
		m := &req.Messages[i]
		texts, isString, err := chatTexts(m)
		if err != nil {
			return nil, fmt.Errorf("OpenAI chat request: messages[%d]: %w", i, err)
		}
		switch m.Role {
		case "system", "developer":
			system = append(system, nonEmpty(texts)...)
		case "user", "assistant":
			if n := len(turns); n > 0 && turns[n-1].role == m.Role {
				turns[n-1].texts = append(turns[n-1].texts, texts...)
				turns[n-1].isString = false
				continue
			}
			turns = append(turns, turn{role: m.Role, texts: texts, isString: isString})
		case "tool", "function":
			return nil, fmt.Errorf("OpenAI chat request: messages[%d]: %w", i, unsupported("tool results"))
		default:
			return nil, fmt.Errorf("OpenAI chat request: messages[%d]: unknown role %q: %w", i, m.Role, ErrMalformed)
		}
	}
	out.System = strings.Join(system, partSeparator)
	out.Messages = make([]anthropicMessageOut, len(turns))
	for i, t := range turns {
		out.Messages[i].Role = t.role
		texts := nonEmpty(t.texts)
		switch {
		case len(texts) == 0:
			out.Messages[i].Content = ""
		case len(texts) == 1 && t.isString:
			out.Messages[i].Content = texts[0]
		default:
			blocks := make([]anthropicBlock, len(texts))
			for j, s := range texts {
				blocks[j] = anthropicBlock{Type: "text", Text: s}
			}
			out.Messages[i].Content = blocks
		}
	}
	return marshal(&out)
}

// checkSupported refuses the request parameters that have no translation.
func (r *chatRequest) checkSupported() error {
	switch {
	case presentNonEmpty(r.Tools), presentNonEmpty(r.Functions):
		return unsupported("tools")
	case present(r.ToolChoice) && !bytes.Equal(bytes.TrimSpace(r.ToolChoice), []byte(`"none"`)),
		present(r.FunctionCall) && !bytes.Equal(bytes.TrimSpace(r.FunctionCall), []byte(`"none"`)):
		return unsupported("tool_choice")
	case r.N != nil && *r.N > 1:
		return unsupported("n > 1")
	case r.Logprobs != nil && *r.Logprobs, r.TopLogprobs != nil && *r.TopLogprobs > 0:
		return unsupported("logprobs")
	case present(r.ReasoningEffort):
		return unsupported("reasoning_effort")
	case present(r.Audio):
		return unsupported("audio output")
	case present(r.WebSearchOptions):
		return unsupported("web_search_options")
	}
	for _, m := range r.Modalities {
		if m != "text" {
			return unsupported("audio output")
		}
	}
	if present(r.ResponseFormat) {
		var rf struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(r.ResponseFormat, &rf); err != nil {
			return malformed("OpenAI chat request response_format", err)
		}
		if rf.Type != "text" {
			return unsupported("response_format")
		}
	}
	return nil
}

// parseStop reads OpenAI's stop: null, a string, or an array of strings.
// Empty sequences are dropped (Anthropic refuses them).
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
	stops = nonEmpty(stops)
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
	if len(out.Stop) == 0 {
		out.Stop = nil
	}
	system, err := anthropicTexts(req.System)
	if err != nil {
		return nil, fmt.Errorf("Anthropic messages request: system: %w", err)
	}
	out.Messages = make([]chatMessageOut, 0, len(req.Messages)+1)
	if system = nonEmpty(system); len(system) > 0 {
		out.Messages = append(out.Messages, chatMessageOut{Role: "system", Content: strings.Join(system, partSeparator)})
	}
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return nil, fmt.Errorf("Anthropic messages request: messages[%d]: unknown role %q: %w", i, m.Role, ErrMalformed)
		}
		texts, err := anthropicTexts(m.Content)
		if err != nil {
			return nil, fmt.Errorf("Anthropic messages request: messages[%d]: %w", i, err)
		}
		out.Messages = append(out.Messages, chatMessageOut{Role: m.Role, Content: strings.Join(nonEmpty(texts), partSeparator)})
	}
	return marshal(&out)
}

// checkSupported refuses the request parameters that have no translation.
func (r *messagesRequest) checkSupported() error {
	switch {
	case presentNonEmpty(r.Tools):
		return unsupported("tools")
	case r.Thinking != nil && r.Thinking.Type != "disabled":
		return unsupported("thinking")
	case presentNonEmpty(r.MCPServers):
		return unsupported("mcp_servers")
	case present(r.Container):
		return unsupported("container")
	}
	if present(r.ToolChoice) {
		var tc struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(r.ToolChoice, &tc); err != nil {
			return malformed("Anthropic messages request tool_choice", err)
		}
		if tc.Type != "none" {
			return unsupported("tool_choice")
		}
	}
	return nil
}
