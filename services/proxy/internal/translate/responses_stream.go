package translate

// The Responses API's stream events from chat chunks (a provider without
// the Responses API serving a stream request through translation).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// chatToResponsesStream translates an OpenAI chat stream into the
// Responses API's events.
type chatToResponsesStream struct {
	model    string
	id       string
	created  int64
	seq      int
	started  bool
	msgOpen  bool
	msgIndex int // the message item's output_index (when msgOpen)
	items    int // output items added so far: the next one's output_index
	text     strings.Builder
	calls    []*streamCall
	finish   string
	usage    *responsesChatUsage
	finished bool // the terminal event was written
	out      []byte
}

type streamCall struct {
	index       int
	id, name    string
	args        strings.Builder
	outputIndex int
}

func NewChatToResponsesStream(model string) *chatToResponsesStream {
	return &chatToResponsesStream{model: model}
}

func (s *chatToResponsesStream) Terminated() bool { return s.finished }

// NextSequence is the sequence_number of the next event: the gateway's
// own error event, should the stream end with one, carries it.
func (s *chatToResponsesStream) NextSequence() int { return s.seq }

func (s *chatToResponsesStream) emit(typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	data, _ := json.Marshal(fields)
	s.out = append(s.out, "event: "...)
	s.out = append(s.out, typ...)
	s.out = append(s.out, "\ndata: "...)
	s.out = append(s.out, data...)
	s.out = append(s.out, "\n\n"...)
}

func (s *chatToResponsesStream) snapshot(status string) map[string]any {
	var output []map[string]any
	for i := range s.items { // in output_index order, as the events named them
		if s.msgOpen && i == s.msgIndex {
			output = append(output, messageItem("msg_"+s.id, s.text.String(), "completed"))
			continue
		}
		for _, c := range s.calls {
			if c.outputIndex == i {
				output = append(output, map[string]any{"type": "function_call", "id": "fc_" + c.id, "call_id": c.id, "name": c.name,
					"arguments": c.args.String(), "status": "completed"})
			}
		}
	}
	r := responseObject(s.id, s.created, s.model, output, s.finish, responsesUsage(s.usage))
	if status != "" {
		r["status"] = status
	}
	return r
}

