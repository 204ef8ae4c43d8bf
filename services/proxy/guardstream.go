package proxy

// Output guardrails on a relayed stream: the text of each delta event (in
// the caller's format) goes through the request's guard.Stream, whose
// sliding window catches a match split across events; a delta relays what
// the window released, redacted, and what it holds goes out in a delta of
// the same shape before the next event that is not one. A block ends the
// stream with one error event in the endpoint's format.

import (
	"bytes"
	"sync"

	"switchyard.dev/services/proxy/internal/guard"
	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/provider"
)

// streamGuard is a relay's output check.
type streamGuard struct {
	st     *guard.Stream
	format provider.Format
	op     provider.Op
	// pre and post are the last delta event around its text's JSON
	// string: a delta of held text is pre + text + post.
	pre, post []byte
	delta     bool // a delta event was seen (pre and post are set)
	out, text []byte
	blocked   bool
}

// streamGuards keeps the output checks of ended streams, with their
// buffers.
var streamGuards = sync.Pool{New: func() any { return new(streamGuard) }}

// outputGuard is the output check of the request's stream (nil: no
// output-stage guardrail applies). release gives it back when the stream
// ended.
func (r *request) outputGuard() *streamGuard {
	q, ok := r.guardRequest(r.sel.route.Name, true)
	if !ok {
		return nil
	}
	g := streamGuards.Get().(*streamGuard)
	st := r.rt.guards.OutputStream(&q, g.st)
	if st == nil {
		streamGuards.Put(g)
		return nil
	}
	g.st, g.format, g.op, g.delta, g.blocked = st, r.ep.format, r.ep.op, false, false
	return g
}

// release gives the check back to the pool (nil: nothing to do); it
// must not be used after.
func (g *streamGuard) release() {
	if g != nil {
		streamGuards.Put(g)
	}
}

// frames checks the caller-format frames of one upstream event: it
// returns what to relay, valid until the next call. Once a guardrail
// blocked, it returns the frames before the block and every later call
// nothing.
func (g *streamGuard) frames(b []byte, seq func() int) []byte {
	if g.blocked || len(b) == 0 {
		return nil
	}
	g.out = g.out[:0]
	for len(b) > 0 {
		end := bytes.Index(b, []byte("\n\n"))
		if end < 0 {
			end = len(b)
		} else {
			end += 2
		}
		ev := b[:end]
		b = b[end:]
		if !g.event(ev) {
			g.blocked = true
			g.out = append(g.out, streamErrorEvent(g.format, 400, gwerror.GuardrailBlocked, g.st.Blocked.AnswerMessage(), seq())...)
			return g.out
		}
	}
	return g.out
}

// event checks one SSE event and appends what to relay of it.
func (g *streamGuard) event(ev []byte) bool {
	name, data, dataAt := sseParts(ev)
	if dataAt < 0 {
		g.out = append(g.out, ev...)
		return true
	}
	if v := g.deltaText(name, data); v != nil {
		g.text, _ = jsonfield.AppendUnquoted(g.text[:0], v)
		rel, ok := g.st.Text(g.text)
		if !ok {
			return false
		}
		start := dataAt + (cap(data) - cap(v))
		g.pre = append(g.pre[:0], ev[:start]...)
		g.post = append(g.post[:0], ev[start+len(v):]...)
		g.delta = true
		g.out = append(g.out, g.pre...)
		g.out = jsonfield.AppendQuoted(g.out, rel)
		g.out = append(g.out, g.post...)
		return true
	}
	// not a delta: what the window holds goes out first
	held, ok := g.st.Flush()
	if !ok {
		return false
	}
	if len(held) > 0 && g.delta {
		g.out = append(g.out, g.pre...)
		g.out = jsonfield.AppendQuoted(g.out, held)
		g.out = append(g.out, g.post...)
	}
	if g.format == provider.FormatResponses && len(data) > 0 && data[0] == '{' {
		repl, ok := g.st.Event(data)
		if !ok {
			return false
		}
		if repl != nil {
			g.out = append(g.out, ev[:dataAt]...)
			g.out = append(g.out, repl...)
			g.out = append(g.out, ev[dataAt+len(data):]...)
			return true
		}
	}
	g.out = append(g.out, ev...)
	return true
}

// deltaText is the JSON string of a delta event's text (nil: not a text
// delta): chat chunks' choices[0].delta.content, completions'
// choices[0].text, Anthropic's content_block_delta text, the Responses
// API's output_text.delta.
func (g *streamGuard) deltaText(name, data []byte) []byte {
	if len(data) == 0 || data[0] != '{' {
		return nil
	}
	var v []byte
	switch g.format {
	case provider.FormatAnthropic:
		if string(name) != "content_block_delta" {
			return nil
		}
		v = jsonfield.Lookup(jsonfield.Lookup(data, "delta")[0], "text")[0]
	case provider.FormatResponses:
		if string(name) != "response.output_text.delta" {
			return nil
		}
		v = jsonfield.Lookup(data, "delta")[0]
	default:
		jsonfield.Each(jsonfield.Lookup(data, "choices")[0], func(c []byte) {
			if v != nil {
				return
			}
			if g.op == provider.OpCompletions {
				v = jsonfield.Lookup(c, "text")[0]
			} else {
				v = jsonfield.Lookup(jsonfield.Lookup(c, "delta")[0], "content")[0]
			}
		})
	}
	if len(v) < 2 || v[0] != '"' {
		return nil
	}
	return v
}

// sseParts is an SSE event's name, its data (one line) and where the data
// starts in ev (-1: no data line).
func sseParts(ev []byte) (name, data []byte, at int) {
	at = -1
	off := 0
	for line := range bytes.Lines(ev) {
		l := bytes.TrimRight(line, "\r\n")
		switch {
		case bytes.HasPrefix(l, []byte("event:")):
			name = bytes.TrimSpace(l[len("event:"):])
		case bytes.HasPrefix(l, []byte("data:")) && at < 0:
			d := l[len("data:"):]
			skip := len(d) - len(bytes.TrimLeft(d, " "))
			data, at = d[skip:], off+len("data:")+skip
		}
		off += len(line)
	}
	return name, data, at
}

// guarded is what the relay writes of frames (the caller-format frames of
// one upstream event): all of them when no output guardrail applies.
func (rl *relay) guarded(frames []byte) []byte {
	if rl.og == nil {
		return frames
	}
	return rl.og.frames(frames, rl.nextSequence)
}

// stopped reports whether a guardrail blocked the stream (false on nil).
func (g *streamGuard) stopped() bool { return g != nil && g.blocked }
