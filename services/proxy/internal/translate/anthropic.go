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

	Tools      []anthropicTool      `json:"tools"`
	ToolChoice *anthropicToolChoice `json:"tool_choice"`

	Thinking *struct {
		Type         string `json:"type"`
		BudgetTokens int    `json:"budget_tokens"`
	} `json:"thinking"`
	// OutputFormat is the structured outputs beta's; OutputConfig.Format
	// the same, generally available.
	OutputFormat *anthropicOutputFormat `json:"output_format"`
	OutputConfig struct {
		Format *anthropicOutputFormat `json:"format"`
		Effort string                 `json:"effort"`
	} `json:"output_config"`

	// Refused when present.
	MCPServers json.RawMessage `json:"mcp_servers"`
	Container  json.RawMessage `json:"container"`
}

type anthropicOutputFormat struct {
	Type   string          `json:"type"`
	Schema json.RawMessage `json:"schema"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is a content block, as decoded and as written. Text,
// tool_use and tool_result blocks are translated; the type of any other
// block names what is unsupported.
type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"` // empty text blocks are never written

	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"` // an object

	// tool_result
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"` // a string or text blocks
	IsError   bool            `json:"is_error,omitempty"`

	// image, document
	Source *anthropicSource `json:"source,omitempty"`
	Title  string           `json:"title,omitempty"` // a document's

	// thinking (Signature is written, empty, when unknown), redacted_thinking
	Thinking  string  `json:"thinking,omitempty"`
	Signature *string `json:"signature,omitempty"`
	Data      string  `json:"data,omitempty"`

	// Citations of a text block (an array), or a document's citations
	// setting (an object); read, never written.
	Citations json.RawMessage `json:"citations,omitempty"`

	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// anthropicSource is an image's or document's source: base64 (media_type,
// data), url (url), text (a document's plain text in data), or file
// (file_id).
type anthropicSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
	FileID    string `json:"file_id,omitempty"`
}

// anthropicCitation is a citation of a text block; only web search result
// locations are translated (into url_citation annotations).
type anthropicCitation struct {
	Type  string `json:"type"`
	URL   string `json:"url"`
	Title string `json:"title"`
}

// anthropicTool is a tool definition. Type is absent or "custom" for a
// client tool; any other type is a server tool (web search, bash...).
type anthropicTool struct {
	Type        string          `json:"type,omitempty"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`

	// The web search server tool's settings.
	MaxUses        *int                   `json:"max_uses,omitempty"`
	AllowedDomains []string               `json:"allowed_domains,omitempty"`
	BlockedDomains []string               `json:"blocked_domains,omitempty"`
	UserLocation   *anthropicUserLocation `json:"user_location,omitempty"`

	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

type anthropicUserLocation struct {
	Type     string `json:"type"`
	City     string `json:"city,omitempty"`
	Region   string `json:"region,omitempty"`
	Country  string `json:"country,omitempty"`
	Timezone string `json:"timezone,omitempty"`
}

// anthropicThinking is the thinking parameter as written.
type anthropicThinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

// anthropicToolChoice is tool_choice: type auto, any, tool (with name) or
// none.
type anthropicToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// messagesRequestOut is the Anthropic request this package writes.
type messagesRequestOut struct {
	Model string `json:"model"`
	// System is a string, or []anthropicBlock when a part carries
	// cache_control.
	System        any                   `json:"system,omitempty"`
	Messages      []anthropicMessageOut `json:"messages"`
	MaxTokens     int                   `json:"max_tokens"`
	Temperature   *float64              `json:"temperature,omitempty"`
	TopP          *float64              `json:"top_p,omitempty"`
	StopSequences []string              `json:"stop_sequences,omitempty"`
	Stream        bool                  `json:"stream,omitempty"`
	Metadata      *anthropicMetadata    `json:"metadata,omitempty"`
	Tools         []anthropicTool       `json:"tools,omitempty"`
	ToolChoice    *anthropicToolChoice  `json:"tool_choice,omitempty"`
	Thinking      *anthropicThinking    `json:"thinking,omitempty"`
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
