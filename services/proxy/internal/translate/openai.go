package translate

import "encoding/json"

// Wire types of the OpenAI Chat Completions API. Decoding types list the
// fields this package reads or must refuse; unknown fields are ignored, so
// newer optional parameters do not break translation.

// chatRequest is an OpenAI chat completion request as decoded.
type chatRequest struct {
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Stop                json.RawMessage `json:"stop"`
	Stream              bool            `json:"stream"`
	User                string          `json:"user"`
	Tools               []chatTool      `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls"`

	// ResponseFormat is translated into a forced tool (json_schema) or a
	// system instruction (json_object).
	ResponseFormat json.RawMessage `json:"response_format"`
	// ReasoningEffort becomes extended thinking.
	ReasoningEffort json.RawMessage `json:"reasoning_effort"`
	// WebSearchOptions becomes Anthropic's web search server tool.
	WebSearchOptions *chatWebSearchOptions `json:"web_search_options"`

	// Refused when they ask for something Anthropic cannot do here.
	N            *int            `json:"n"`
	Logprobs     *bool           `json:"logprobs"`
	TopLogprobs  *int            `json:"top_logprobs"`
	Functions    json.RawMessage `json:"functions"`
	FunctionCall json.RawMessage `json:"function_call"`
	Modalities   []string        `json:"modalities"`
	Audio        json.RawMessage `json:"audio"`
}

// chatWebSearchOptions is web_search_options, as decoded and as written.
type chatWebSearchOptions struct {
	SearchContextSize string                 `json:"search_context_size,omitempty"`
	UserLocation      *chatWebSearchLocation `json:"user_location,omitempty"`
}

type chatWebSearchLocation struct {
	Type        string `json:"type"`
	Approximate struct {
		City     string `json:"city,omitempty"`
		Country  string `json:"country,omitempty"`
		Region   string `json:"region,omitempty"`
		Timezone string `json:"timezone,omitempty"`
	} `json:"approximate"`
}

// chatResponseFormat is response_format, as decoded and as written.
type chatResponseFormat struct {
	Type       string          `json:"type"`
	JSONSchema *chatJSONSchema `json:"json_schema,omitempty"`
}

type chatJSONSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// chatMessage is one message of a chat request as decoded. Content is a
// string, an array of parts, or null.
type chatMessage struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	Refusal      *string         `json:"refusal"`
	ToolCalls    []chatToolCall  `json:"tool_calls"`
	ToolCallID   string          `json:"tool_call_id"`
	FunctionCall json.RawMessage `json:"function_call"`
	Audio        json.RawMessage `json:"audio"`
	// CacheControl (an Anthropic extension some OpenAI clients send) marks
	// the message's last content block.
	CacheControl json.RawMessage `json:"cache_control"`
	// ThinkingBlocks are Anthropic thinking blocks with their signatures,
	// as MessagesResponseToChat returns them; reasoning_content alone has no
	// signature and is not sent back.
	ThinkingBlocks []anthropicBlock `json:"thinking_blocks"`
}

// chatTool is a tool definition, as decoded and as written. Only type
// "function" is translated.
type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
	// CacheControl is read (an Anthropic extension), never written.
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// chatToolCall is a tool call of an assistant message, as decoded and as
// written. Arguments is a JSON object encoded as a string.
type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// chatPart is one element of an array content.
type chatPart struct {
	Type         string          `json:"type"`
	Text         string          `json:"text"`
	Refusal      string          `json:"refusal"`
	ImageURL     *chatImageURL   `json:"image_url"`
	File         *chatFile       `json:"file"`
	CacheControl json.RawMessage `json:"cache_control"`
}

// chatPartOut is a content part this package writes.
type chatPartOut struct {
	Type     string        `json:"type"`
	Text     *string       `json:"text,omitempty"`
	ImageURL *chatImageURL `json:"image_url,omitempty"`
	File     *chatFile     `json:"file,omitempty"`
}

// chatImageURL is an image_url part's image: an https URL or a data URL.
// detail is read and dropped (Anthropic has no such setting).
type chatImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

// chatFile is a file part's file: inline as a data URL, or an uploaded
// file's id.
type chatFile struct {
	FileData string `json:"file_data,omitempty"`
	FileID   string `json:"file_id,omitempty"`
	Filename string `json:"filename,omitempty"`
}

// chatRequestOut is the chat request this package writes.
type chatRequestOut struct {
	Model               string             `json:"model"`
	Messages            []chatMessageOut   `json:"messages"`
	MaxTokens           *int               `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int               `json:"max_completion_tokens,omitempty"`
	Temperature         *float64           `json:"temperature,omitempty"`
	TopP                *float64           `json:"top_p,omitempty"`
	Stop                []string           `json:"stop,omitempty"`
	Stream              bool               `json:"stream,omitempty"`
	StreamOptions       *chatStreamOptions `json:"stream_options,omitempty"`
	User                string             `json:"user,omitempty"`
	Tools               []chatTool         `json:"tools,omitempty"`
	// ToolChoice is "auto", "required", "none" or a chatNamedToolChoice.
	ToolChoice        any                   `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool                 `json:"parallel_tool_calls,omitempty"`
	ReasoningEffort   string                `json:"reasoning_effort,omitempty"`
	ResponseFormat    *chatResponseFormat   `json:"response_format,omitempty"`
	WebSearchOptions  *chatWebSearchOptions `json:"web_search_options,omitempty"`
}

type chatMessageOut struct {
	Role string `json:"role"`
	// Content is a *string, or []chatPartOut for a user message with
	// images or files; nil (null) only for an assistant message with tool
	// calls alone.
	Content    any            `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

// chatNamedToolChoice is the tool_choice forcing one function.
type chatNamedToolChoice struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

type chatStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatCompletion is a non-stream chat response, both as decoded and as
// written.
type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *chatUsage   `json:"usage,omitempty"`
}

type chatChoice struct {
	Index        int                 `json:"index"`
	Message      chatResponseMessage `json:"message"`
	Logprobs     json.RawMessage     `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

type chatResponseMessage struct {
	Role    string  `json:"role"`
	Content *string `json:"content"`
	Refusal *string `json:"refusal"`
	// ReasoningContent is the text of Anthropic thinking blocks (the field
	// DeepSeek, vLLM and LiteLLM use); ThinkingBlocks the blocks themselves
	// with their signatures, as LiteLLM returns them, to be sent back.
	ReasoningContent *string          `json:"reasoning_content,omitempty"`
	ThinkingBlocks   []anthropicBlock `json:"thinking_blocks,omitempty"`
	// Annotations are url_citation annotations of web search results,
	// written, never read.
	Annotations  []chatAnnotation `json:"annotations,omitempty"`
	ToolCalls    []chatToolCall   `json:"tool_calls,omitempty"`
	FunctionCall json.RawMessage  `json:"function_call,omitempty"`
	Audio        json.RawMessage  `json:"audio,omitempty"`
}

// chatUsage counts tokens. PromptTokens includes the cached ones.
type chatUsage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails *chatPromptTokenUse `json:"prompt_tokens_details,omitempty"`
}

type chatPromptTokenUse struct {
	CachedTokens int `json:"cached_tokens"`
}

// openAIErrorBody is {"error": {...}} as written; decoding goes through
// decodeOpenAIError, which also accepts the looser shapes of compatible
// providers.
type openAIErrorBody struct {
	Error openAIError `json:"error"`
}

type openAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}
