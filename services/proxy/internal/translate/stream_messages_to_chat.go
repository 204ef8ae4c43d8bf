package translate

import (
	"encoding/json"
	"fmt"
	"strconv"

	"switchyard.dev/shared/jsonfield"
)

// anthropicEvent is the union of the Anthropic stream events' data, decoded
// again for every event. Values are kept raw: strings are copied into the
// output without being unescaped, and the buffers are reused.
type anthropicEvent struct {
	Type    json.RawMessage `json:"type"`
	Index   int             `json:"index"`
	Message struct {
		ID    json.RawMessage `json:"id"`
		Usage anthropicUsage  `json:"usage"`
	} `json:"message"`
	ContentBlock struct {
		Type     json.RawMessage `json:"type"`
		Text     json.RawMessage `json:"text"`
		ID       json.RawMessage `json:"id"`
		Name     json.RawMessage `json:"name"`
		Thinking json.RawMessage `json:"thinking"`
		Data     json.RawMessage `json:"data"`
	} `json:"content_block"`
	Delta struct {
		Type        json.RawMessage `json:"type"`
		Text        json.RawMessage `json:"text"`
		Thinking    json.RawMessage `json:"thinking"`
		Signature   json.RawMessage `json:"signature"`
		PartialJSON json.RawMessage `json:"partial_json"`
		StopReason  json.RawMessage `json:"stop_reason"`
	} `json:"delta"`
	Usage anthropicUsage `json:"usage"`
}

func (e *anthropicEvent) decode(d *eventDecoder, data []byte) error {
	e.Type = e.Type[:0]
	e.Index = 0
	e.Message.ID = e.Message.ID[:0]
	e.Message.Usage = anthropicUsage{}
	e.ContentBlock.Type = e.ContentBlock.Type[:0]
	e.ContentBlock.Text = e.ContentBlock.Text[:0]
	e.ContentBlock.ID = e.ContentBlock.ID[:0]
	e.ContentBlock.Name = e.ContentBlock.Name[:0]
	e.ContentBlock.Thinking = e.ContentBlock.Thinking[:0]
	e.ContentBlock.Data = e.ContentBlock.Data[:0]
	e.Delta.Thinking = e.Delta.Thinking[:0]
	e.Delta.Signature = e.Delta.Signature[:0]
	e.Delta.Type = e.Delta.Type[:0]
	e.Delta.Text = e.Delta.Text[:0]
	e.Delta.PartialJSON = e.Delta.PartialJSON[:0]
	e.Delta.StopReason = e.Delta.StopReason[:0]
	e.Usage = anthropicUsage{}
	if err := d.decode(data, e); err != nil {
		return malformed("Anthropic stream event", err)
	}
	return nil
}

// Kinds of the open block of a messagesToChatStream.
const (
	openOther  = iota // none, or a block without input_json_delta events
	openTool          // a tool_use block: its input is the call's arguments
	openJSON          // the json_response tool_use block: its input is content
	openSearch        // a web search block: its input is dropped
)

// messagesToChatStream translates an Anthropic message stream into OpenAI
// chat.completion.chunk events.
type messagesToChatStream struct {
	model  string
	out    []byte // frames returned by Event, reused
	prefix []byte // every chunk's start, through `"choices":[`
	ev     anthropicEvent
	dec    eventDecoder
	usage  anthropicUsage
	// thinking is the open thinking block's text so far, JSON-escaped
	// without quotes, given again with its signature.
	thinking []byte

	// toolCalls counts the tool_use blocks begun: the OpenAI index of the
	// next tool call.
	toolCalls int
	// open is the kind of the block content_block_start opened last, and
	// openIndex its Anthropic index: the block whose input_json_delta
	// events are translated (tool arguments, the json_response answer) or
	// dropped (a web search's).
	open, openIndex int
	// toolArgs: the open tool call has had a piece of arguments.
	toolArgs bool

	// answerTool: the request carries the json_response tool, so text is
	// held in held until the stream says whether the tool answers. Text
	// beside its answer would spoil the JSON: like MessagesResponseToChat,
	// the stream drops it once the tool's block opens (answered) and gives
	// it as content otherwise, before the finish_reason.
	answerTool, answered bool
	held                 []byte

	// includeUsage: the stream ends with a usage chunk (the caller asked
	// for it with stream_options.include_usage).
	includeUsage bool

	started, finished, done, terminated bool
}

