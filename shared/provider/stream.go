package provider

import (
	"bytes"

	"switchyard.dev/shared/jsonfield"
)

// EventKind is what one stream event means to the relay.
type EventKind uint8

// The event kinds.
const (
	EventData     EventKind = iota // content or metadata: relay it
	EventTerminal                  // the stream's proper end ([DONE], a finish_reason, message_stop)
	EventError                     // an error reported inside the stream
)

var (
	doneData          = []byte("[DONE]")
	finishReasonField = quoted(`"finish_reason"`, 1)
)

// InspectEvent classifies one server-sent event of a stream in format f.
// It looks at as little of the event as it can: it runs once per chunk.
// An error is recognised by its event name (Anthropic's "error") or by
// what it carries: a non-null top-level "error" member anywhere in the
// object (OpenAI's error chunks, OpenRouter's mid-stream errors that also
// carry choices and a finish_reason "error") or a "type":"error" object.
func InspectEvent(f Format, name, data []byte) EventKind {
	if f == FormatResponses {
		switch string(responsesType(name, data)) {
		case "response.completed", "response.incomplete":
			return EventTerminal
		case "response.failed", "error":
			return EventError
		}
		return EventData
	}
	if f == FormatAnthropic {
		switch string(name) {
		case "message_stop":
			return EventTerminal
		case "error":
			return EventError
		}
		if len(name) == 0 && errorData(data) {
			return EventError
		}
		return EventData
	}
	if bytes.Equal(data, doneData) {
		return EventTerminal
	}
	if errorData(data) {
		return EventError
	}
	if hasFinishReason(data) {
		return EventTerminal
	}
	return EventData
}

// EndsStream reports whether a terminal event (InspectEvent said
// EventTerminal) is the stream's last: OpenAI's [DONE] (a finish_reason
// chunk may be followed by the usage chunk and [DONE]), Anthropic's
// message_stop, the Responses API's response.completed or
// response.incomplete. Nothing the upstream sends after it belongs to the
// answer.
func EndsStream(f Format, data []byte) bool {
	return f != FormatOpenAI || bytes.Equal(data, doneData)
}

var (
	errorField = quoted(`"error"`, 2)
	typeError  = quoted(`"type":"error"`, 9)
)

// errorData reports whether an event's data is an error: a JSON object
// with a non-null top-level "error" member or "type":"error". A chunk
// without the word costs one substring search.
func errorData(data []byte) bool {
	if len(data) < 8 || data[0] != '{' || !errorField.in(data) {
		return false
	}
	if v, _, _, ok := jsonfield.Find(data, "error"); ok && len(v) > 0 && v[0] != 'n' {
		return true
	}
	if typeError.in(data) {
		v, _, _, ok := jsonfield.Find(data, "type")
		return ok && string(v) == `"error"`
	}
	return false
}

// hasFinishReason reports whether a chunk carries a non-null finish_reason.
func hasFinishReason(data []byte) bool {
	for {
		i := finishReasonField.index(data)
		if i < 0 {
			return false
		}
		data = data[i+len(finishReasonField.pat):]
		j := 0
		for j < len(data) && (data[j] == ' ' || data[j] == ':') {
			j++
		}
		if j < len(data) && data[j] == '"' {
			return true
		}
	}
}

var (
	roleAssistant = quoted(`"role":"assistant"`, 11)
	emptyContent  = quoted(`"content":""`, 9)
	nullContent   = quoted(`"content":null`, 9)
	contentField  = quoted(`"content"`, 1)
	promptFilter  = quoted(`"prompt_filter_results"`, 7)
	typeText      = quoted(`"type":"text"`, 9)
	messageItem   = quoted(`"type":"message"`, 9)
	reasoningItem = quoted(`"type":"reasoning"`, 9)
)

// needle is a pattern searched for in event data, from its byte at from:
// JSON is full of quotes and common letters, which make bytes.Index's
// first-byte scan stop at every string; starting from a rarer byte (the
// "rr" of "error", the "f" of "finish_reason") costs one vector scan per
// real candidate instead (a chunk's "error" search: 92 -> 35 ns).
type needle struct {
	pat  []byte
	from int
}

func quoted(pat string, from int) needle {
	if from < 0 || from >= len(pat) {
		panic("provider: a needle starts inside its pattern")
	}
	return needle{[]byte(pat), from}
}

// index is bytes.Index(data, n.pat).
func (n needle) index(data []byte) int {
	head, rest := n.pat[:n.from], n.pat[n.from:]
	for off := 0; ; {
		i := bytes.Index(data[off:], rest)
		if i < 0 {
			return -1
		}
		if j := off + i; j >= n.from && bytes.Equal(data[j-n.from:j], head) {
			return j - n.from
		}
		off += i + 1
	}
}

func (n needle) in(data []byte) bool { return n.index(data) >= 0 }

// IsPreamble reports whether an event only opens a stream and carries no
// content yet: Anthropic's message_start, content_block_start and ping,
// OpenAI's first chunk with the assistant role and empty content, the
// Responses API's response.created, in_progress, a message or reasoning
// item's output_item.added and content_part.added. A relay
// can hold such events back, so that an error right after them (a common
// way for an overloaded upstream to fail) still allows failover.
func IsPreamble(f Format, name, data []byte) bool {
	if f == FormatResponses {
		switch string(responsesType(name, data)) {
		case "response.created", "response.in_progress", "response.content_part.added":
			return true // a content part opens empty: its text comes in deltas
		case "response.output_item.added":
			// A message or reasoning item opens empty; a function call
			// already names its function.
			return messageItem.in(data) || reasoningItem.in(data)
		}
		return false
	}
	if f == FormatAnthropic {
		switch string(name) {
		case "message_start", "ping":
			return true
		case "content_block_start":
			return typeText.in(data)
		}
		return false
	}
	if hasFinishReason(data) {
		return false
	}
	if promptFilter.in(data) { // Azure's opening content-filter chunk
		return true
	}
	if roleAssistant.in(data) {
		return emptyContent.in(data) || nullContent.in(data) || !contentField.in(data)
	}
	return false
}

// responsesType is a Responses API event's type: its event name, else the
// "type" its data names (as written: the types are plain names). It
// returns a slice of name or data, so that switching on it allocates
// nothing on the stream's path.
func responsesType(name, data []byte) []byte {
	if len(name) > 0 {
		return name
	}
	t, _, _, ok := jsonfield.Find(data, "type")
	if !ok || len(t) < 2 || t[0] != '"' {
		return nil
	}
	return t[1 : len(t)-1]
}
