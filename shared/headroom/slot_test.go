package headroom

import (
	"math"
	"testing"
	"time"
)

// kw is one window a test reading states.
type kw struct {
	k Kind
	w Window
}

// reading states the windows ws.
func reading(ws ...kw) *Reading {
	r := &Reading{}
	for _, x := range ws {
		r.Windows[x.k] = x.w
		r.Has |= 1 << x.k
	}
	return r
}

// observed is a fresh book's key slot holding ws as an own reading taken
// at testNow.
func observed(t *testing.T, ws ...kw) (*Book, *Slot) {
	t.Helper()
	b := NewBook()
	s := b.Key("openai", "k1")
	if len(ws) > 0 && !b.Observe(s, reading(ws...), testNow) {
		t.Fatalf("first reading did not change the slot")
	}
	return b, s
}

// window is the slot's snapshot of window k (false: not stated).
func window(s *Slot, k Kind) (Snapshot, bool) {
	for _, w := range s.Windows(nil) {
		if w.Kind == k {
			return w, true
		}
	}
	return Snapshot{}, false
}

// inFlight is what the slot counts in flight on window k.
func inFlight(t *testing.T, s *Slot, k Kind) int64 {
	t.Helper()
	w, ok := window(s, k)
	if !ok {
		t.Fatalf("window %s not stated", k)
	}
	return w.InFlight
}

func TestNeedOf(t *testing.T) {
	n := Need{Input: 30, Output: 7}
	want := map[Kind]int64{Requests: 1, Tokens: 37, InputTokens: 30, OutputTokens: 7, NumKinds: 0}
	for k, v := range want {
		if got := n.of(k); got != v {
			t.Errorf("Need%+v.of(%s) = %d, want %d", n, k, got, v)
		}
	}
	if got := (Need{}).of(Requests); got != 1 {
		t.Errorf("an empty need takes %d requests, want 1", got)
	}
}

