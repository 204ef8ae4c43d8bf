package headroom

import (
	"fmt"
	"testing"
	"time"
)

// heard is a report of instance that makes a book count it as spending
// provider's keys.
func heard(provider, instance string) *Report {
	return &Report{Version: ReportVersion, Provider: provider, Instance: instance, At: testNow,
		Slots: []ReportSlot{{Key: "elsewhere", Windows: []ReportWindow{
			{Kind: "requests", Limit: 10, Remaining: 5, Reset: testNow.Add(time.Minute), At: testNow}}}}}
}

// fleetOfThree is three processes' books that have heard each other on
// provider openai.
func fleetOfThree(t *testing.T) map[string]*Book {
	t.Helper()
	books := map[string]*Book{"p-a": NewBook(), "p-b": NewBook(), "p-c": NewBook()}
	for self, b := range books {
		for other := range books {
			b.Apply(heard("openai", other), self)
		}
	}
	return books
}

func TestFleetRanks(t *testing.T) {
	books := fleetOfThree(t)
	ranks := map[int]string{}
	for self, b := range books {
		size, rank := b.Fleet("openai")
		if size != 3 {
			t.Errorf("%s: fleet of %d, want 3", self, size)
		}
		if prev, dup := ranks[rank]; dup {
			t.Errorf("%s and %s both of rank %d", self, prev, rank)
		}
		ranks[rank] = self
		if size, _ := b.Fleet("anthropic"); size != 1 {
			t.Errorf("%s: fleet of %d on a provider nobody reported, want 1 (alone)", self, size)
		}
	}
	if ranks[0] != "p-a" || ranks[1] != "p-b" || ranks[2] != "p-c" {
		t.Errorf("ranks %v, want by instance id", ranks)
	}
}

// TestFleetSplitsTheLastRequests: processes reading the same remaining
// count of a requests window claim different units of it: however many
// are left, together they fit exactly that many requests, and each
// key's last request is one process's only (different processes' for
// different keys).
func TestFleetSplitsTheLastRequests(t *testing.T) {
	books := fleetOfThree(t)
	reset := after(time.Minute)
	lastOf := map[string]bool{}
	for key := range 12 {
		for remaining := int64(10); remaining >= 0; remaining-- {
			total := int64(0)
			fits := []string{}
			for self, b := range books {
				s := b.Key("openai", fmt.Sprint("k", key))
				// the same reading everywhere; the window's later answers
				// lower it (apply keeps the least left)
				b.Observe(s, reading(kw{Requests, win(10, remaining, reset)}), testNow)
				w, _ := window(s, Requests)
				if w.Remaining != remaining {
					t.Fatalf("%s k%d: remaining %d, want %d", self, key, w.Remaining, remaining)
				}
				total += w.Own
				if ok, _ := s.Fits(Need{}, nowNs); ok {
					fits = append(fits, self)
				}
				if w.Own > 0 != (len(fits) > 0 && fits[len(fits)-1] == self) {
					t.Errorf("%s k%d remaining %d: own %d but fits %v", self, key, remaining, w.Own, fits)
				}
			}
			if total != remaining {
				t.Errorf("k%d remaining %d: the parts add up to %d", key, remaining, total)
			}
			if remaining == 1 {
				if len(fits) != 1 {
					t.Fatalf("k%d: the last request fits %v, want exactly one process", key, fits)
				}
				lastOf[fits[0]] = true
			}
			if remaining >= 3 && len(fits) != 3 {
				t.Errorf("k%d remaining %d: fits only %v", key, remaining, fits)
			}
		}
	}
	if len(lastOf) < 2 {
		t.Errorf("the last request of 12 keys always falls to %v", lastOf)
	}
}

