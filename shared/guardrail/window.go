package guardrail

const (
	// windowCap is the most a Window holds back for patterns of bounded
	// reach; patterns that reach further (unbounded regexes, provider
	// keys, JWTs, deny phrases) count as reaching this far.
	windowCap = 256
	// maxHold is the most a Window holds back while a long match (one of
	// an unbounded pattern touching the end of what has arrived, or a JWT
	// still arriving) may be in progress.
	maxHold = 4096
	// windowContext is how much released text a Window keeps before what
	// it scans, for the patterns' look-behind (word boundaries, the local
	// part of an address).
	windowContext = 64
)

// window sets the matcher's hold-back from its patterns' reach.
func (m *Matcher) window() {
	for _, p := range m.patterns {
		r := p.Reach
		if r < 0 || r > windowCap {
			r, m.long = windowCap, true
		}
		m.hold = max(m.hold, r)
	}
}

// unbounded reports whether pattern p may match further than windowCap.
func (m *Matcher) unbounded(p int32) bool {
	r := m.patterns[p].Reach
	return r < 0 || r > windowCap
}

// Window scans a stream (an answer relayed chunk by chunk) and catches
// matches split across chunks. It holds back the last Hold bytes of what it
// was fed (at most 256) and releases text only once every match that
// starts in it is known; while a match of unbounded reach touches the end
// of what has arrived, or a JWT is still arriving, it holds back from that
// match's start, up to 4096 bytes. A match longer than what is held back
// may be reported truncated or missed. A Window is not safe for concurrent
// use.
type Window struct {
	m   *Matcher
	buf []byte // buf[:rel] was released; the last windowContext of it is kept
	rel int
	ms  []Match
}

// NewWindow returns a Window that scans a stream with m.
func (m *Matcher) NewWindow() *Window { return &Window{m: m} }

// Hold returns how many bytes the window holds back (more while a long
// match may be in progress, see Window).
func (w *Window) Hold() int { return w.m.hold }

// Held returns how many bytes fed are not yet released.
func (w *Window) Held() int { return len(w.buf) - w.rel }

// Feed adds chunk to the stream and returns the text it releases (final:
// no match starting in it can change) and the matches that start in it,
// appended to dst, with offsets into the released text; a released match
// ends inside it. The released slice is valid until the next call.
func (w *Window) Feed(chunk []byte, dst []Match) (released []byte, matches []Match) {
	if w.rel > windowContext && w.rel-windowContext >= len(w.buf)/2 {
		drop := w.rel - windowContext
		w.buf = w.buf[:copy(w.buf, w.buf[drop:])]
		w.rel -= drop
	}
	w.buf = append(w.buf, chunk...)
	return w.release(false, dst)
}

// Flush ends the stream: it releases everything held back, with its
// matches, as Feed does.
func (w *Window) Flush(dst []Match) (released []byte, matches []Match) {
	return w.release(true, dst)
}

// Use empties the window for a new stream scanned by m (its buffers
// kept).
func (w *Window) Use(m *Matcher) {
	w.m = m
	w.Reset()
}

// Reset empties the window for a new stream.
func (w *Window) Reset() {
	w.buf, w.rel = w.buf[:0], 0
}

func (w *Window) release(final bool, dst []Match) ([]byte, []Match) {
	n := len(w.buf)
	safe := n
	if !final {
		safe = n - w.m.hold
	}
	if safe <= w.rel {
		return nil, dst
	}
	base := max(0, w.rel-windowContext)
	text := w.buf[base:]
	w.ms = w.m.Scan(text, w.ms[:0])
	rel, end := w.rel-base, n-base
	safe -= base
	if !final && w.m.long {
		held := safe
		for _, x := range w.ms {
			if x.Start >= rel && x.Start < held && x.End+4 > end && w.m.unbounded(x.pat) {
				held = x.Start
			}
		}
		if w.m.jwt {
			if o := jwtOpen(text, rel); o >= 0 && o < held {
				held = o
			}
		}
		if end-held <= maxHold {
			safe = held
		}
	}
	// Never cut a match that is released: release it whole.
	for _, x := range w.ms {
		if x.Start >= rel && x.Start < safe && x.End > safe {
			safe = x.End
		}
	}
	if safe <= rel {
		return nil, dst
	}
	for _, x := range w.ms {
		if x.Start >= rel && x.Start < safe {
			x.Start, x.End = x.Start-rel, x.End-rel
			dst = append(dst, x)
		}
	}
	w.rel = base + safe
	return text[rel:safe], dst
}
