package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
)

// StreamConverter translates one streamed response, one server-sent event at
// a time. It is not safe for concurrent use.
type StreamConverter interface {
	// Event takes one upstream event (its "event:" name, empty when absent,
	// and its data) and returns the SSE frames to write to the caller:
	// complete frames, each ending in "\n\n", possibly none. frames is valid
	// until the next call to Event. done is true once nothing more will be
	// written: after the terminal event, or after an upstream error event
	// was translated. Later calls return (nil, true, nil).
	//
	// err is non-nil when the event cannot be translated: it wraps
	// ErrMalformed, or is an *UnsupportedError (a tool call). The stream
	// should then be abandoned.
	Event(name, data []byte) (frames []byte, done bool, err error)
	// Terminated reports whether the terminal event ([DONE] for OpenAI,
	// message_stop for Anthropic) was produced: the proxy calls it when the
	// upstream stream ended, to tell a complete response from a cut one. It
	// stays false after an upstream error event.
	Terminated() bool
}

var (
	_ StreamConverter = (*messagesToChatStream)(nil)
	_ StreamConverter = (*chatToMessagesStream)(nil)
)

var doneData = []byte("[DONE]")

// quotedString reports whether raw is a JSON string, so that it can be
// copied into an output frame as is.
func quotedString(raw []byte) bool {
	return len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"'
}

// emptyString reports whether raw is absent, null or "".
func emptyString(raw []byte) bool {
	return !present(raw) || (len(raw) == 2 && raw[0] == '"')
}

// unquote returns the string of a JSON string value, or "".
func unquote(raw []byte) string {
	var s string
	if quotedString(raw) {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

// quote returns s as a JSON string.
func quote(s string) []byte {
	b, _ := marshal(s) // cannot fail for a string
	return b
}

// appendChatUsage appends an OpenAI usage object for u.
func appendChatUsage(b []byte, u anthropicUsage) []byte {
	cu := chatUsageFrom(u)
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(cu.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(cu.CompletionTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(cu.TotalTokens), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(cu.PromptTokensDetails.CachedTokens), 10)
	return append(b, "}}"...)
}

// appendAnthropicUsage appends an Anthropic usage object for u.
func appendAnthropicUsage(b []byte, u anthropicUsage) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.InputTokens), 10)
	b = append(b, `,"cache_creation_input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CacheCreationInputTokens), 10)
	b = append(b, `,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CacheReadInputTokens), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(u.OutputTokens), 10)
	return append(b, '}')
}

// isDone reports whether an OpenAI stream event's data is the [DONE] marker.
func isDone(data []byte) bool {
	return bytes.Equal(bytes.TrimSpace(data), doneData)
}

// eventDecoder decodes the JSON data of one event after another into a
// value, reusing encoding/json's decoding state, which json.Unmarshal
// allocates afresh for every call.
type eventDecoder struct {
	src  eventSource
	dec  *json.Decoder
	read int64 // bytes given to dec so far
}

// eventSource serves the current event's data to the json.Decoder.
type eventSource struct{ data []byte }

func (s *eventSource) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.data)
	s.data = s.data[n:]
	return n, nil
}

// decode decodes data, which must hold one JSON value, into v.
func (d *eventDecoder) decode(data []byte, v any) error {
	data = bytes.TrimRight(data, " \t\r\n")
	if d.dec == nil {
		d.dec, d.read = json.NewDecoder(&d.src), 0
	}
	d.src.data = data
	d.read += int64(len(data))
	err := d.dec.Decode(v)
	if err == nil && (len(d.src.data) > 0 || d.dec.InputOffset() != d.read) {
		err = errTrailingData
	}
	if err != nil {
		// A json.Decoder keeps a syntax error, and may hold part of the
		// value: start afresh.
		d.dec, d.src.data = nil, nil
	}
	return err
}

var errTrailingData = errors.New("invalid character after top-level value")

// Sequencer is a converter into the Responses API's events, which are
// numbered (sequence_number): a relay numbers its own closing error event
// after them.
type Sequencer interface{ NextSequence() int }