// NewMessagesToChatStream returns a converter of an Anthropic message stream
// into an OpenAI chat completion stream answering for model, the name the
// caller asked for.
//
// message_start gives the first chunk (delta {"role":"assistant",
// "content":""}), text deltas give content chunks, a tool_use block a
// tool_calls chunk with its index, id, type, name and empty arguments, then
// one with arguments for each input_json_delta, message_delta's
// stop_reason a finish_reason chunk ("stop" at message_stop when none came),
// and message_stop, when includeUsage is set, a usage chunk ("choices":[],
// as OpenAI sends it for stream_options.include_usage) then "data: [DONE]".
// Without includeUsage there is no usage chunk, as from OpenAI: a client
// reading choices[0] of every chunk would fail on it. Thinking deltas give reasoning_content chunks, and a
// signature a chunk with the whole block in thinking_blocks ([{"type":
// "thinking","thinking":...,"signature":...}], as LiteLLM streams it); a
// redacted_thinking block a thinking_blocks chunk with its data. The
// json_response tool's input (see ChatToMessages) streams as content, and
// its stop_reason tool_use gives finish_reason "stop". A server
// tool's block fails with an *UnsupportedError. An "error" event becomes an OpenAI error chunk
// data: {"error":{...}} and ends the stream without [DONE], as OpenAI does.
func NewMessagesToChatStream(model string, includeUsage bool) StreamConverter {
	return &messagesToChatStream{model: model, out: make([]byte, 0, 512), includeUsage: includeUsage}
}

// NewMessagesToChatAnswerStream is NewMessagesToChatStream for a request
// that carries the json_response tool (see RequestsAnswerTool): text
// beside the tool's answer is dropped, as MessagesResponseToChat drops it,
// so text waits until the stream shows whether the tool answers (the
// model may write some first where it cannot be made to call the tool:
// with thinking).
func NewMessagesToChatAnswerStream(model string, includeUsage bool) StreamConverter {
	return &messagesToChatStream{model: model, out: make([]byte, 0, 512), answerTool: true, includeUsage: includeUsage}
}

// RequestsAnswerTool reports whether req, an Anthropic messages request
// made by ChatToMessages, carries the json_response tool: the answer to a
// response_format json_schema.
func RequestsAnswerTool(req []byte) bool {
	found := false
	jsonfield.Each(jsonfield.Lookup(req, "tools")[0], func(tool []byte) {
		if name, ok := jsonfield.String(tool, "name"); ok && name == jsonTool {
			found = true
		}
	})
	return found
}

func (c *messagesToChatStream) Terminated() bool { return c.terminated }

