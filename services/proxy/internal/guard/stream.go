package guard

import (
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/guardrail"
)

// Stream checks an answer relayed as a stream: the text of its deltas
// through a sliding window (guardrail.Window), so that a match split
// across events is caught. The window holds back the last bytes of the
// text (at most 256, up to 4096 while a long match may be in progress):
// each delta relays what the window released, and what it holds goes out
// at Flush, before the stream's next event that is not a delta. A Stream
// is not safe for concurrent use.
type Stream struct {
	set     *Set
	actions []string // per guardrail index: the action in force ("": not attached)
	win     *guardrail.Window
	ms      []guardrail.Match
	buf     []byte
	eff     []config.Attachment
	texts   Texts
	// Decisions are the guardrails that acted on the stream (once each,
	// in the order they first did); Blocked is the one that blocked it.
	Decisions []Decision
	Blocked   *Decision
}

// OutputStream is the checker of an answer to q relayed as a stream (nil:
// no output-stage guardrail with patterns applies). reuse, when not nil,
// is a Stream whose answer ended: it is reset and returned, its buffers
// kept.
func (s *Set) OutputStream(q *Request, reuse *Stream) *Stream {
	q.Output = true
	if !s.Active(q) {
		return nil
	}
	st := reuse
	if st == nil {
		st = new(Stream)
	}
	st.set, st.Decisions, st.Blocked = s, st.Decisions[:0], nil
	st.actions = append(st.actions[:0], make([]string, len(s.defs))...)
	any := false
	s.attached(q, &st.eff, func(i int, g *config.Guardrail, action string) {
		if g.HasPatterns() {
			st.actions[i], any = action, true
		}
	})
	if !any {
		return nil
	}
	if st.win == nil {
		st.win = s.matcher.NewWindow()
	} else {
		st.win.Use(s.matcher)
	}
	return st
}

// Text feeds the text of one delta; it returns the text to relay in its
// place (what the window released, redacted), valid until the next call,
// and false when a blocking guardrail matched: the stream ends there,
// without the text.
func (st *Stream) Text(delta []byte) ([]byte, bool) {
	rel, ms := st.win.Feed(delta, st.ms[:0])
	return st.apply(rel, ms)
}

// Flush releases what the window holds (checked as Text does): before an
// event that is not a delta, and at the stream's end.
func (st *Stream) Flush() ([]byte, bool) {
	rel, ms := st.win.Flush(st.ms[:0])
	out, ok := st.apply(rel, ms)
	st.win.Reset()
	return out, ok
}

// Whole checks a text an event carries whole (a Responses API done event
// repeats what its deltas brought): the matches are redacted in it.
func (st *Stream) Whole(text []byte) ([]byte, bool) {
	return st.apply(text, st.set.matcher.Scan(text, st.ms[:0]))
}

// Event checks a Responses API event that repeats text whole (format
// ResponsesEvent): its data with every text redacted (nil: unchanged), and
// false when a blocking guardrail matched.
func (st *Stream) Event(data []byte) ([]byte, bool) {
	st.texts.Reset(data, ResponsesEvent)
	blocked := false
	out := st.texts.Rewrite(nil, func(_ int, text []byte) ([]byte, bool) {
		repl, ok := st.Whole(text)
		if !ok {
			blocked = true
		}
		return repl, ok && string(repl) != string(text)
	})
	if blocked {
		return nil, false
	}
	if string(out) == string(data) {
		return nil, true
	}
	return out, true
}

// apply acts on the matches in text: a blocking guardrail's ends the
// stream, a redacting one's are replaced, a warning one's recorded.
func (st *Stream) apply(text []byte, ms []guardrail.Match) ([]byte, bool) {
	st.ms = ms
	if len(ms) == 0 {
		return text, true
	}
	start := time.Now()
	redact := ms[:0:0]
	for _, m := range ms {
		action := st.actions[m.Guardrail]
		switch action {
		case "":
			continue
		case config.ActionBlock:
			st.decide(m, action, start)
			return nil, false
		case config.ActionRedact:
			redact = append(redact, m)
		}
		st.decide(m, action, start)
	}
	if len(redact) == 0 {
		return text, true
	}
	st.buf = st.set.matcher.Replace(st.buf[:0], text, redact, func(m guardrail.Match) []byte {
		return replacement(st.set.defs[m.Guardrail], m, st.set.matcher)
	})
	return st.buf, true
}

// decide records guardrail m's verdict the first time it acts.
func (st *Stream) decide(m guardrail.Match, action string, start time.Time) {
	name := st.set.defs[m.Guardrail].Name
	for i := range st.Decisions {
		if st.Decisions[i].Guardrail == name {
			return
		}
	}
	st.Decisions = append(st.Decisions, Decision{Guardrail: name, Action: action, Verdict: action,
		Check: m.Pattern, Took: time.Since(start)})
	if action == config.ActionBlock {
		st.Blocked = &st.Decisions[len(st.Decisions)-1]
	}
}
