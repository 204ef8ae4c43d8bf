package translate

import "encoding/json"

// Wire types of the Anthropic Messages API. As with the OpenAI types,
// unknown fields are ignored when decoding.

// messagesRequest is an Anthropic messages request as decoded. System and
// message content are a string or an array of content blocks.
type messagesRequest struct {
	System        json.RawMessage    `json:"system"`
	Messages      []anthropicMessage `json:"messages"`
	MaxTokens     *int               `json:"max_tokens"`
	Temperature   *float64           `json:"temperature"`
	TopP          *float64           `json:"top_p"`
	StopSequences []string           `json:"stop_sequences"`
	Stream        bool               `json:"stream"`
	Metadata      struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`

	// Refused when present.
	Tools      json.RawMessage `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
	Thinking   *struct {
		Type string `json:"type"`
	} `json:"thinking"`
	MCPServers json.RawMessage `json:"mcp_servers"`
	Container  json.RawMessage `json:"container"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is a content block. Only text blocks are translated; the
// type of any other block names what is unsupported.
type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// messagesRequestOut is the Anthropic request this package writes.
type messagesRequestOut struct {
	Model         string                `json:"model"`
	System        string                `json:"system,omitempty"`
	Messages      []anthropicMessageOut `json:"messages"`
	MaxTokens     int                   `json:"max_tokens"`
	Temperature   *float64              `json:"temperature,omitempty"`
	TopP          *float64              `json:"top_p,omitempty"`
	StopSequences []string              `json:"stop_sequences,omitempty"`
	Stream        bool                  `json:"stream,omitempty"`
	Metadata      *anthropicMetadata    `json:"metadata,omitempty"`
}

type anthropicMessageOut struct {
	Role string `json:"role"`
	// Content is a string, or []anthropicBlock when a turn has several parts.
	Content any `json:"content"`
}

type anthropicMetadata struct {
	UserID string `json:"user_id"`
}

// anthropicResponse is a non-stream message, both as decoded and as written.
type anthropicResponse struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []anthropicBlock `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
}

// anthropicUsage counts tokens. InputTokens excludes the cache reads and
// writes.
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

type anthropicErrorBody struct {
	Type  string         `json:"type"`
	Error anthropicError `json:"error"`
}

type anthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}