func (c *messagesToChatStream) Event(name, data []byte) ([]byte, bool, error) {
	if c.done {
		return nil, true, nil
	}
	c.out = c.out[:0]
	typ, decoded := name, false
	if len(typ) == 0 {
		// No "event:" line: the data's type says what it is.
		if err := c.ev.decode(&c.dec, data); err != nil {
			return nil, false, err
		}
		if quotedString(c.ev.Type) {
			typ = c.ev.Type[1 : len(c.ev.Type)-1]
		}
		decoded = true
	}
	switch string(typ) {
	case "ping":
		return nil, false, nil
	case "content_block_stop":
		// Blocks do not interleave: this ends the open one. A call that
		// had no arguments gets "{}", as the non-stream answer gives it
		// (an SDK parsing "" as JSON fails).
		if c.open == openTool && !c.toolArgs {
			c.appendArguments([]byte(`"{}"`))
		}
		c.open = openOther
		return c.out, false, nil
	case "error":
		c.out = append(c.out, "data: "...)
		c.out = append(c.out, AnthropicErrorToOpenAI(0, data)...)
		c.out = append(c.out, "\n\n"...)
		c.done = true
		return c.out, true, nil
	case "message_stop":
		c.start(nil)
		if !c.finished {
			c.appendFinish("stop") // message_delta did not say why
		}
		if c.includeUsage {
			c.out = append(c.out, c.prefix...)
			c.out = append(c.out, `],"usage":`...)
			c.out = appendChatUsage(c.out, c.usage)
			c.out = append(c.out, "}\n\n"...)
		}
		c.out = append(c.out, "data: [DONE]\n\n"...)
		c.done, c.terminated = true, true
		return c.out, true, nil
	case "message_start", "content_block_start", "content_block_delta", "message_delta":
	default:
		return nil, false, nil // an event type added after this was written
	}
	if !decoded {
		if err := c.ev.decode(&c.dec, data); err != nil {
			return nil, false, err
		}
	}
	ev := &c.ev
	switch string(typ) {
	case "message_start":
		c.usage = ev.Message.Usage
		c.start(ev.Message.ID)
	case "content_block_start":
		c.start(nil)
		c.open, c.openIndex = openOther, ev.Index
		switch string(ev.ContentBlock.Type) {
		case `"tool_use"`:
			if string(ev.ContentBlock.Name) == `"`+jsonTool+`"` {
				// The answer to a response_format json_schema: its input
				// streams as content.
				c.open = openJSON
				c.answered, c.held = true, c.held[:0]
				break
			}
			if err := c.appendToolStart(ev); err != nil {
				return nil, false, err
			}
		case `"text"`:
			if !emptyString(ev.ContentBlock.Text) {
				if err := c.appendText(ev.ContentBlock.Text); err != nil {
					return nil, false, err
				}
			}
		case `"thinking"`:
			c.thinking = c.thinking[:0]
			if err := c.appendReasoning(ev.ContentBlock.Thinking); err != nil {
				return nil, false, err
			}
		case `"server_tool_use"`, `"web_search_tool_result"`:
			if string(ev.ContentBlock.Type) == `"server_tool_use"` && string(ev.ContentBlock.Name) != `"`+webSearchToolName+`"` {
				return nil, false, fmt.Errorf("Anthropic stream: %w", blockError(unquote(ev.ContentBlock.Type)))
			}
			// A web search and its results: nothing to say; the input
			// of the search streams into nothing.
			c.open = openSearch
		case `"redacted_thinking"`:
			if !quotedString(ev.ContentBlock.Data) {
				return nil, false, fmt.Errorf("decode Anthropic stream event: redacted_thinking without data: %w", ErrMalformed)
			}
			c.out = append(c.out, c.prefix...)
			c.out = append(c.out, `{"index":0,"delta":{"thinking_blocks":[{"type":"redacted_thinking","data":`...)
			c.out = append(c.out, ev.ContentBlock.Data...)
			c.out = append(c.out, `}]},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
		default:
			return nil, false, fmt.Errorf("Anthropic stream: %w", blockError(unquote(ev.ContentBlock.Type)))
		}
	case "content_block_delta":
		c.start(nil)
		switch string(ev.Delta.Type) {
		case `"text_delta"`:
			if !emptyString(ev.Delta.Text) {
				if err := c.appendText(ev.Delta.Text); err != nil {
					return nil, false, err
				}
			}
		case `"input_json_delta"`:
			switch {
			case c.open == openSearch && ev.Index == c.openIndex:
			case c.open == openJSON && ev.Index == c.openIndex:
				if !emptyString(ev.Delta.PartialJSON) {
					if err := c.appendContent(ev.Delta.PartialJSON); err != nil {
						return nil, false, err
					}
				}
			default:
				if err := c.appendToolArguments(ev); err != nil {
					return nil, false, err
				}
			}
		case `"thinking_delta"`:
			if err := c.appendReasoning(ev.Delta.Thinking); err != nil {
				return nil, false, err
			}
		case `"signature_delta"`:
			if !quotedString(ev.Delta.Signature) {
				return nil, false, fmt.Errorf("decode Anthropic stream event: signature is not a string: %w", ErrMalformed)
			}
			c.out = append(c.out, c.prefix...)
			c.out = append(c.out, `{"index":0,"delta":{"thinking_blocks":[{"type":"thinking","thinking":"`...)
			c.out = append(c.out, c.thinking...)
			c.out = append(c.out, `","signature":`...)
			c.out = append(c.out, ev.Delta.Signature...)
			c.out = append(c.out, `}]},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
		}
		// citations_delta: nothing to say.
	case "message_delta":
		c.start(nil)
		mergeUsage(&c.usage, ev.Usage)
		if present(ev.Delta.StopReason) && !c.finished {
			fr := finishReasonFor(unquote(ev.Delta.StopReason))
			if fr == "tool_calls" && c.toolCalls == 0 {
				fr = "stop" // the json_response tool alone: an answer
			}
			c.appendFinish(fr)
		}
	}
	return c.out, false, nil
}

// start writes the first chunk, once, for the message id (a JSON string;
// nil when message_start did not come first).
func (c *messagesToChatStream) start(id json.RawMessage) {
	if c.started {
		return
	}
	c.started = true
	c.prefix = append(c.prefix[:0], `data: {"id":`...)
	c.prefix = append(c.prefix, quote(chatIDFromMessageID(unquote(id)))...)
	c.prefix = append(c.prefix, `,"object":"chat.completion.chunk","created":`...)
	c.prefix = strconv.AppendInt(c.prefix, now().Unix(), 10)
	c.prefix = append(c.prefix, `,"model":`...)
	c.prefix = append(c.prefix, quote(c.model)...)
	c.prefix = append(c.prefix, `,"choices":[`...)

	c.out = append(c.out, c.prefix...)
	c.out = append(c.out, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

// appendFinish writes the chunk with the finish_reason.
func (c *messagesToChatStream) appendFinish(reason string) {
	c.finished = true
	c.out = append(c.out, c.held...) // text with no answer beside it
	c.held = c.held[:0]
	c.out = append(c.out, c.prefix...)
	c.out = append(c.out, `{"index":0,"delta":{},"logprobs":null,"finish_reason":"`...)
	c.out = append(c.out, reason...)
	c.out = append(c.out, "\"}]}\n\n"...)
}

// appendText writes a content chunk for the text of a text block, a JSON
// string, or holds it (answerTool).
func (c *messagesToChatStream) appendText(text json.RawMessage) error {
	if c.answered {
		return nil // beside the answer
	}
	n := len(c.out)
	if err := c.appendContent(text); err != nil {
		return err
	}
	if c.answerTool {
		c.held = append(c.held, c.out[n:]...)
		c.out = c.out[:n]
	}
	return nil
}

// appendContent writes a content chunk for text, a JSON string.
func (c *messagesToChatStream) appendContent(text json.RawMessage) error {
	if !quotedString(text) {
		return fmt.Errorf("decode Anthropic stream event: text is not a string: %w", ErrMalformed)
	}
	c.out = append(c.out, c.prefix...)
	c.out = append(c.out, `{"index":0,"delta":{"content":`...)
	c.out = append(c.out, text...)
	c.out = append(c.out, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	return nil
}

// appendReasoning writes a reasoning_content chunk for a piece of
// thinking, a JSON string, and keeps it for the block's signature chunk.
func (c *messagesToChatStream) appendReasoning(text json.RawMessage) error {
	if emptyString(text) {
		return nil
	}
	if !quotedString(text) {
		return fmt.Errorf("decode Anthropic stream event: thinking is not a string: %w", ErrMalformed)
	}
	c.thinking = append(c.thinking, text[1:len(text)-1]...)
	c.out = append(c.out, c.prefix...)
	c.out = append(c.out, `{"index":0,"delta":{"reasoning_content":`...)
	c.out = append(c.out, text...)
	c.out = append(c.out, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	return nil
}

// appendToolStart writes the first tool_calls chunk of a tool_use block:
// index, id, type and name, with empty arguments.
func (c *messagesToChatStream) appendToolStart(ev *anthropicEvent) error {
	if !quotedString(ev.ContentBlock.ID) || !quotedString(ev.ContentBlock.Name) {
		return fmt.Errorf("decode Anthropic stream event: tool_use block without a string id and name: %w", ErrMalformed)
	}
	c.open = openTool
	c.out = append(c.out, c.prefix...)
	c.out = append(c.out, `{"index":0,"delta":{"tool_calls":[{"index":`...)
	c.out = strconv.AppendInt(c.out, int64(c.toolCalls), 10)
	c.out = append(c.out, `,"id":`...)
	c.out = append(c.out, ev.ContentBlock.ID...)
	c.out = append(c.out, `,"type":"function","function":{"name":`...)
	c.out = append(c.out, ev.ContentBlock.Name...)
	c.out = append(c.out, `,"arguments":""}}]},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	c.toolCalls++
	c.toolArgs = false
	return nil
}

// appendToolArguments writes a tool_calls chunk with a piece of the open
// tool call's arguments.
func (c *messagesToChatStream) appendToolArguments(ev *anthropicEvent) error {
	if c.open != openTool || ev.Index != c.openIndex {
		return fmt.Errorf("decode Anthropic stream event: input_json_delta for block %d, not an open tool_use block: %w", ev.Index, ErrMalformed)
	}
	if emptyString(ev.Delta.PartialJSON) {
		return nil
	}
	if !quotedString(ev.Delta.PartialJSON) {
		return fmt.Errorf("decode Anthropic stream event: partial_json is not a string: %w", ErrMalformed)
	}
	c.appendArguments(ev.Delta.PartialJSON)
	return nil
}

// appendArguments writes a tool_calls chunk with a piece of the open tool
// call's arguments (a JSON string).
func (c *messagesToChatStream) appendArguments(part []byte) {
	c.out = append(c.out, c.prefix...)
	c.out = append(c.out, `{"index":0,"delta":{"tool_calls":[{"index":`...)
	c.out = strconv.AppendInt(c.out, int64(c.toolCalls-1), 10)
	c.out = append(c.out, `,"function":{"arguments":`...)
	c.out = append(c.out, part...)
	c.out = append(c.out, `}}]},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	c.toolArgs = true
}

// mergeUsage takes the counts message_delta reports: output_tokens always,
// the input counts in newer API versions.
func mergeUsage(dst *anthropicUsage, u anthropicUsage) {
	if u.InputTokens > 0 {
		dst.InputTokens = u.InputTokens
	}
	if u.CacheCreationInputTokens > 0 {
		dst.CacheCreationInputTokens = u.CacheCreationInputTokens
	}
	if u.CacheReadInputTokens > 0 {
		dst.CacheReadInputTokens = u.CacheReadInputTokens
	}
	if u.OutputTokens > 0 {
		dst.OutputTokens = u.OutputTokens
	}
}