func TestFits(t *testing.T) {
	reqReset, tokReset := after(10*time.Second), after(30*time.Second)
	cases := []struct {
		name      string
		windows   []kw
		charges   []Need // charged before asking
		need      Need
		now       int64
		fits      bool
		wantReset int64
	}{
		{name: "no reading", need: Need{Input: 1 << 40}, now: nowNs, fits: true},
		{name: "requests left", windows: []kw{{Requests, win(100, 1, reqReset)}},
			now: nowNs, fits: true},
		{name: "requests spent", windows: []kw{{Requests, win(100, 0, reqReset)}},
			now: nowNs, wantReset: reqReset},
		{name: "requests spent, reset passed", windows: []kw{{Requests, win(100, 0, reqReset)}},
			now: reqReset, fits: true},
		{name: "requests spent, just before reset", windows: []kw{{Requests, win(100, 0, reqReset)}},
			now: reqReset - 1, wantReset: reqReset},
		{name: "tokens refuse with the tokens reset",
			windows: []kw{{Requests, win(100, 5, reqReset)}, {Tokens, win(1000, 100, tokReset)}},
			need:    Need{Input: 60, Output: 41}, now: nowNs, wantReset: tokReset},
		{name: "tokens exactly left fit",
			windows: []kw{{Requests, win(100, 5, reqReset)}, {Tokens, win(1000, 100, tokReset)}},
			need:    Need{Input: 60, Output: 40}, now: nowNs, fits: true},
		{name: "need over the limit fits",
			windows: []kw{{Tokens, win(1000, 10, tokReset)}},
			need:    Need{Input: 1001}, now: nowNs, fits: true},
		{name: "need over remaining without a limit refuses",
			windows: []kw{{Tokens, win(0, 10, tokReset)}},
			need:    Need{Input: 1001}, now: nowNs, wantReset: tokReset},
		{name: "need of the limit refuses when less is left",
			windows: []kw{{Tokens, win(1000, 999, tokReset)}},
			need:    Need{Input: 1000}, now: nowNs, wantReset: tokReset},
		{name: "output not needed: spent output window not checked",
			windows: []kw{{OutputTokens, win(100, 0, tokReset)}},
			need:    Need{Input: 50}, now: nowNs, fits: true},
		{name: "output not needed: over-spent output window not checked",
			windows: []kw{{OutputTokens, win(100, 10, tokReset)}}, charges: []Need{{Output: 20}},
			need: Need{Input: 50}, now: nowNs, fits: true},
		{name: "output needed: spent output window refuses",
			windows: []kw{{OutputTokens, win(100, 0, tokReset)}},
			need:    Need{Input: 50, Output: 1}, now: nowNs, wantReset: tokReset},
		{name: "input window counts input only",
			windows: []kw{{InputTokens, win(1000, 50, tokReset)}},
			need:    Need{Input: 50, Output: 500}, now: nowNs, fits: true},
		{name: "input window refuses more input",
			windows: []kw{{InputTokens, win(1000, 50, tokReset)}},
			need:    Need{Input: 51}, now: nowNs, wantReset: tokReset},
		{name: "output window counts output only",
			windows: []kw{{OutputTokens, win(1000, 50, tokReset)}},
			need:    Need{Input: 500, Output: 50}, now: nowNs, fits: true},
		{name: "output window refuses more output",
			windows: []kw{{OutputTokens, win(1000, 50, tokReset)}},
			need:    Need{Input: 1, Output: 51}, now: nowNs, wantReset: tokReset},
		{name: "in flight takes from remaining",
			windows: []kw{{Tokens, win(1000, 100, tokReset)}},
			charges: []Need{{Input: 30}, {Input: 20, Output: 10}},
			need:    Need{Input: 41}, now: nowNs, wantReset: tokReset},
		{name: "in flight leaves enough",
			windows: []kw{{Tokens, win(1000, 100, tokReset)}},
			charges: []Need{{Input: 30}, {Input: 20, Output: 10}},
			need:    Need{Input: 40}, now: nowNs, fits: true},
		{name: "in flight requests",
			windows: []kw{{Requests, win(100, 2, reqReset)}},
			charges: []Need{{}, {}}, now: nowNs, wantReset: reqReset},
		{name: "in flight does not count once reset passed",
			windows: []kw{{Requests, win(100, 2, reqReset)}},
			charges: []Need{{}, {}, {}}, now: reqReset + 1, fits: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, s := observed(t, tc.windows...)
			for _, n := range tc.charges {
				s.Charge(n)
			}
			fits, reset := s.Fits(tc.need, tc.now)
			if fits != tc.fits || reset != tc.wantReset {
				t.Errorf("Fits(%+v) = %v, %d; want %v, %d", tc.need, fits, reset, tc.fits, tc.wantReset)
			}
		})
	}
	var nilSlot *Slot
	if fits, reset := nilSlot.Fits(Need{Input: 1}, nowNs); !fits || reset != 0 {
		t.Errorf("nil slot: Fits = %v, %d; want true, 0", fits, reset)
	}
}

func TestChargeRelease(t *testing.T) {
	reset := after(10 * time.Second)
	_, s := observed(t, kw{Requests, win(100, 2, reset)}, kw{Tokens, win(1000, 500, reset)},
		kw{InputTokens, win(800, 400, reset)}, kw{OutputTokens, win(200, 100, reset)})
	need := Need{Input: 30, Output: 20}
	a := s.Charge(need)
	want := map[Kind]int64{Requests: 1, Tokens: 50, InputTokens: 30, OutputTokens: 20}
	for k, v := range want {
		if got := inFlight(t, s, k); got != v {
			t.Errorf("after one charge: in flight %s = %d, want %d", k, got, v)
		}
	}
	if fits, _ := s.Fits(need, nowNs); !fits {
		t.Fatal("one request left after one charge of two: refused")
	}
	b := s.Charge(need)
	if fits, got := s.Fits(need, nowNs); fits || got != reset {
		t.Fatalf("both requests in flight: Fits = %v, %d; want false, %d", fits, got, reset)
	}
	a.Release()
	if fits, _ := s.Fits(need, nowNs); !fits {
		t.Fatal("one released: refused")
	}
	a.Release() // again: nothing
	for k, v := range want {
		if got := inFlight(t, s, k); got != v {
			t.Errorf("after a double release: in flight %s = %d, want %d (b's)", k, got, v)
		}
	}
	b.Release()
	for k := range want {
		if got := inFlight(t, s, k); got != 0 {
			t.Errorf("all released: in flight %s = %d, want 0", k, got)
		}
	}
}

