package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// present reports whether an optional JSON value was given: not absent and
// not null.
func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, nullJSON)
}

// presentNonEmpty is present, also treating an empty array as absent.
func presentNonEmpty(raw json.RawMessage) bool {
	return present(raw) && !bytes.Equal(bytes.TrimSpace(raw), emptyArrayJSON)
}

var (
	nullJSON       = []byte("null")
	emptyArrayJSON = []byte("[]")
)

// chatBlocks returns the Anthropic content blocks of an OpenAI message's
// content, which is a string, an array of parts, or null: text blocks, and
// image and document blocks for image_url and file parts. isString reports
// the string form. A part's cache_control is kept, and the message's
// cache_control marks its last block.
func chatBlocks(m *chatMessage) (blocks []anthropicBlock, isString bool, err error) {
	blocks, isString, err = chatContentBlocks(m)
	if err == nil && present(m.CacheControl) && len(blocks) > 0 {
		blocks[len(blocks)-1].CacheControl = m.CacheControl
		isString = false
	}
	return blocks, isString, err
}

func chatContentBlocks(m *chatMessage) (blocks []anthropicBlock, isString bool, err error) {
	switch {
	case present(m.FunctionCall):
		return nil, false, unsupported("functions")
	case present(m.Audio):
		return nil, false, unsupported("audio content")
	}
	raw := bytes.TrimSpace(m.Content)
	if !present(raw) {
		if m.Refusal != nil && *m.Refusal != "" {
			return []anthropicBlock{{Type: "text", Text: *m.Refusal}}, true, nil
		}
		return nil, false, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		return []anthropicBlock{{Type: "text", Text: s}}, true, nil
	case '[':
		var parts []chatPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		blocks = make([]anthropicBlock, 0, len(parts))
		for i := range parts {
			p := &parts[i]
			var b anthropicBlock
			switch p.Type {
			case "text":
				b = anthropicBlock{Type: "text", Text: p.Text}
			case "refusal":
				b = anthropicBlock{Type: "text", Text: p.Refusal}
			case "image_url":
				if b, err = imageBlock(p.ImageURL); err != nil {
					return nil, false, fmt.Errorf("content[%d]: %w", i, err)
				}
			case "file":
				if b, err = documentBlock(p.File); err != nil {
					return nil, false, fmt.Errorf("content[%d]: %w", i, err)
				}
			case "input_audio":
				return nil, false, unsupported("audio content")
			case "":
				return nil, false, fmt.Errorf("content part without a type: %w", ErrMalformed)
			default:
				return nil, false, unsupported(fmt.Sprintf("content parts of type %q", p.Type))
			}
			if present(p.CacheControl) {
				b.CacheControl = p.CacheControl
			}
			blocks = append(blocks, b)
		}
		return blocks, false, nil
	}
	return nil, false, fmt.Errorf("content is neither a string nor an array: %w", ErrMalformed)
}

// textOnly returns the texts of blocks, failing on a block of another
// type: where only text can go (a system prompt, a tool result) a where
// other than "" names it for images and documents.
func textOnly(blocks []anthropicBlock, where string) ([]string, error) {
	texts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		switch {
		case b.Type == "text":
			texts = append(texts, b.Text)
		case where != "" && (b.Type == "image" || b.Type == "document"):
			return nil, unsupported(b.Type + " content in " + where)
		default:
			return nil, blockError(b.Type)
		}
	}
	return texts, nil
}

// anthropicTexts returns the texts of an Anthropic system prompt or message
// content: a string or an array of content blocks, of which only text blocks
// are translated (see textOnly for where).
func anthropicTexts(raw json.RawMessage, where string) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if !present(raw) {
		return nil, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		return []string{s}, nil
	case '[':
		var blocks []anthropicBlock
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		return textOnly(blocks, where)
	}
	return nil, fmt.Errorf("content is neither a string nor an array: %w", ErrMalformed)
}

// blockError is the error for an Anthropic content block that is not text.
func blockError(typ string) error {
	switch typ {
	case "":
		return fmt.Errorf("content block without a type: %w", ErrMalformed)
	case "image":
		return unsupported("image content")
	case "document":
		return unsupported("document content")
	case "tool_use":
		return unsupported("tool calls")
	case "tool_result":
		return unsupported("tool results")
	case "server_tool_use", "mcp_tool_use":
		return unsupported("server and MCP tool calls (" + typ + " blocks)")
	case "web_search_tool_result", "mcp_tool_result":
		return unsupported("server and MCP tool results (" + typ + " blocks)")
	case "thinking", "redacted_thinking":
		return unsupported("thinking")
	}
	return unsupported(fmt.Sprintf("content blocks of type %q", typ))
}

// nonEmpty returns texts without the empty strings, reusing its array.
func nonEmpty(texts []string) []string {
	out := texts[:0]
	for _, t := range texts {
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

// marshal is json.Marshal without HTML escaping: text such as "<doc>" stays
// as it was written rather than becoming "\u003cdoc\u003e".
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
