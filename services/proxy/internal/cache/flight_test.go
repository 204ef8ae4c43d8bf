package cache

import (
	"context"
	"testing"
	"time"
)

// TestFlightSharesAStream: a follower that joins late reads the stream
// from its first byte, waits for more, and learns how it ended; a flight
// that lands without opening a stream tells followers there is none.
func TestFlightSharesAStream(t *testing.T) {
	s := NewStore(1<<20, 1<<16, time.Second, nil)
	f, lead := s.Join("k")
	if _, again := s.Join("k"); !lead || again {
		t.Fatalf("lead %v, a second join leads %v", lead, again)
	}
	f.Open(&Entry{Provider: "p"})
	f.Write([]byte("data: a\n\n"))
	if e := f.Opened(context.Background(), nil); e == nil || e.Provider != "p" {
		t.Fatalf("opened: %+v", e)
	}
	b, end, _ := f.Next(0)
	if string(b) != "data: a\n\n" || end != StreamOpen {
		t.Fatalf("next(0): %q %v", b, end)
	}
	_, _, more := f.Next(len(b))
	if more == nil {
		t.Fatal("no channel to wait on")
	}
	f.Write([]byte("data: b\n\n"))
	<-more
	if b, _, _ := f.Next(9); string(b) != "data: b\n\n" {
		t.Fatalf("next(9): %q", b)
	}
	stored := &Entry{Provider: "p", Model: "m"}
	f.End(StreamWhole, stored)
	f.Write([]byte("late"))
	if b, end, _ := f.Next(18); len(b) != 0 || end != StreamWhole || f.Stored() != stored || len(f.Shared()) != 18 {
		t.Fatalf("after the end: %q %v %v %q", b, end, f.Stored(), f.Shared())
	}
	s.Land("k", f, stored)
	if _, lead := s.Join("k"); !lead {
		t.Error("a join after the landing follows the old flight")
	}

	g, _ := s.Join("g")
	s.Land("g", g, nil)
	if e := g.Opened(context.Background(), nil); e != nil {
		t.Errorf("a flight that landed without a stream: %+v", e)
	}
	if _, end, _ := g.Next(0); end != StreamCut {
		t.Errorf("its end: %v", end)
	}
}

// TestFlightOverLimit: a stream that outgrows the store's max entry
// before anyone follows it is let go (no follower, nothing shared to
// keep); one a follower reads keeps growing for it.
func TestFlightOverLimit(t *testing.T) {
	s := NewStore(1<<20, 16, time.Second, nil)
	f, _ := s.Join("k")
	f.Open(&Entry{Provider: "p"})
	f.Write([]byte("0123456789"))
	f.Write([]byte("0123456789"))
	if e := f.Opened(context.Background(), nil); e != nil || f.Shared() != nil {
		t.Errorf("an unread stream over the limit: follower %+v, shared %q", e, f.Shared())
	}
	s.Land("k", f, nil)

	g, _ := s.Join("g")
	g.Open(&Entry{Provider: "p"})
	if e := g.Opened(context.Background(), nil); e == nil {
		t.Fatal("no stream to follow")
	}
	g.Write([]byte("0123456789"))
	g.Write([]byte("0123456789"))
	if b, _, _ := g.Next(0); len(b) != 20 {
		t.Errorf("a followed stream over the limit: %q", b)
	}
}
