// Package guard runs guardrails on the requests the proxy sends upstream:
// it finds the text a request carries (its messages, system prompt,
// instructions, tool results, prompts and inputs, per API format), what it
// attaches and which tools it offers, so that the guardrails' patterns,
// limits and tool rules are checked on exactly what goes out, and a
// redaction rewrites the text inside the JSON without touching anything
// else (model, parameters, keys).
package guard

import (
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/guardrail"
	"switchyard.dev/shared/jsonfield"
)

// Format is the API format of a request body.
type Format uint8

// The formats whose text guardrails read.
const (
	Chat        Format = iota // OpenAI chat completions
	Messages                  // Anthropic messages
	Responses                 // OpenAI Responses API
	Completions               // OpenAI legacy completions
	Embeddings                // OpenAI embeddings

	// Answers (the output stage): what an answer in the caller's format
	// brings back.
	ChatAnswer        // a chat completion: choices[].message content and tool call arguments
	MessagesAnswer    // an Anthropic message: content[] text
	ResponsesAnswer   // a Responses API response: output[] content text and call arguments
	CompletionsAnswer // a legacy completion: choices[].text
	// ResponsesEvent is a Responses API stream event that repeats text
	// whole (output_text.done, content_part.done, output_item.done,
	// completed): its text, part, item or response.
	ResponsesEvent
)

// AnswerOf is the format of the answers to requests of format f (false:
// its answers carry no text guardrails read: embeddings).
func AnswerOf(f Format) (Format, bool) {
	switch f {
	case Chat:
		return ChatAnswer, true
	case Messages:
		return MessagesAnswer, true
	case Responses:
		return ResponsesAnswer, true
	case Completions:
		return CompletionsAnswer, true
	}
	return 0, false
}

// span is a string value of the body: body[start:end] is its raw JSON
// (with its quotes).
type span struct{ start, end int }

// maxSpans bounds the text values one request is checked by: a request
// with more (a conversation of thousands of turns) is checked on the
// first maxSpans, and Walk reports that it was cut (a guardrail then
// blocks it rather than let unchecked text through).
const maxSpans = 4096

// walker collects the spans of one body.
type walker struct {
	body  []byte
	spans []span
	cut   bool
}

// offset is where sub (a slice of w.body) starts in it.
func (w *walker) offset(sub []byte) int { return cap(w.body) - cap(sub) }

// str notes v when it is a string.
func (w *walker) str(v []byte) {
	if len(v) < 2 || v[0] != '"' {
		return
	}
	if len(w.spans) == maxSpans {
		w.cut = true
		return
	}
	s := w.offset(v)
	w.spans = append(w.spans, span{s, s + len(v)})
}

// strs notes v when it is a string, or each string of an array.
func (w *walker) strs(v []byte) {
	if !jsonfield.Each(v, w.str) {
		w.str(v)
	}
}

// field calls fn with each field of obj named one of names.
func field(obj []byte, fn func(name string, v []byte), names ...string) {
	vals := jsonfield.Lookup(obj, names...)
	for i, n := range names {
		if vals[i] != nil {
			fn(n, vals[i])
		}
	}
}

// content notes a message's content: a string, or parts whose text
// (text, input_text, output_text parts; Anthropic text blocks) is noted,
// with Anthropic's tool_result content inside them.
func (w *walker) content(v []byte) {
	if jsonfield.Each(v, func(part []byte) {
		field(part, func(name string, x []byte) {
			switch name {
			case "text":
				w.str(x)
			case "content": // a tool_result block
				w.content(x)
			}
		}, "text", "content")
	}) {
		return
	}
	w.str(v)
}

// chatMessage notes a chat message's content and its tool calls'
// arguments.
func (w *walker) chatMessage(m []byte) {
	field(m, func(name string, x []byte) {
		switch name {
		case "content":
			w.content(x)
		case "tool_calls":
			jsonfield.Each(x, func(tc []byte) {
				field(tc, func(_ string, fn []byte) { field(fn, func(_ string, a []byte) { w.str(a) }, "arguments") }, "function")
			})
		}
	}, "content", "tool_calls")
}

// responseOutput notes the text of a Responses API response's output.
func (w *walker) responseOutput(resp []byte) {
	field(resp, func(_ string, out []byte) { jsonfield.Each(out, w.outputItem) }, "output")
}