// TestFleetOwnPartLessInFlight: a process's requests in flight come off
// its own part, not the fleet's count.
func TestFleetOwnPartLessInFlight(t *testing.T) {
	books := fleetOfThree(t)
	reset := after(time.Minute)
	for self, b := range books {
		s := b.Key("openai", "k1")
		b.Observe(s, reading(kw{Requests, win(10, 9, reset)}), testNow)
		w, _ := window(s, Requests)
		if w.Own != 3 {
			t.Fatalf("%s: own %d of 9 among 3, want 3", self, w.Own)
		}
		var tickets []Ticket
		for range 3 {
			if ok, _ := s.Fits(Need{}, nowNs); !ok {
				t.Fatalf("%s: refused within its part (%d charged)", self, len(tickets))
			}
			tickets = append(tickets, s.Charge(Need{}))
		}
		if ok, r := s.Fits(Need{}, nowNs); ok || r != reset {
			t.Errorf("%s: its part spent, Fits = %v %d, want false until the reset", self, ok, r)
		}
		tickets[0].Release()
		if ok, _ := s.Fits(Need{}, nowNs); !ok {
			t.Errorf("%s: a request's answer gave nothing back", self)
		}
	}
}

// TestFleetTokensNotSplit: a tokens window is the fleet's whole count for
// every process (a part would refuse a large request the window takes).
func TestFleetTokensNotSplit(t *testing.T) {
	books := fleetOfThree(t)
	for self, b := range books {
		s := b.Key("openai", "k1")
		b.Observe(s, reading(kw{Requests, win(100, 90, after(time.Minute))}, kw{Tokens, win(10000, 2500, after(time.Minute))}), testNow)
		if ok, _ := s.Fits(Need{Input: 2000, Output: 400}, nowNs); !ok {
			t.Errorf("%s: 2,400 tokens of 2,500 left refused", self)
		}
		w, _ := window(s, Tokens)
		if w.Own != 2500 {
			t.Errorf("%s: own tokens %d, want the whole 2500", self, w.Own)
		}
	}
}

// TestFleetForgetsTheIdle: a process not heard from for FleetMemory no
// longer takes a part: the one left alone spends the whole window.
func TestFleetForgetsTheIdle(t *testing.T) {
	b := NewBook()
	b.Apply(heard("openai", "p-b"), "p-a")
	s := b.Key("openai", "k1")
	b.Observe(s, reading(kw{Requests, win(10, 4, after(time.Hour))}), testNow)
	if size, _ := b.Fleet("openai"); size != 2 {
		t.Fatalf("fleet of %d, want 2", size)
	}
	if w, _ := window(s, Requests); w.Own != 2 {
		t.Fatalf("own %d of 4 between 2, want 2", w.Own)
	}
	b.TakeReports("p-a", time.Now())
	if size, _ := b.Fleet("openai"); size != 2 {
		t.Fatalf("forgot p-b at once: fleet of %d", size)
	}
	b.TakeReports("p-a", time.Now().Add(FleetMemory+time.Second))
	if size, _ := b.Fleet("openai"); size != 1 {
		t.Fatalf("p-b silent for longer than FleetMemory: fleet of %d, want 1", size)
	}
	if w, _ := window(s, Requests); w.Own != 4 {
		t.Errorf("alone: own %d, want the whole 4", w.Own)
	}
	b.Apply(heard("openai", "p-b"), "p-a")
	if size, _ := b.Fleet("openai"); size != 2 {
		t.Errorf("p-b heard again: fleet of %d, want 2", size)
	}
}

// TestFleetAlone: a process that heard nobody, or a slot made outside a
// book, spends the whole window.
func TestFleetAlone(t *testing.T) {
	_, s := observed(t, kw{Requests, win(10, 1, after(time.Minute))})
	if ok, _ := s.Fits(Need{}, nowNs); !ok {
		t.Error("alone: the last request refused")
	}
	var f *fleet
	if got := f.own(7, 3); got != 7 {
		t.Errorf("nil fleet: own %d, want 7", got)
	}
}

func TestFleetFitsAllocatesNothing(t *testing.T) {
	books := fleetOfThree(t)
	b := books["p-b"]
	s := b.Key("openai", "k1")
	b.Observe(s, reading(kw{Requests, win(10, 5, after(time.Minute))}), testNow)
	if n := testing.AllocsPerRun(100, func() { s.Fits(Need{Input: 10}, nowNs) }); n != 0 {
		t.Errorf("Fits allocates %v per call", n)
	}
}
