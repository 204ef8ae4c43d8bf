package translate

// Replays: a whole answer told again as the stream of events its endpoint
// would have sent (a cached answer to a stream request). Text answers
// only: an answer that calls tools, or carries blocks other than text, is
// not replayed (ErrNotReplayable), and the caller is answered upstream.

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
)

// ErrNotReplayable: the answer holds what a replay does not tell (tool
// calls, thinking, refusals, images), or is not an answer of its format.
var ErrNotReplayable = errors.New("translate: the answer cannot be replayed as a stream")

// appendEvent appends one server-sent event (event name optional) with data v.
func appendEvent(b []byte, event string, v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if event != "" {
		b = append(b, "event: "...)
		b = append(b, event...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	return append(b, "\n\n"...), nil
}

var done = []byte("data: [DONE]\n\n")

// ChatAnswerToStream tells a chat completion as chat.completion.chunk
// events: per choice its role, its content and its finish reason, then
// the usage (includeUsage) and [DONE].
func ChatAnswerToStream(answer []byte, includeUsage bool) ([]byte, error) {
	var a struct {
		ID                string          `json:"id"`
		Created           int64           `json:"created"`
		Model             string          `json:"model"`
		SystemFingerprint *string         `json:"system_fingerprint,omitempty"`
		ServiceTier       *string         `json:"service_tier,omitempty"`
		Usage             json.RawMessage `json:"usage"`
		Choices           []struct {
			Index   int `json:"index"`
			Message struct {
				Role      string          `json:"role"`
				Content   *string         `json:"content"`
				Refusal   *string         `json:"refusal"`
				ToolCalls json.RawMessage `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(answer, &a); err != nil || len(a.Choices) == 0 {
		return nil, ErrNotReplayable
	}
	type delta struct {
		Role    string  `json:"role,omitempty"`
		Content *string `json:"content,omitempty"`
	}
	type choice struct {
		Index        int     `json:"index"`
		Delta        delta   `json:"delta"`
		Logprobs     any     `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	}
	type chunk struct {
		ID                string          `json:"id"`
		Object            string          `json:"object"`
		Created           int64           `json:"created"`
		Model             string          `json:"model"`
		SystemFingerprint *string         `json:"system_fingerprint,omitempty"`
		ServiceTier       *string         `json:"service_tier,omitempty"`
		Choices           []choice        `json:"choices"`
		Usage             json.RawMessage `json:"usage,omitempty"`
	}
	head := func(cs ...choice) chunk {
		return chunk{ID: a.ID, Object: "chat.completion.chunk", Created: a.Created, Model: a.Model,
			SystemFingerprint: a.SystemFingerprint, ServiceTier: a.ServiceTier, Choices: cs}
	}
	var b []byte
	var err error
	empty := ""
	for _, c := range a.Choices {
		m := c.Message
		if (len(m.ToolCalls) > 0 && !bytes.Equal(m.ToolCalls, []byte("null"))) || (m.Refusal != nil && *m.Refusal != "") {
			return nil, ErrNotReplayable
		}
		role := m.Role
		if role == "" {
			role = "assistant"
		}
		if b, err = appendEvent(b, "", head(choice{Index: c.Index, Delta: delta{Role: role, Content: &empty}})); err != nil {
			return nil, err
		}
		if m.Content != nil && *m.Content != "" {
			if b, err = appendEvent(b, "", head(choice{Index: c.Index, Delta: delta{Content: m.Content}})); err != nil {
				return nil, err
			}
		}
		fr := c.FinishReason
		if b, err = appendEvent(b, "", head(choice{Index: c.Index, FinishReason: &fr})); err != nil {
			return nil, err
		}
	}
	if includeUsage && len(a.Usage) > 0 && !bytes.Equal(a.Usage, []byte("null")) {
		u := head()
		u.Choices, u.Usage = []choice{}, a.Usage
		if b, err = appendEvent(b, "", u); err != nil {
			return nil, err
		}
	}
	return append(b, done...), nil
}

// CompletionAnswerToStream tells a legacy completion as its stream: per
// choice its text, then its finish reason, the usage (includeUsage) and
// [DONE].
func CompletionAnswerToStream(answer []byte, includeUsage bool) ([]byte, error) {
	var a struct {
		ID      string          `json:"id"`
		Created int64           `json:"created"`
		Model   string          `json:"model"`
		Usage   json.RawMessage `json:"usage"`
		Choices []struct {
			Index        int    `json:"index"`
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(answer, &a); err != nil || len(a.Choices) == 0 {
		return nil, ErrNotReplayable
	}
	type choice struct {
		Text         string  `json:"text"`
		Index        int     `json:"index"`
		Logprobs     any     `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	}
	type chunk struct {
		ID      string          `json:"id"`
		Object  string          `json:"object"`
		Created int64           `json:"created"`
		Model   string          `json:"model"`
		Choices []choice        `json:"choices"`
		Usage   json.RawMessage `json:"usage,omitempty"`
	}
	var b []byte
	var err error
	for _, c := range a.Choices {
		fr := c.FinishReason
		for _, ch := range []choice{{Text: c.Text, Index: c.Index}, {Index: c.Index, FinishReason: &fr}} {
			if b, err = appendEvent(b, "", chunk{ID: a.ID, Object: "text_completion", Created: a.Created, Model: a.Model, Choices: []choice{ch}}); err != nil {
				return nil, err
			}
		}
	}
	if includeUsage && len(a.Usage) > 0 && !bytes.Equal(a.Usage, []byte("null")) {
		if b, err = appendEvent(b, "", chunk{ID: a.ID, Object: "text_completion", Created: a.Created, Model: a.Model, Choices: []choice{}, Usage: a.Usage}); err != nil {
			return nil, err
		}
	}
	return append(b, done...), nil
}

// MessagesAnswerToStream tells an Anthropic message as its events:
// message_start, each text block's start, delta and stop, message_delta
// (the stop reason and the output tokens), message_stop.
func MessagesAnswerToStream(answer []byte) ([]byte, error) {
	var a map[string]json.RawMessage
	if err := json.Unmarshal(answer, &a); err != nil || string(a["type"]) != `"message"` {
		return nil, ErrNotReplayable
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(a["content"], &blocks); err != nil {
		return nil, ErrNotReplayable
	}
	var usage map[string]json.RawMessage
	_ = json.Unmarshal(a["usage"], &usage)
	out := usage["output_tokens"]
	if out == nil {
		out = json.RawMessage("0")
	}
	start := maps.Clone(a)
	start["content"], start["stop_reason"], start["stop_sequence"] = json.RawMessage("[]"), json.RawMessage("null"), json.RawMessage("null")
	if usage != nil {
		u := maps.Clone(usage)
		u["output_tokens"] = json.RawMessage("1")
		start["usage"], _ = json.Marshal(u)
	}
	b, err := appendEvent(nil, "message_start", map[string]any{"type": "message_start", "message": start})
	if err != nil {
		return nil, err
	}
	for i, bl := range blocks {
		if bl.Type != "text" {
			return nil, ErrNotReplayable
		}
		for _, ev := range []struct {
			name string
			v    any
		}{
			{"content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]string{"type": "text", "text": ""}}},
			{"content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]string{"type": "text_delta", "text": bl.Text}}},
			{"content_block_stop", map[string]any{"type": "content_block_stop", "index": i}},
		} {
			if b, err = appendEvent(b, ev.name, ev.v); err != nil {
				return nil, err
			}
		}
	}
	delta := map[string]json.RawMessage{"stop_reason": orNull(a["stop_reason"]), "stop_sequence": orNull(a["stop_sequence"])}
	if b, err = appendEvent(b, "message_delta", map[string]any{"type": "message_delta", "delta": delta,
		"usage": map[string]json.RawMessage{"output_tokens": out}}); err != nil {
		return nil, err
	}
	return appendEvent(b, "message_stop", map[string]string{"type": "message_stop"})
}

func orNull(v json.RawMessage) json.RawMessage {
	if v == nil {
		return json.RawMessage("null")
	}
	return v
}

// ResponsesAnswerToStream tells a Responses API response as its events,
// numbered: response.created and in_progress (the response without its
// output), per message item its output_item.added, and per output_text
// part content_part.added, output_text.delta and .done, content_part.done;
// the item's output_item.done; response.completed (the response whole).
func ResponsesAnswerToStream(answer []byte) ([]byte, error) {
	var r map[string]json.RawMessage
	if err := json.Unmarshal(answer, &r); err != nil || string(r["object"]) != `"response"` {
		return nil, ErrNotReplayable
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(r["output"], &items); err != nil {
		return nil, ErrNotReplayable
	}
	seq := 0
	var b []byte
	emit := func(typ string, fields map[string]any) error {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		var err error
		b, err = appendEvent(b, typ, fields)
		return err
	}
	pending := maps.Clone(r)
	pending["status"], pending["output"], pending["usage"] = json.RawMessage(`"in_progress"`), json.RawMessage("[]"), json.RawMessage("null")
	for _, typ := range []string{"response.created", "response.in_progress"} {
		if err := emit(typ, map[string]any{"response": pending}); err != nil {
			return nil, err
		}
	}
	for i, it := range items {
		if string(it["type"]) != `"message"` {
			return nil, ErrNotReplayable
		}
		var id string
		_ = json.Unmarshal(it["id"], &id)
		var parts []map[string]json.RawMessage
		if err := json.Unmarshal(it["content"], &parts); err != nil {
			return nil, ErrNotReplayable
		}
		added := maps.Clone(it)
		added["status"], added["content"] = json.RawMessage(`"in_progress"`), json.RawMessage("[]")
		if err := emit("response.output_item.added", map[string]any{"output_index": i, "item": added}); err != nil {
			return nil, err
		}
		for j, p := range parts {
			if string(p["type"]) != `"output_text"` {
				return nil, ErrNotReplayable
			}
			var text string
			_ = json.Unmarshal(p["text"], &text)
			at := map[string]any{"item_id": id, "output_index": i, "content_index": j}
			with := func(k string, v any) map[string]any {
				m := maps.Clone(at)
				m[k] = v
				return m
			}
			empty := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
			for _, ev := range []struct {
				typ string
				f   map[string]any
			}{
				{"response.content_part.added", with("part", empty)},
				{"response.output_text.delta", with("delta", text)},
				{"response.output_text.done", with("text", text)},
				{"response.content_part.done", with("part", p)},
			} {
				if err := emit(ev.typ, ev.f); err != nil {
					return nil, err
				}
			}
		}
		if err := emit("response.output_item.done", map[string]any{"output_index": i, "item": it}); err != nil {
			return nil, err
		}
	}
	if err := emit("response.completed", map[string]any{"response": r}); err != nil {
		return nil, err
	}
	return b, nil
}
