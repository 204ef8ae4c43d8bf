package translate

import (
	"encoding/json"
	"fmt"
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
		Content      json.RawMessage `json:"content"`
		Refusal      json.RawMessage `json:"refusal"`
		ToolCalls    json.RawMessage `json:"tool_calls"`
		FunctionCall json.RawMessage `json:"function_call"`
		Audio        json.RawMessage `json:"audio"`
	} `json:"delta"`
	FinishReason json.RawMessage `json:"finish_reason"`
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
		c.Delta.ToolCalls = c.Delta.ToolCalls[:0]
		c.Delta.FunctionCall = c.Delta.FunctionCall[:0]
		c.Delta.Audio = c.Delta.Audio[:0]
		c.FinishReason = c.FinishReason[:0]
	}
	ch.Choices = all[:0]
	if err := d.decode(data, ch); err != nil {
		return malformed("OpenAI stream chunk", err)
	}
	return nil
}

// Anthropic stream frames, or their fixed parts.
const (
	frameBlockStart = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
	frameBlockDelta = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"
	frameBlockStop  = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
	frameStop       = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
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

	started, blockOpen, done, terminated bool
}

// NewChatToMessagesStream returns a converter of an OpenAI chat completion
// stream into an Anthropic message stream answering for model, the name the
// caller asked for.
//
// The first chunk gives message_start and a content_block_start for a text
// block at index 0; content deltas give text_delta events (a refusal is text
// too, with stop_reason "refusal"); finish_reason closes the block; [DONE]
// gives message_delta, with the stop_reason and the usage of the usage chunk
// (so the upstream request should set stream_options.include_usage, as
// MessagesToChat does), then message_stop. A stream error chunk
// data: {"error":{...}} becomes an "error" event and ends the stream. Tool
// call deltas fail with an *UnsupportedError.
func NewChatToMessagesStream(model string) StreamConverter {
	return &chatToMessagesStream{model: model, out: make([]byte, 0, 512)}
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
		case presentNonEmpty(d.ToolCalls), present(d.FunctionCall):
			return nil, false, unsupported("tool calls")
		case present(d.Audio):
			return nil, false, unsupported("audio content")
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
		if present(choice.FinishReason) {
			if c.stopReason == "" {
				c.stopReason = stopReasonFor(unquote(choice.FinishReason))
			}
			c.closeBlock()
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

// start writes message_start and opens the text block, once, for the
// chunk id (a JSON string; nil when the stream had no chunk before [DONE]).
func (c *chatToMessagesStream) start(id json.RawMessage) {
	if c.started {
		return
	}
	c.started, c.blockOpen = true, true
	c.out = append(c.out, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"...)
	c.out = append(c.out, quote(messageIDFromChatID(unquote(id)))...)
	c.out = append(c.out, `,"type":"message","role":"assistant","model":`...)
	c.out = append(c.out, quote(c.model)...)
	c.out = append(c.out, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	c.out = appendAnthropicUsage(c.out, c.usage)
	c.out = append(c.out, "}}\n\n"+frameBlockStart...)
}

// appendText writes a text_delta for text, a JSON string, while the block
// is open.
func (c *chatToMessagesStream) appendText(text json.RawMessage) error {
	if emptyString(text) || !c.blockOpen {
		return nil
	}
	if !quotedString(text) {
		return fmt.Errorf("decode OpenAI stream chunk: content is not a string: %w", ErrMalformed)
	}
	c.out = append(c.out, frameBlockDelta...)
	c.out = append(c.out, text...)
	c.out = append(c.out, "}}\n\n"...)
	return nil
}

func (c *chatToMessagesStream) closeBlock() {
	if c.blockOpen {
		c.blockOpen = false
		c.out = append(c.out, frameBlockStop...)
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