func (s *chatToResponsesStream) Event(_ []byte, data []byte) ([]byte, bool, error) {
	s.out = s.out[:0]
	if s.finished {
		return nil, true, nil
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		s.close()
		return s.out, true, nil
	}
	var ch struct {
		ID      string `json:"id"`
		Created int64  `json:"created"`
		Choices []struct {
			Delta struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					Index    int    `json:"index"`
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *responsesChatUsage `json:"usage"`
		Error json.RawMessage     `json:"error"`
	}
	if err := json.Unmarshal(data, &ch); err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(ch.Error) > 0 && string(ch.Error) != "null" {
		var e struct{ Code, Message string }
		_ = json.Unmarshal(ch.Error, &e)
		s.emit("error", map[string]any{"code": e.Code, "message": e.Message, "param": nil})
		s.finished = false
		return s.out, true, nil
	}
	if !s.started {
		s.started = true
		s.id, s.created = ch.ID, ch.Created
		if s.created == 0 {
			s.created = time.Now().Unix()
		}
		s.emit("response.created", map[string]any{"response": s.snapshot("in_progress")})
		s.emit("response.in_progress", map[string]any{"response": s.snapshot("in_progress")})
	}
	if ch.Usage != nil {
		s.usage = ch.Usage
	}
	for _, c := range ch.Choices {
		if t := c.Delta.Content; t != nil && *t != "" {
			if !s.msgOpen {
				s.msgOpen, s.msgIndex = true, s.items
				s.items++
				s.emit("response.output_item.added", map[string]any{"output_index": s.msgIndex,
					"item": map[string]any{"type": "message", "id": "msg_" + s.id, "status": "in_progress", "role": "assistant", "content": []any{}}})
				s.emit("response.content_part.added", map[string]any{"item_id": "msg_" + s.id, "output_index": s.msgIndex, "content_index": 0,
					"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
			}
			s.text.WriteString(*t)
			s.emit("response.output_text.delta", map[string]any{"item_id": "msg_" + s.id, "output_index": s.msgIndex, "content_index": 0, "delta": *t})
		}
		for _, tc := range c.Delta.ToolCalls {
			var call *streamCall
			for _, k := range s.calls {
				// the same index and no other id (Ollama numbers every call 0)
				if k.index == tc.Index && (tc.ID == "" || tc.ID == k.id) {
					call = k
				}
			}
			if call == nil {
				call = &streamCall{index: tc.Index, id: tc.ID, name: tc.Function.Name, outputIndex: s.items}
				s.items++
				s.calls = append(s.calls, call)
				s.emit("response.output_item.added", map[string]any{"output_index": call.outputIndex,
					"item": map[string]any{"type": "function_call", "id": "fc_" + call.id, "call_id": call.id, "name": call.name, "arguments": "", "status": "in_progress"}})
			}
			if a := tc.Function.Arguments; a != "" {
				call.args.WriteString(a)
				s.emit("response.function_call_arguments.delta", map[string]any{"item_id": "fc_" + call.id, "output_index": call.outputIndex, "delta": a})
			}
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			s.finish = *c.FinishReason
		}
	}
	return s.out, false, nil
}

// close ends the translated stream: the open items done, then
// response.completed (or response.incomplete when the output ran out).
func (s *chatToResponsesStream) close() {
	if s.msgOpen {
		id, text := "msg_"+s.id, s.text.String()
		s.emit("response.output_text.done", map[string]any{"item_id": id, "output_index": s.msgIndex, "content_index": 0, "text": text})
		s.emit("response.content_part.done", map[string]any{"item_id": id, "output_index": s.msgIndex, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
		s.emit("response.output_item.done", map[string]any{"output_index": s.msgIndex, "item": messageItem(id, text, "completed")})
	}
	for _, c := range s.calls {
		s.emit("response.function_call_arguments.done", map[string]any{"item_id": "fc_" + c.id, "output_index": c.outputIndex, "arguments": c.args.String()})
		s.emit("response.output_item.done", map[string]any{"output_index": c.outputIndex,
			"item": map[string]any{"type": "function_call", "id": "fc_" + c.id, "call_id": c.id, "name": c.name, "arguments": c.args.String(), "status": "completed"}})
	}
	final := "response.completed"
	if s.finish == "length" || s.finish == "content_filter" {
		final = "response.incomplete"
	}
	s.emit(final, map[string]any{"response": s.snapshot("")})
	s.finished = true
}

// ChainResponses is a converter of first's frames (chat chunks: an
// Anthropic stream translated to chat) into the Responses API's events for
// model.
func ChainResponses(first StreamConverter, model string) StreamConverter {
	return &chained{first: first, second: NewChatToResponsesStream(model)}
}

// chained feeds one converter's frames to the next: an Anthropic stream
// becomes chat chunks, then the Responses API's events.
type chained struct {
	first  StreamConverter
	second *chatToResponsesStream
	out    []byte
}

func (c *chained) Terminated() bool { return c.second.Terminated() }

// NextSequence is the second converter's: the Responses stream numbers
// its events.
func (c *chained) NextSequence() int { return c.second.NextSequence() }

func (c *chained) Event(name, data []byte) ([]byte, bool, error) {
	frames, done, err := c.first.Event(name, data)
	if err != nil {
		return nil, false, err
	}
	c.out = c.out[:0]
	for _, fr := range bytes.Split(frames, []byte("\n\n")) {
		var ev, d []byte
		for _, line := range bytes.Split(fr, []byte("\n")) {
			switch {
			case bytes.HasPrefix(line, []byte("event:")):
				ev = bytes.TrimSpace(line[len("event:"):])
			case bytes.HasPrefix(line, []byte("data:")):
				d = bytes.TrimSpace(line[len("data:"):])
			}
		}
		if d == nil {
			continue
		}
		out, done2, err := c.second.Event(ev, d)
		if err != nil {
			return nil, false, err
		}
		c.out = append(c.out, out...)
		if done2 {
			return c.out, true, nil
		}
	}
	return c.out, done, nil
}

var _ StreamConverter = (*chained)(nil)
