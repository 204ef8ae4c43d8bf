package cache

import (
	"context"
	"sync"
)

// flights coalesces identical requests in flight on one proxy: the first
// goes upstream, the others wait for its answer.
type flights struct {
	mu sync.Mutex
	m  map[string]*Flight
}

// Flight is one request in flight that identical requests wait for. A
// whole answer is shared when it lands (Land); a stream is shared as it is
// relayed: the leader opens the flight's stream (Open), writes each part
// it relays to its own caller (Write) and ends it (End), and a follower
// writes the same bytes to its caller as they come (Next), from the first.
type Flight struct {
	done  chan struct{}
	entry *Entry // set before done closes (or by End); nil: no answer to share

	mu     sync.Mutex
	opened chan struct{} // closed by Open or Land, whichever comes first
	open   *Entry        // what serves the stream (provider, model, key id): set by Open
	buf    []byte        // what the leader relayed so far
	limit  int           // what buf may hold while no follower reads it (the store's max entry)
	reads  int           // the followers reading the stream
	over   bool          // buf passed limit before a follower came: the stream is not shared
	end    StreamEnd     // StreamOpen while the stream is relayed
	more   chan struct{} // closed when buf grows or the stream ends (nil: no follower waits)
}

// StreamEnd is how a shared stream ended.
type StreamEnd int

// How a shared stream ends.
const (
	StreamOpen   StreamEnd = iota // still relayed
	StreamWhole                   // its terminal event was relayed
	StreamClosed                  // it ended with an error event the stream carries
	StreamCut                     // it stopped (the leader's caller left): a follower ends it itself
)

// Join returns the flight of key and whether the caller leads it (then it
// must call Land when its answer is known); a follower waits with Wait
// (a whole answer) or Opened and Next (a stream).
func (s *Store) Join(key string) (*Flight, bool) {
	s.flights.mu.Lock()
	defer s.flights.mu.Unlock()
	if f, ok := s.flights.m[key]; ok {
		return f, false
	}
	if s.flights.m == nil {
		s.flights.m = map[string]*Flight{}
	}
	f := &Flight{done: make(chan struct{}), opened: make(chan struct{}), limit: s.maxEntry}
	s.flights.m[key] = f
	return f, true
}

// Land ends the leader's flight of key with its entry (nil: nothing to
// share: the followers go upstream themselves). A stream the leader
// opened and did not end is cut.
func (s *Store) Land(key string, f *Flight, e *Entry) {
	s.flights.mu.Lock()
	if s.flights.m[key] == f {
		delete(s.flights.m, key)
	}
	s.flights.mu.Unlock()
	f.mu.Lock()
	if e != nil {
		f.entry = e
	}
	f.mu.Unlock()
	f.End(StreamCut, nil) // no-op when the stream ended
	close(f.done)
}

// Wait waits for the flight to land, at most until ctx ends or gone
// closes: the leader's entry, nil when it had none or the wait ended
// first.
func (f *Flight) Wait(ctx context.Context, gone <-chan struct{}) *Entry {
	select {
	case <-f.done:
		return f.entry
	case <-ctx.Done():
	case <-gone:
	}
	return nil
}

// Open marks the leader's stream as committed to its caller, served as
// served says (its Provider, ProviderType, Model and KeyID).
func (f *Flight) Open(served *Entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open == nil && f.end == StreamOpen {
		f.open = served
		close(f.opened)
	}
}

// Write shares p, a part of the leader's stream as its caller got it. A
// stream that grows past the flight's limit before any follower reads it
// is not shared (nor kept): its buffer is let go, and followers that come
// later go upstream themselves; one that followers read grows with it.
func (f *Flight) Write(p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.end != StreamOpen || f.over {
		return
	}
	if f.reads == 0 && len(f.buf)+len(p) > f.limit {
		f.over, f.buf = true, nil
		return
	}
	f.buf = append(f.buf, p...)
	f.wake()
}

// End ends the shared stream (once: later calls do nothing), with what
// the leader stored of it (nil: nothing).
func (f *Flight) End(how StreamEnd, stored *Entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.end != StreamOpen {
		return
	}
	f.end = how
	if stored != nil {
		f.entry = stored
	}
	if f.open == nil {
		close(f.opened) // never opened: the followers go upstream
	}
	f.wake()
}

func (f *Flight) wake() {
	if f.more != nil {
		close(f.more)
		f.more = nil
	}
}

// Stored is the entry the leader stored (nil: none, or not yet).
func (f *Flight) Stored() *Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.entry
}

// Shared is what the leader's stream relayed so far (all of it once it
// ended), nil when it grew past the limit unread: the bytes are not
// changed afterwards.
func (f *Flight) Shared() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.buf[:len(f.buf):len(f.buf)]
}

// Opened waits until the leader's stream is committed or the flight ended
// without one, at most until ctx ends or gone closes: what serves the
// stream, nil when there is none to follow (or it is not shared). A
// caller it returns an entry to reads the stream with Next.
func (f *Flight) Opened(ctx context.Context, gone <-chan struct{}) *Entry {
	select {
	case <-f.opened:
	case <-ctx.Done():
		return nil
	case <-gone:
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open == nil || f.over {
		return nil
	}
	f.reads++
	return f.open
}

// Next returns the stream's bytes from offset from on (empty when none
// are new), how it ended (StreamOpen: not yet), and, when nothing is new
// and it has not ended, a channel closed when there is more.
func (f *Flight) Next(from int) ([]byte, StreamEnd, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if from < len(f.buf) {
		return f.buf[from:len(f.buf):len(f.buf)], StreamOpen, nil
	}
	if f.end != StreamOpen {
		return nil, f.end, nil
	}
	if f.more == nil {
		f.more = make(chan struct{})
	}
	return nil, StreamOpen, f.more
}
