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

	// Refused when they ask for something Anthropic cannot do here.
	N                *int            `json:"n"`
	Logprobs         *bool           `json:"logprobs"`
	TopLogprobs      *int            `json:"top_logprobs"`
	Functions        json.RawMessage `json:"functions"`
	FunctionCall     json.RawMessage `json:"function_call"`
	ResponseFormat   json.RawMessage `json:"response_format"`
	ReasoningEffort  json.RawMessage `json:"reasoning_effort"`
	Modalities       []string        `json:"modalities"`
	Audio            json.RawMessage `json:"audio"`
	WebSearchOptions json.RawMessage `json:"web_search_options"`
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
}

// chatTool is a tool definition, as decoded and as written. Only type
// "function" is translated.
type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
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
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

// chatRequestOut is the chat request this package writes.
type chatRequestOut struct {
	Model         string             `json:"model"`
	Messages      []chatMessageOut   `json:"messages"`
	MaxTokens     *int               `json:"max_tokens,omitempty"`
	Temperature   *float64           `json:"temperature,omitempty"`
	TopP          *float64           `json:"top_p,omitempty"`
	Stop          []string           `json:"stop,omitempty"`
	Stream        bool               `json:"stream,omitempty"`
	StreamOptions *chatStreamOptions `json:"stream_options,omitempty"`
	User          string             `json:"user,omitempty"`
	Tools         []chatTool         `json:"tools,omitempty"`
	// ToolChoice is "auto", "required", "none" or a chatNamedToolChoice.
	ToolChoice        any   `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool `json:"parallel_tool_calls,omitempty"`
}

type chatMessageOut struct {
	Role string `json:"role"`
	// Content is null only for an assistant message with tool calls alone.
	Content    *string        `json:"content"`
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
	Role         string          `json:"role"`
	Content      *string         `json:"content"`
	Refusal      *string         `json:"refusal"`
	ToolCalls    []chatToolCall  `json:"tool_calls,omitempty"`
	FunctionCall json.RawMessage `json:"function_call,omitempty"`
	Audio        json.RawMessage `json:"audio,omitempty"`
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