// TestOwnReadingKeepsOtherCharges: an own answer's reading does not give
// back what the other requests in flight take: the provider may not have
// counted them yet (sent before the answer, received after it), so they
// stay charged until their own answers.
func TestOwnReadingKeepsOtherCharges(t *testing.T) {
	reset := after(10 * time.Second)
	b, s := observed(t, kw{Requests, win(100, 50, reset)}, kw{Tokens, win(1000, 900, reset)})
	need := Need{Input: 10, Output: 5}
	first := s.Charge(need)
	second := s.Charge(need)
	// the first's answer: its charge goes, then its reading comes
	first.Release()
	if !b.Observe(s, reading(kw{Requests, win(100, 49, reset)}, kw{Tokens, win(1000, 885, reset)}), testNow.Add(time.Second)) {
		t.Fatal("own reading with less left did not change the slot")
	}
	if got := inFlight(t, s, Tokens); got != 15 {
		t.Errorf("after the first's reading: tokens in flight %d, want 15 (the second's)", got)
	}
	if ok, _ := s.Fits(Need{}, nowNs); !ok {
		t.Error("48 requests left refused")
	}
	w, _ := window(s, Requests)
	if w.Left(nowNs) != 48 {
		t.Errorf("left %d, want 49 stated less 1 in flight", w.Left(nowNs))
	}
	second.Release()
	second.Release()
	if got := inFlight(t, s, Tokens); got != 0 {
		t.Errorf("all released (one twice): tokens in flight %d, want 0", got)
	}
}

func TestOwnReadingThatChangesNothingKeepsCharges(t *testing.T) {
	reset := after(10 * time.Second)
	b, s := observed(t, kw{Requests, win(100, 50, reset)})
	tk := s.Charge(Need{})
	// An older answer of the same window (more left) arriving late.
	if b.Observe(s, reading(kw{Requests, win(100, 60, reset)}), testNow.Add(time.Second)) {
		t.Fatal("an own reading with more left of the same window changed the slot")
	}
	if got := inFlight(t, s, Requests); got != 1 {
		t.Fatalf("in flight %d after a reading that changed nothing, want 1", got)
	}
	tk.Release()
	if got := inFlight(t, s, Requests); got != 0 {
		t.Errorf("released: in flight %d, want 0", got)
	}
}

func TestFleetReadingKeepsCharges(t *testing.T) {
	reset := after(10 * time.Second)
	b, s := observed(t, kw{Requests, win(100, 50, reset)})
	tk := s.Charge(Need{})
	rep := report("openai", "other", ReportSlot{Key: "k1", Windows: []ReportWindow{
		{Kind: "requests", Limit: 100, Remaining: 40, Reset: time.Unix(0, reset), At: testNow.Add(time.Second)}}})
	if n := b.Apply(rep, "self"); n != 1 {
		t.Fatalf("Apply = %d, want 1", n)
	}
	if w, _ := window(s, Requests); w.Remaining != 40 || w.InFlight != 1 {
		t.Fatalf("after a fleet reading: remaining %d, in flight %d; want 40, 1 (the fleet does not count our requests)", w.Remaining, w.InFlight)
	}
	tk.Release()
	if got := inFlight(t, s, Requests); got != 0 {
		t.Errorf("released after a fleet reading: in flight %d, want 0", got)
	}
}

