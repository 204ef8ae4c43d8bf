package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// chatChunk is an OpenAI chat.completion.chunk (or a stream error) as
// decoded, again for every event; values are kept raw and buffers reused.
type chatChunk struct {
	ID      json.RawMessage   `json:"id"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   json.RawMessage   `json:"usage"`
	Error   json.RawMessage   `json:"error"`
}

type chatChunkChoice struct {
	Index int `json:"index"`
	Delta struct {
		Content      json.RawMessage     `json:"content"`
		Refusal      json.RawMessage     `json:"refusal"`
		ToolCalls    []chatToolCallDelta `json:"tool_calls"`
		FunctionCall json.RawMessage     `json:"function_call"`
		Audio        json.RawMessage     `json:"audio"`
		// ReasoningContent is the reasoning of OpenAI-compatible providers
		// (and of NewMessagesToChatStream); ThinkingBlocks carries signed
		// thinking, as NewMessagesToChatStream and LiteLLM write it.
		ReasoningContent json.RawMessage          `json:"reasoning_content"`
		ThinkingBlocks   []chatThinkingBlockDelta `json:"thinking_blocks"`
	} `json:"delta"`
	FinishReason json.RawMessage `json:"finish_reason"`
}

// chatThinkingBlockDelta is a thinking block of a thinking_blocks delta,
// its strings kept raw to be copied into the output frames.
type chatThinkingBlockDelta struct {
	Type      json.RawMessage `json:"type"`
	Thinking  json.RawMessage `json:"thinking"`
	Signature json.RawMessage `json:"signature"`
	Data      json.RawMessage `json:"data"`
}

// chatToolCallDelta is a piece of a streamed tool call: the first for an
// index has the id, type and name, the next ones pieces of the arguments.
type chatToolCallDelta struct {
	Index    int             `json:"index"`
	ID       json.RawMessage `json:"id"`
	Type     json.RawMessage `json:"type"`
	Function struct {
		Name      json.RawMessage `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

func (ch *chatChunk) decode(d *eventDecoder, data []byte) error {
	ch.ID = ch.ID[:0]
	ch.Usage = ch.Usage[:0]
	ch.Error = ch.Error[:0]
	// encoding/json decodes into the old elements of a reused slice without
	// zeroing them: clear the fields, keeping their buffers.
	all := ch.Choices[:cap(ch.Choices)]
	for i := range all {
		c := &all[i]
		c.Index = 0
		c.Delta.Content = c.Delta.Content[:0]
		c.Delta.Refusal = c.Delta.Refusal[:0]
		calls := c.Delta.ToolCalls[:cap(c.Delta.ToolCalls)]
		for j := range calls {
			tc := &calls[j]
			tc.Index = 0
			tc.ID = tc.ID[:0]
			tc.Type = tc.Type[:0]
			tc.Function.Name = tc.Function.Name[:0]
			tc.Function.Arguments = tc.Function.Arguments[:0]
		}
		c.Delta.ToolCalls = calls[:0]
		c.Delta.FunctionCall = c.Delta.FunctionCall[:0]
		c.Delta.Audio = c.Delta.Audio[:0]
		c.Delta.ReasoningContent = c.Delta.ReasoningContent[:0]
		blocks := c.Delta.ThinkingBlocks[:cap(c.Delta.ThinkingBlocks)]
		for j := range blocks {
			b := &blocks[j]
			b.Type, b.Thinking, b.Signature, b.Data = b.Type[:0], b.Thinking[:0], b.Signature[:0], b.Data[:0]
		}
		c.Delta.ThinkingBlocks = blocks[:0]
		c.FinishReason = c.FinishReason[:0]
	}
	ch.Choices = all[:0]
	if err := d.decode(data, ch); err != nil {
		return malformed("OpenAI stream chunk", err)
	}
	return nil
}

// Anthropic stream frames, or their fixed parts around a block index and
// values.
const (
	frameBlockStart = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":"
	frameTextBlock  = ",\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
	frameThinkBlock = ",\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n"
	frameThinkDelta = ",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":"
	frameSigDelta   = ",\"delta\":{\"type\":\"signature_delta\",\"signature\":"
	frameToolBlock  = ",\"content_block\":{\"type\":\"tool_use\",\"id\":"
	frameBlockDelta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"
	frameTextDelta  = ",\"delta\":{\"type\":\"text_delta\",\"text\":"
	frameJSONDelta  = ",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":"
	frameBlockStop  = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":"
	frameStop       = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

// The kinds of content block open.
const (
	noBlock = iota
	textBlock
	toolBlock
	thinkingBlock
)

// chatToMessagesStream translates an OpenAI chat completion stream into
// Anthropic message stream events.
type chatToMessagesStream struct {
	model      string
	out        []byte // frames returned by Event, reused
	chunk      chatChunk
	dec        eventDecoder
	usage      anthropicUsage
	stopReason string

	block     int    // the kind of the open block
	nextBlock int    // the index of the next block; the open one's is one less
	tool      int    // the OpenAI index of the last tool call begun, or -1
	toolID    []byte // its id as sent (quoted; empty when it came without one)

	// finished: a finish_reason came; later content is dropped.
	started, finished, done, terminated bool
}

// NewChatToMessagesStream returns a converter of an OpenAI chat completion
// stream into an Anthropic message stream answering for model, the name the
// caller asked for.
//
// The first chunk gives message_start. Content deltas give text_delta events
// in a text block, opened at the first text (a refusal is text too, with
// stop_reason "refusal"); the first delta of a tool call (by its index)
// closes the open block and opens a tool_use block with its id and name, and
// its arguments give input_json_delta events; finish_reason closes the open
// block; reasoning_content deltas give thinking_delta events in a thinking
// block (signature "" unless a thinking_blocks delta gives one, as
// NewMessagesToChatStream writes); [DONE]
// gives message_delta, with the stop_reason and the usage of the usage chunk
// (so the upstream request should set stream_options.include_usage, as
// MessagesToChat does), then message_stop. A stream error chunk
// data: {"error":{...}} becomes an "error" event and ends the stream. Legacy
// function_call deltas fail with an *UnsupportedError; tool call deltas
// going back to an earlier call, as OpenAI never sends, are malformed.
func NewChatToMessagesStream(model string) StreamConverter {
	return &chatToMessagesStream{model: model, out: make([]byte, 0, 512), tool: -1}
}

func (c *chatToMessagesStream) Terminated() bool { return c.terminated }

func (c *chatToMessagesStream) Event(name, data []byte) ([]byte, bool, error) {
	if c.done {
		return nil, true, nil
	}
	c.out = c.out[:0]
	if isDone(data) {
		c.start(nil)
		c.closeBlock()
		if c.stopReason == "" {
			c.stopReason = "end_turn"
		}
		c.out = append(c.out, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\""...)
		c.out = append(c.out, c.stopReason...)
		c.out = append(c.out, `","stop_sequence":null},"usage":`...)
		c.out = appendAnthropicUsage(c.out, c.usage)
		c.out = append(c.out, "}\n\n"+frameStop...)
		c.done, c.terminated = true, true
		return c.out, true, nil
	}
	if string(name) == "error" {
		return c.fail(data), true, nil
	}
	ch := &c.chunk
	if err := ch.decode(&c.dec, data); err != nil {
		return nil, false, err
	}
	if present(ch.Error) {
		return c.fail(data), true, nil
	}
	c.start(ch.ID)
	for i := range ch.Choices {
		choice := &ch.Choices[i]
		d := &choice.Delta
		switch {
		case choice.Index != 0:
			return nil, false, unsupported("n > 1")
		case present(d.FunctionCall):
			return nil, false, unsupported("functions")
		case present(d.Audio):
			return nil, false, unsupported("audio content")
		}
		if err := c.appendReasoning(d.ReasoningContent); err != nil {
			return nil, false, err
		}
		if err := c.appendThinkingBlocks(d.ThinkingBlocks); err != nil {
			return nil, false, err
		}
		if err := c.appendText(d.Content); err != nil {
			return nil, false, err
		}
		if !emptyString(d.Refusal) {
			c.stopReason = "refusal"
			if err := c.appendText(d.Refusal); err != nil {
				return nil, false, err
			}
		}
		for j := range d.ToolCalls {
			if err := c.appendToolCall(&d.ToolCalls[j]); err != nil {
				return nil, false, err
			}
		}
		if present(choice.FinishReason) {
			if c.stopReason == "" {
				c.stopReason = stopReasonFor(unquote(choice.FinishReason))
			}
			c.closeBlock()
			c.finished = true
		}
	}
	if present(ch.Usage) {
		var u chatUsage
		if err := json.Unmarshal(ch.Usage, &u); err != nil {
			return nil, false, malformed("OpenAI stream chunk usage", err)
		}
		c.usage = anthropicUsageFrom(&u)
	}
	return c.out, false, nil
}

// start writes message_start, once, for the chunk id (a JSON string; nil
// when the stream had no chunk before [DONE]).
func (c *chatToMessagesStream) start(id json.RawMessage) {
	if c.started {
		return
	}
	c.started = true
	c.out = append(c.out, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"...)
	c.out = append(c.out, quote(messageIDFromChatID(unquote(id)))...)
	c.out = append(c.out, `,"type":"message","role":"assistant","model":`...)
	c.out = append(c.out, quote(c.model)...)
	c.out = append(c.out, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	c.out = appendAnthropicUsage(c.out, c.usage)
	c.out = append(c.out, "}}\n\n"...)
}

// appendText writes a text_delta for text, a JSON string, opening a text
// block first when another or none is open.
func (c *chatToMessagesStream) appendText(text json.RawMessage) error {
	return c.appendBlockText(textBlock, frameTextBlock, frameTextDelta, "content", text)
}

// appendReasoning writes a thinking_delta for reasoning, a JSON string,
// opening a thinking block (with an empty signature) first when another or
// none is open.
func (c *chatToMessagesStream) appendReasoning(text json.RawMessage) error {
	return c.appendBlockText(thinkingBlock, frameThinkBlock, frameThinkDelta, "reasoning_content", text)
}

// appendBlockText writes a delta (deltaFrame, then text, a JSON string) to
// a block of kind, opening one with blockFrame first when another or none
// is open. field names text in errors.
func (c *chatToMessagesStream) appendBlockText(kind int, blockFrame, deltaFrame, field string, text json.RawMessage) error {
	if emptyString(text) || c.finished {
		return nil
	}
	if !quotedString(text) {
		return fmt.Errorf("decode OpenAI stream chunk: %s is not a string: %w", field, ErrMalformed)
	}
	if c.block != kind {
		c.closeBlock()
		c.openBlock(kind)
		c.out = append(c.out, blockFrame...)
	}
	c.appendDelta(deltaFrame, text)
	return nil
}

// appendDelta writes a content_block_delta of the open block: deltaFrame,
// then value, a JSON value.
func (c *chatToMessagesStream) appendDelta(deltaFrame string, value []byte) {
	c.out = append(c.out, frameBlockDelta...)
	c.out = strconv.AppendInt(c.out, int64(c.nextBlock-1), 10)
	c.out = append(c.out, deltaFrame...)
	c.out = append(c.out, value...)
	c.out = append(c.out, "}}\n\n"...)
}

// appendThinkingBlocks writes the signature of a thinking block (a
// signature_delta for the open thinking block) and redacted_thinking blocks
// given whole. The thinking text, given in reasoning_content, is not
// repeated. As signedThinking does, it drops thinking without a signature
// and redacted thinking without data.
func (c *chatToMessagesStream) appendThinkingBlocks(blocks []chatThinkingBlockDelta) error {
	if c.finished {
		return nil
	}
	for i := range blocks {
		b := &blocks[i]
		for _, v := range [...]json.RawMessage{b.Type, b.Thinking, b.Signature, b.Data} {
			if present(v) && !quotedString(v) {
				return fmt.Errorf("decode OpenAI stream chunk: thinking_blocks[%d] holds a field that is not a string: %w", i, ErrMalformed)
			}
		}
		switch {
		case string(b.Type) == `"thinking"` && !emptyString(b.Signature):
			if c.block != thinkingBlock {
				// The signature of thinking that did not stream: give it all.
				if err := c.appendReasoning(b.Thinking); err != nil {
					return err
				}
				if c.block != thinkingBlock {
					continue // empty thinking
				}
			}
			c.appendDelta(frameSigDelta, b.Signature)
			c.closeBlock()
		case string(b.Type) == `"redacted_thinking"` && !emptyString(b.Data):
			c.closeBlock()
			c.openBlock(thinkingBlock)
			c.out = append(c.out, `,"content_block":{"type":"redacted_thinking","data":`...)
			c.out = append(c.out, b.Data...)
			c.out = append(c.out, "}}\n\n"...)
			c.closeBlock()
		}
	}
	return nil
}

// appendToolCall writes the events for a piece of a tool call: a
// tool_use block start for a new index, an input_json_delta for arguments.
func (c *chatToMessagesStream) appendToolCall(tc *chatToolCallDelta) error {
	if c.finished {
		return nil
	}
	if present(tc.Type) && string(tc.Type) != `"function"` {
		return unsupported(fmt.Sprintf("tool calls of type %s", tc.Type))
	}
	// A call is new at a higher index, or at the same index with another
	// id (Ollama numbers every call 0).
	again := tc.Index == c.tool && len(c.toolID) > 0 && quotedString(tc.ID) && !emptyString(tc.ID) && !bytes.Equal(tc.ID, c.toolID)
	switch {
	case tc.Index < c.tool:
		return fmt.Errorf("decode OpenAI stream chunk: tool call %d continued after tool call %d began: %w", tc.Index, c.tool, ErrMalformed)
	case tc.Index > c.tool || again:
		if !quotedString(tc.Function.Name) || emptyString(tc.Function.Name) {
			return fmt.Errorf("decode OpenAI stream chunk: tool call %d begins without a name: %w", tc.Index, ErrMalformed)
		}
		id := tc.ID
		c.toolID = c.toolID[:0]
		if !quotedString(id) || emptyString(id) {
			id = quote(toolUseIDPrefix + newIDSuffix())
		} else {
			c.toolID = append(c.toolID, id...)
		}
		c.closeBlock()
		c.tool = tc.Index
		c.openBlock(toolBlock)
		c.out = append(c.out, frameToolBlock...)
		c.out = append(c.out, id...)
		c.out = append(c.out, `,"name":`...)
		c.out = append(c.out, tc.Function.Name...)
		c.out = append(c.out, `,"input":{}}}`+"\n\n"...)
	case c.block != toolBlock:
		return fmt.Errorf("decode OpenAI stream chunk: tool call %d continued after text: %w", tc.Index, ErrMalformed)
	}
	if emptyString(tc.Function.Arguments) {
		return nil
	}
	if !quotedString(tc.Function.Arguments) {
		return fmt.Errorf("decode OpenAI stream chunk: tool call arguments are not a string: %w", ErrMalformed)
	}
	c.appendDelta(frameJSONDelta, tc.Function.Arguments)
	return nil
}

// openBlock writes the start of a content_block_start for the next index,
// up to the content_block, which the caller writes.
func (c *chatToMessagesStream) openBlock(kind int) {
	c.block = kind
	c.out = append(c.out, frameBlockStart...)
	c.out = strconv.AppendInt(c.out, int64(c.nextBlock), 10)
	c.nextBlock++
}

func (c *chatToMessagesStream) closeBlock() {
	if c.block != noBlock {
		c.block = noBlock
		c.out = append(c.out, frameBlockStop...)
		c.out = strconv.AppendInt(c.out, int64(c.nextBlock-1), 10)
		c.out = append(c.out, "}\n\n"...)
	}
}

// fail writes the error event for an OpenAI error in data and ends the
// stream.
func (c *chatToMessagesStream) fail(data []byte) []byte {
	c.out = append(c.out, "event: error\ndata: "...)
	c.out = append(c.out, OpenAIErrorToAnthropic(0, data)...)
	c.out = append(c.out, "\n\n"...)
	c.done = true
	return c.out
}
