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
	finishReasonField = []byte(`"finish_reason"`)
)

// InspectEvent classifies one server-sent event of a stream in format f.
// It looks at as little of the event as it can: it runs once per chunk.
func InspectEvent(f Format, name, data []byte) EventKind {
	if f == FormatAnthropic {
		switch string(name) {
		case "message_stop":
			return EventTerminal
		case "error":
			return EventError
		}
		return EventData
	}
	if bytes.Equal(data, doneData) {
		return EventTerminal
	}
	if len(data) > 8 && data[0] == '{' && data[1] == '"' && data[2] == 'e' {
		if v, _, _, ok := jsonfield.Find(data, "error"); ok && len(v) > 0 && v[0] != 'n' {
			return EventError
		}
	}
	if hasFinishReason(data) {
		return EventTerminal
	}
	return EventData
}

// hasFinishReason reports whether a chunk carries a non-null finish_reason.
func hasFinishReason(data []byte) bool {
	for {
		i := bytes.Index(data, finishReasonField)
		if i < 0 {
			return false
		}
		data = data[i+len(finishReasonField):]
		j := 0
		for j < len(data) && (data[j] == ' ' || data[j] == ':') {
			j++
		}
		if j < len(data) && data[j] == '"' {
			return true
		}
	}
}