func TestNilSlotCharge(t *testing.T) {
	var s *Slot
	tk := s.Charge(Need{Input: 10})
	if tk != (Ticket{}) {
		t.Errorf("nil slot charge = %+v, want the zero ticket", tk)
	}
	tk.Release()
	var zero Ticket
	zero.Release()
	if s.Known() || len(s.Windows(nil)) != 0 {
		t.Error("nil slot: known or has windows")
	}
}

func TestShare(t *testing.T) {
	reset := after(10 * time.Second)
	cases := []struct {
		name    string
		windows []kw
		charges []Need
		now     int64
		want    float64
	}{
		{name: "nothing known", now: nowNs, want: 1},
		{name: "tightest window", now: nowNs, want: 0.4,
			windows: []kw{{Requests, win(100, 40, reset)}, {Tokens, win(1000, 800, reset)}}},
		{name: "in flight counted", now: nowNs, want: 0.3,
			windows: []kw{{Requests, win(100, 40, reset)}, {Tokens, win(1000, 800, reset)}},
			charges: []Need{{Input: 250}, {Input: 250}}},
		{name: "spent", now: nowNs, want: 0,
			windows: []kw{{Requests, win(100, 40, reset)}, {Tokens, win(1000, 0, reset)}}},
		{name: "over-spent by in flight is 0", now: nowNs, want: 0,
			windows: []kw{{Tokens, win(1000, 100, reset)}}, charges: []Need{{Input: 300}}},
		{name: "window without a limit ignored", now: nowNs, want: 0.5,
			windows: []kw{{Requests, win(0, 0, reset)}, {Tokens, win(1000, 500, reset)}}},
		{name: "window past its reset ignored", now: reset, want: 1,
			windows: []kw{{Requests, win(100, 0, reset)}}},
		{name: "window past its reset ignored, other counted", now: reset, want: 0.25,
			windows: []kw{{Requests, win(100, 0, reset)}, {Tokens, win(1000, 250, reset+1)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, s := observed(t, tc.windows...)
			for _, n := range tc.charges {
				s.Charge(n)
			}
			if got := s.Share(tc.now); !(math.Abs(got-tc.want) <= 1e-9) { // NaN fails
				t.Errorf("Share = %v, want %v", got, tc.want)
			}
		})
	}
	var nilSlot *Slot
	if got := nilSlot.Share(nowNs); got != 1 {
		t.Errorf("nil slot: Share = %v, want 1", got)
	}
}

// fold folds r, taken at, into s as an own reading (Observe) or as
// another instance's report (Apply).
func fold(b *Book, s *Slot, fleet bool, r *Reading, at time.Time) bool {
	if !fleet {
		return b.Observe(s, r, at)
	}
	rs := ReportSlot{Key: "k1"}
	for k := Kind(0); k < NumKinds; k++ {
		if r.Stated(k) {
			w := r.Windows[k]
			rs.Windows = append(rs.Windows, ReportWindow{Kind: k.String(), Limit: w.Limit,
				Remaining: w.Remaining, Reset: time.Unix(0, w.Reset).UTC(), At: at.UTC()})
		}
	}
	return b.Apply(report("openai", "other", rs), "self") > 0
}

func report(provider, instance string, slots ...ReportSlot) *Report {
	return &Report{Version: ReportVersion, Provider: provider, Instance: instance, At: testNow, Slots: slots}
}

func TestApplyRules(t *testing.T) {
	const sec = time.Second
	cur := after(10 * sec) // the slot's requests window resets then
	first := win(100, 50, cur)
	cases := []struct {
		name    string
		in      Window
		at      time.Duration // after testNow
		changed bool
		want    Window
	}{
		{name: "same window, less left", in: win(100, 40, cur+int64(sec/2)), at: sec,
			changed: true, want: win(100, 40, cur+int64(sec/2))},
		{name: "same window a little earlier, less left", in: win(100, 40, cur-int64(sec)), at: sec,
			changed: true, want: win(100, 40, cur-int64(sec))},
		{name: "same window, more left (out of order)", in: win(100, 60, cur+int64(sec/2)), at: sec,
			want: first},
		{name: "same window, as much left", in: win(100, 50, cur), at: sec, want: first},
		{name: "reset later by exactly a second: same window", in: win(100, 60, cur+int64(sec)), at: sec,
			want: first},
		{name: "later window", in: win(100, 90, cur+int64(sec)+1), at: sec,
			changed: true, want: win(100, 90, cur+int64(sec)+1)},
		{name: "earlier window, less left: stale", in: win(100, 10, cur-int64(sec)-1), at: sec,
			want: first},
		{name: "slot's window has reset", in: win(100, 90, cur+int64(sec/2)), at: 10 * sec,
			changed: true, want: win(100, 90, cur+int64(sec/2))},
		{name: "just before the slot's reset", in: win(100, 90, cur+int64(sec/2)), at: 10*sec - 1,
			want: first},
		{name: "unstated reset: a default window from its arrival", in: win(100, 99, 0), at: sec,
			changed: true, want: win(100, 99, after(sec+DefaultWindow))},
	}
	for _, fleet := range []bool{false, true} {
		for _, tc := range cases {
			name := tc.name
			if fleet {
				name = "fleet/" + name
			}
			t.Run(name, func(t *testing.T) {
				b := NewBook()
				s := b.Key("openai", "k1")
				if !fold(b, s, fleet, reading(kw{Requests, first}), testNow) {
					t.Fatal("first reading did not change the slot")
				}
				got := fold(b, s, fleet, reading(kw{Requests, tc.in}), testNow.Add(tc.at))
				if got != tc.changed {
					t.Errorf("changed = %v, want %v", got, tc.changed)
				}
				w, _ := window(s, Requests)
				if have := win(w.Limit, w.Remaining, w.Reset); have != tc.want {
					t.Errorf("window = %+v, want %+v", have, tc.want)
				}
				wantAt := testNow
				if tc.changed {
					wantAt = testNow.Add(tc.at)
				}
				if w.At != wantAt.UnixNano() {
					t.Errorf("window at = %v, want %v", time.Unix(0, w.At).UTC(), wantAt)
				}
			})
		}
	}
}

func TestApplyFirstReadingUnstatedReset(t *testing.T) {
	_, s := observed(t, kw{Tokens, win(0, 10, 0)})
	w, _ := window(s, Tokens)
	if want := after(DefaultWindow); w.Reset != want {
		t.Fatalf("reset = %d, want at + DefaultWindow = %d", w.Reset, want)
	}
	if fits, reset := s.Fits(Need{Input: 11}, nowNs); fits || reset != after(DefaultWindow) {
		t.Errorf("Fits before the default window passed = %v, %d; want false, %d", fits, reset, after(DefaultWindow))
	}
	if fits, _ := s.Fits(Need{Input: 11}, after(DefaultWindow)); !fits {
		t.Error("refused once the default window passed: a missing reset keeps a key out")
	}
}

func TestApplyKindsIndependent(t *testing.T) {
	reset := after(10 * time.Second)
	b, s := observed(t, kw{Requests, win(100, 50, reset)}, kw{Tokens, win(1000, 500, reset)})
	// Less requests left, more tokens (an older tokens count): only the
	// requests window moves.
	if !b.Observe(s, reading(kw{Requests, win(100, 45, reset)}, kw{Tokens, win(1000, 600, reset)}), testNow.Add(time.Second)) {
		t.Fatal("not changed")
	}
	if w, _ := window(s, Requests); w.Remaining != 45 {
		t.Errorf("requests remaining %d, want 45", w.Remaining)
	}
	if w, _ := window(s, Tokens); w.Remaining != 500 || w.At != nowNs {
		t.Errorf("tokens remaining %d at %d, want 500 at %d", w.Remaining, w.At, nowNs)
	}
	// A reading of a kind the slot did not state adds it.
	if !b.Observe(s, reading(kw{OutputTokens, win(10, 0, reset)}), testNow.Add(time.Second)) {
		t.Fatal("a new kind did not change the slot")
	}
	if len(s.Windows(nil)) != 3 {
		t.Errorf("windows %+v, want three", s.Windows(nil))
	}
}

func TestRetryAfterOnly(t *testing.T) {
	b, s := observed(t)
	if !b.Observe(s, &Reading{RetryAfter: 5 * time.Second}, testNow) {
		t.Fatal("a Retry-After-only reading did not change the slot")
	}
	w, ok := window(s, Requests)
	if !ok || w.Remaining != 0 || w.Reset != after(5*time.Second) || w.At != nowNs {
		t.Fatalf("requests window %+v (stated %v), want 0 left until +5s", w, ok)
	}
	if fits, reset := s.Fits(Need{}, after(time.Second)); fits || reset != after(5*time.Second) {
		t.Errorf("Fits during the wait = %v, %d; want false, %d", fits, reset, after(5*time.Second))
	}
	if fits, _ := s.Fits(Need{}, after(5*time.Second)); !fits {
		t.Error("refused after the wait")
	}
	// A shorter wait while the longer holds: nothing changes.
	if b.Observe(s, &Reading{RetryAfter: time.Second}, testNow.Add(time.Second)) {
		t.Error("a shorter wait inside the longer one changed the slot")
	}
	// A longer one extends it.
	if !b.Observe(s, &Reading{RetryAfter: 10 * time.Second}, testNow.Add(time.Second)) {
		t.Error("a longer wait did not change the slot")
	}
	if w, _ := window(s, Requests); w.Reset != after(11*time.Second) {
		t.Errorf("reset %d, want %d", w.Reset, after(11*time.Second))
	}
}

func TestRetryAfterSpendsRequestsLeft(t *testing.T) {
	reset := after(30 * time.Second)
	b, s := observed(t, kw{Requests, win(100, 50, reset)})
	tk := s.Charge(Need{})
	// A 429 stating a tokens window and a wait, but no requests window.
	r := reading(kw{Tokens, win(1000, 0, after(20*time.Second))})
	r.RetryAfter = 2 * time.Second
	tk.Release() // the answer's charge goes first
	if !b.Observe(s, r, testNow) {
		t.Fatal("not changed")
	}
	w, _ := window(s, Requests)
	if w.Remaining != 0 || w.Reset != after(2*time.Second) || w.InFlight != 0 {
		t.Errorf("requests %+v, want 0 left until +2s, nothing in flight", w)
	}
	// A wait beside a stated requests window: the window is as stated.
	b2, s2 := observed(t)
	r2 := reading(kw{Requests, win(100, 7, reset)})
	r2.RetryAfter = 2 * time.Second
	b2.Observe(s2, r2, testNow)
	if w, _ := window(s2, Requests); w.Remaining != 7 || w.Reset != reset {
		t.Errorf("requests %+v, want 7 left until %d", w, reset)
	}
}

func TestObserveNothingKnown(t *testing.T) {
	b, s := observed(t)
	ch := b.Changed()
	if b.Observe(s, &Reading{}, testNow) {
		t.Error("an empty reading changed the slot")
	}
	if b.Observe(nil, reading(kw{Requests, win(1, 1, 0)}), testNow) {
		t.Error("a reading into a nil slot reported a change")
	}
	if s.Known() {
		t.Error("slot known after an empty reading")
	}
	select {
	case <-ch:
		t.Error("Changed closed without a change")
	default:
	}
}