// outputItem notes the text of one Responses API output item: a
// message's content parts, a function call's arguments.
func (w *walker) outputItem(item []byte) {
	field(item, func(name string, x []byte) {
		if name == "content" {
			w.content(x)
		} else {
			w.str(x)
		}
	}, "content", "arguments")
}

// walk collects the text of body in format f.
func (w *walker) walk(f Format) {
	b := w.body
	switch f {
	case Chat:
		field(b, func(_ string, msgs []byte) {
			jsonfield.Each(msgs, w.chatMessage)
		}, "messages")
	case Messages:
		field(b, func(name string, x []byte) {
			switch name {
			case "system":
				w.content(x)
			case "messages":
				jsonfield.Each(x, func(m []byte) { field(m, func(_ string, c []byte) { w.content(c) }, "content") })
			}
		}, "system", "messages")
	case Responses:
		field(b, func(name string, x []byte) {
			switch name {
			case "instructions":
				w.str(x)
			case "input":
				if jsonfield.Each(x, func(item []byte) {
					field(item, func(name string, c []byte) {
						if name == "content" {
							w.content(c)
						} else {
							w.str(c) // a function_call_output's output
						}
					}, "content", "output")
				}) {
					return
				}
				w.str(x)
			}
		}, "instructions", "input")
	case ChatAnswer:
		field(b, func(_ string, cs []byte) {
			jsonfield.Each(cs, func(c []byte) {
				field(c, func(_ string, m []byte) { w.chatMessage(m) }, "message")
			})
		}, "choices")
	case MessagesAnswer:
		field(b, func(_ string, c []byte) { w.content(c) }, "content")
	case ResponsesAnswer:
		w.responseOutput(b)
	case CompletionsAnswer:
		field(b, func(_ string, cs []byte) {
			jsonfield.Each(cs, func(c []byte) { field(c, func(_ string, x []byte) { w.str(x) }, "text") })
		}, "choices")
	case ResponsesEvent:
		field(b, func(name string, x []byte) {
			switch name {
			case "text":
				w.str(x)
			case "part":
				field(x, func(_ string, t []byte) { w.str(t) }, "text")
			case "item":
				w.outputItem(x)
			case "response":
				w.responseOutput(x)
			}
		}, "text", "part", "item", "response")
	case Completions:
		field(b, func(_ string, x []byte) { w.strs(x) }, "prompt")
	case Embeddings:
		field(b, func(_ string, x []byte) { w.strs(x) }, "input")
	}
}

// Texts is the text of one request body: each string value a guardrail
// reads, in order.
type Texts struct {
	w       walker
	scratch []byte
	// a check's buffers, kept with the texts' between requests
	eff       []config.Attachment
	found     []string
	ms        []guardrail.Match
	decisions []Decision
}

// Reset reads body (format f) anew; Texts keeps its buffers between
// requests.
func (t *Texts) Reset(body []byte, f Format) {
	t.w = walker{body: body, spans: t.w.spans[:0]}
	t.w.walk(f)
}

// Cut reports whether the body had more text values than are checked.
func (t *Texts) Cut() bool { return t.w.cut }

// Len is the number of text values.
func (t *Texts) Len() int { return len(t.w.spans) }

// Text is the i-th text value, escapes resolved, valid until the next
// call of Text or Reset.
func (t *Texts) Text(i int) []byte {
	sp := t.w.spans[i]
	t.scratch, _ = jsonfield.AppendUnquoted(t.scratch[:0], t.w.body[sp.start:sp.end])
	return t.scratch
}

// Rewrite appends to dst the body with the text values replace changes:
// replace gets each value's text (escapes resolved) and returns its new
// text and true, or false to keep it. Everything else of the body is
// copied as it was.
func (t *Texts) Rewrite(dst []byte, replace func(i int, text []byte) ([]byte, bool)) []byte {
	prev := 0
	body := t.w.body
	for i, sp := range t.w.spans {
		repl, ok := replace(i, t.Text(i))
		if !ok {
			continue
		}
		dst = append(dst, body[prev:sp.start]...)
		dst = jsonfield.AppendQuoted(dst, repl)
		prev = sp.end
	}
	return append(dst, body[prev:]...)
}
