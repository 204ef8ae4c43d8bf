package headroom

import (
	"encoding/json"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"
)

func TestBookSlots(t *testing.T) {
	b := NewBook()
	k := b.Key("openai", "k1")
	if k == nil || b.Key("openai", "k1") != k {
		t.Fatal("Key: not the same slot for the same ids")
	}
	m := b.Model("openai", "k1", "gpt-4o")
	if m == nil || b.Model("openai", "k1", "gpt-4o") != m {
		t.Fatal("Model: not the same slot for the same ids")
	}
	others := map[string]*Slot{
		"other key":            b.Key("openai", "k2"),
		"other provider":       b.Key("azure", "k1"),
		"model of the key":     m,
		"other model":          b.Model("openai", "k1", "gpt-4o-mini"),
		"model on other key":   b.Model("openai", "k2", "gpt-4o"),
		"model other provider": b.Model("azure", "k1", "gpt-4o"),
	}
	seen := map[*Slot]string{k: "key"}
	for name, s := range others {
		if s == nil {
			t.Errorf("%s: nil slot", name)
			continue
		}
		if prev, dup := seen[s]; dup {
			t.Errorf("%s: the same slot as %s", name, prev)
		}
		seen[s] = name
	}
	if b.Model("openai", "k1", "") != k {
		t.Error("Model with no model is not the key's slot")
	}
	var nb *Book
	if nb.Key("openai", "k1") != nil || nb.Model("openai", "k1", "m") != nil {
		t.Error("a nil book hands out slots")
	}
}

// fleetRequests applies another instance's report that key has remaining
// of a 100-request window resetting at reset, and returns Apply's count.
func fleetRequests(b *Book, key string, remaining, reset int64) int {
	return b.Apply(report("openai", "other", ReportSlot{Key: key, Windows: []ReportWindow{
		{Kind: "requests", Limit: 100, Remaining: remaining, Reset: time.Unix(0, reset), At: testNow}}}), "self")
}

// closed reports whether ch is closed (or has a signal, which it takes).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestChanged(t *testing.T) {
	b := NewBook()
	s := b.Key("openai", "k1")
	reset := after(10 * time.Second)
	ch := b.Changed()
	if closed(ch) || b.Changed() != ch {
		t.Fatal("a new book's Changed is closed or not stable")
	}
	if !b.Observe(s, reading(kw{Requests, win(100, 50, reset)}), testNow) {
		t.Fatal("not changed")
	}
	if !closed(ch) {
		t.Fatal("Changed not closed by a change")
	}
	ch2 := b.Changed()
	if ch2 == ch || closed(ch2) {
		t.Fatal("no new open channel after a change")
	}
	// A reading that changes nothing leaves it open.
	b.Observe(s, reading(kw{Requests, win(100, 60, reset)}), testNow)
	if closed(ch2) {
		t.Fatal("closed by a reading that changed nothing")
	}
	if n := fleetRequests(b, "k1", 70, reset); n != 0 || closed(ch2) {
		t.Fatalf("a report that changed nothing: Apply = %d, closed %v; want 0, false", n, closed(ch2))
	}
	if n := fleetRequests(b, "k1", 40, reset); n != 1 || !closed(ch2) {
		t.Fatalf("a report that changed a slot: Apply = %d, closed %v; want 1, true", n, closed(ch2))
	}
	if closed(b.Changed()) {
		t.Fatal("no new open channel after an applied report")
	}
}

// fleetBook is a book with own readings on two providers: openai key k1
// (its own windows and gpt-4o's) and anthropic key k2, plus a slot never
// read and one known only from the fleet.
func fleetBook(t *testing.T) *Book {
	t.Helper()
	b := NewBook()
	r10, r20 := after(10*time.Second), after(20*time.Second)
	b.Key("openai", "k0") // never read
	for _, o := range []struct {
		s  *Slot
		ws []kw
	}{
		{b.Model("openai", "k1", "gpt-4o"), []kw{{Requests, win(500, 499, r10)}, {Tokens, win(30000, 29000, r20)}}},
		{b.Key("openai", "k1"), []kw{{Requests, win(100, 90, r10)}}},
		{b.Key("anthropic", "k2"), []kw{{InputTokens, win(400, 300, r20)}, {OutputTokens, win(80, 80, r20)}}},
	} {
		if !b.Observe(o.s, reading(o.ws...), testNow) {
			t.Fatalf("reading %+v did not change its slot", o.ws)
		}
	}
	if b.Apply(report("groq", "other", ReportSlot{Key: "k3", Windows: []ReportWindow{
		{Kind: "requests", Limit: 10, Remaining: 1, Reset: time.Unix(0, r10), At: testNow}}}), "self") != 1 {
		t.Fatal("fleet report not applied")
	}
	return b
}

func TestTakeReports(t *testing.T) {
	b := fleetBook(t)
	// In flight is this process's: never reported.
	b.Key("openai", "k1").Charge(Need{Input: 5})
	now := testNow.Add(time.Second).In(time.FixedZone("x", 3600))
	reps := b.TakeReports("self", now)
	r10, r20 := time.Unix(0, after(10*time.Second)).UTC(), time.Unix(0, after(20*time.Second)).UTC()
	at := testNow.UTC()
	want := []Report{
		{Version: ReportVersion, Provider: "anthropic", Instance: "self", At: now.UTC(), Slots: []ReportSlot{
			{Key: "k2", Windows: []ReportWindow{
				{Kind: "input_tokens", Limit: 400, Remaining: 300, Reset: r20, At: at},
				{Kind: "output_tokens", Limit: 80, Remaining: 80, Reset: r20, At: at}}}}},
		{Version: ReportVersion, Provider: "openai", Instance: "self", At: now.UTC(), Slots: []ReportSlot{
			{Key: "k1", Windows: []ReportWindow{{Kind: "requests", Limit: 100, Remaining: 90, Reset: r10, At: at}}},
			{Key: "k1", Model: "gpt-4o", Windows: []ReportWindow{
				{Kind: "requests", Limit: 500, Remaining: 499, Reset: r10, At: at},
				{Kind: "tokens", Limit: 30000, Remaining: 29000, Reset: r20, At: at}}}}},
	}
	if !reflect.DeepEqual(reps, want) {
		t.Fatalf("TakeReports =\n%+v\nwant\n%+v", reps, want)
	}
	if again := b.TakeReports("self", now); len(again) != 0 {
		t.Fatalf("second TakeReports = %+v, want none", again)
	}
	// New own readings are reported alone, in key order.
	for _, key := range []string{"k1", "a0"} {
		if !b.Observe(b.Key("openai", key), reading(kw{Requests, win(100, 80, after(10*time.Second))}), testNow.Add(2*time.Second)) {
			t.Fatal("not changed")
		}
	}
	reps = b.TakeReports("self", now)
	if len(reps) != 1 || reps[0].Provider != "openai" || len(reps[0].Slots) != 2 ||
		reps[0].Slots[0].Key != "a0" || reps[0].Slots[1].Key != "k1" || reps[0].Slots[1].Model != "" ||
		reps[0].Slots[1].Windows[0].Remaining != 80 {
		t.Fatalf("after more readings: %+v, want openai's a0 and k1 alone with 80 left", reps)
	}
}

func TestApplyReport(t *testing.T) {
	src := fleetBook(t)
	reps := src.TakeReports("a", testNow)
	if len(reps) != 2 {
		t.Fatalf("%d reports, want 2", len(reps))
	}
	dst := NewBook()
	for _, rep := range reps {
		if n := dst.Apply(&rep, "a"); n != 0 {
			t.Errorf("own report applied: %d slots", n)
		}
	}
	if e := dst.Entries(); len(e) != 0 {
		t.Fatalf("own reports made entries %+v", e)
	}
	wantN := map[string]int{"anthropic": 1, "openai": 2}
	for _, rep := range reps {
		if n := dst.Apply(&rep, "b"); n != wantN[rep.Provider] {
			t.Errorf("%s report: Apply = %d, want %d", rep.Provider, n, wantN[rep.Provider])
		}
	}
	for _, rep := range reps {
		if n := dst.Apply(&rep, "b"); n != 0 {
			t.Errorf("%s report again: Apply = %d, want 0", rep.Provider, n)
		}
	}
	srcE := src.Entries()
	var want []Entry
	for _, e := range srcE {
		if e.Provider != "groq" { // src knew it from the fleet: not in its reports
			want = append(want, e)
		}
	}
	// (the parts of requests windows differ: dst spends them beside a)
	if got := dst.Entries(); !reflect.DeepEqual(withoutParts(got), withoutParts(want)) {
		t.Errorf("entries after the reports =\n%+v\nwant\n%+v", got, want)
	}
	if again := dst.TakeReports("b", testNow); len(again) != 0 {
		t.Errorf("fleet readings reported on: %+v", again)
	}
	// Another version, unknown kinds and windowless slots change nothing.
	bad := reps[1]
	bad.Version = ReportVersion + 1
	bad.Slots = []ReportSlot{{Key: "k9", Windows: []ReportWindow{{Kind: "requests", Remaining: 0, Reset: testNow.Add(time.Minute), At: testNow}}}}
	if n := dst.Apply(&bad, "b"); n != 0 {
		t.Errorf("report of version %d applied: %d", bad.Version, n)
	}
	bad.Version = ReportVersion
	bad.Slots = []ReportSlot{{Key: "k9", Windows: []ReportWindow{{Kind: "bananas", Remaining: 0, Reset: testNow.Add(time.Minute), At: testNow}}},
		{Key: "k10"}}
	if n := dst.Apply(&bad, "b"); n != 0 {
		t.Errorf("report of unknown kinds applied: %d", n)
	}
	dst.mu.Lock()
	_, k9 := dst.slots[slotID{"openai", "k9", ""}]
	_, k10 := dst.slots[slotID{"openai", "k10", ""}]
	dst.mu.Unlock()
	if k9 || k10 {
		t.Error("a report's slot of no known window made a slot")
	}
}

// withoutParts is es with every window's Own set to its Remaining.
func withoutParts(es []Entry) []Entry {
	out := make([]Entry, len(es))
	for i, e := range es {
		out[i] = e
		out[i].Windows = append([]Snapshot(nil), e.Windows...)
		for j := range out[i].Windows {
			out[i].Windows[j].Own = out[i].Windows[j].Remaining
		}
	}
	return out
}

func TestEntries(t *testing.T) {
	b := fleetBook(t)
	if !b.Observe(b.Key("openai", "a0"), reading(kw{Requests, win(10, 9, after(time.Second))}), testNow) {
		t.Fatal("not changed")
	}
	e := b.Entries()
	var ids []string
	for _, x := range e {
		ids = append(ids, x.Provider+"/"+x.Key+"/"+x.Model)
		if len(x.Windows) == 0 {
			t.Errorf("%s/%s/%s: no windows", x.Provider, x.Key, x.Model)
		}
	}
	want := []string{"anthropic/k2/", "groq/k3/", "openai/a0/", "openai/k1/", "openai/k1/gpt-4o"}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("entries %v, want %v (sorted, known slots only)", ids, want)
	}
	if !sort.SliceIsSorted(e[4].Windows, func(i, j int) bool { return e[4].Windows[i].Kind < e[4].Windows[j].Kind }) {
		t.Errorf("windows not in kind order: %+v", e[4].Windows)
	}
	if w := e[4].Windows[1]; w.Kind != Tokens || w.Limit != 30000 || w.Remaining != 29000 || w.Reset != after(20*time.Second) || w.At != nowNs {
		t.Errorf("gpt-4o tokens window %+v", w)
	}
	if len(NewBook().Entries()) != 0 {
		t.Error("a new book has entries")
	}
}

func TestReportJSON(t *testing.T) {
	reps := fleetBook(t).TakeReports("proxy-1", testNow)
	rep := reps[1] // openai: a key slot and a model slot
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	if got, want := keys(raw), []string{"at", "instance", "provider", "slots", "v"}; !reflect.DeepEqual(got, want) {
		t.Errorf("report fields %v, want %v", got, want)
	}
	if raw["v"] != float64(ReportVersion) || raw["provider"] != "openai" || raw["instance"] != "proxy-1" {
		t.Errorf("report %s", data)
	}
	slots := raw["slots"].([]any)
	if got, want := keys(slots[0].(map[string]any)), []string{"key", "windows"}; !reflect.DeepEqual(got, want) {
		t.Errorf("key slot fields %v, want %v (model omitted)", got, want)
	}
	ms := slots[1].(map[string]any)
	if got, want := keys(ms), []string{"key", "model", "windows"}; !reflect.DeepEqual(got, want) {
		t.Errorf("model slot fields %v, want %v", got, want)
	}
	w := ms["windows"].([]any)[1].(map[string]any)
	if got, want := keys(w), []string{"at", "kind", "limit", "remaining", "reset"}; !reflect.DeepEqual(got, want) {
		t.Errorf("window fields %v, want %v", got, want)
	}
	if w["kind"] != "tokens" || w["limit"] != float64(30000) || w["remaining"] != float64(29000) {
		t.Errorf("window %v", w)
	}
	if reset, _ := time.Parse(time.RFC3339Nano, w["reset"].(string)); !reset.Equal(time.Unix(0, after(20*time.Second))) {
		t.Errorf("window reset %v", w["reset"])
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rep) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", back, rep)
	}
	// What a fleet member decodes applies as sent.
	dst := NewBook()
	if n := dst.Apply(&back, "proxy-2"); n != 2 {
		t.Fatalf("decoded report: Apply = %d, want 2", n)
	}
	got, _ := window(dst.Model("openai", "k1", "gpt-4o"), Tokens)
	if got != (Snapshot{Kind: Tokens, Limit: 30000, Remaining: 29000, Own: 29000, Reset: after(20 * time.Second), At: nowNs}) {
		t.Errorf("decoded window %+v", got)
	}
	// A window with no limit omits it and reads back as 0.
	var rw ReportWindow
	data, _ = json.Marshal(ReportWindow{Kind: "requests", Remaining: 3, Reset: testNow, At: testNow})
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if _, has := raw["limit"]; has {
		t.Errorf("limit 0 not omitted: %s", data)
	}
	if err := json.Unmarshal(data, &rw); err != nil || rw.Limit != 0 || rw.Remaining != 3 {
		t.Errorf("decoded %+v, %v", rw, err)
	}
}

func TestSubject(t *testing.T) {
	if got := Subject("openai"); got != "switchyard.headroom.openai" {
		t.Errorf("Subject = %q", got)
	}
	if Prefix != "switchyard.headroom" {
		t.Errorf("Prefix = %q", Prefix)
	}
}

// TestBookConcurrent charges, releases, observes and applies on one book
// from many goroutines (run it with -race): once every charge is
// released, nothing is in flight, whatever readings of the charged slots
// came meanwhile, own or the fleet's.
func TestBookConcurrent(t *testing.T) {
	const (
		workers  = 8
		rounds   = 500  // at least, per worker
		readings = 2000 // per side goroutine; the workers charge until they are done
	)
	reset := after(time.Hour)
	b := NewBook()
	key := b.Key("openai", "k1")
	model := b.Model("openai", "k1", "gpt-4o")
	b.Observe(model, reading(kw{Requests, win(1e9, 1e9, reset)}, kw{Tokens, win(1e12, 1e12, reset)}), testNow)
	b.Observe(key, reading(kw{Requests, win(1e9, 1e9, reset)}), testNow)
	// What each reading states left: less every time, so that each changes
	// its slot.
	keyLeft, modelLeft, fleetLeft := int64(1e9), int64(1e9), int64(1e12)

	run := func(t *testing.T, ownOnModel bool) {
		var sides, workersWG sync.WaitGroup
		sidesDone, stop := make(chan struct{}), make(chan struct{})
		sides.Go(func() { // own readings: of the key, and of the model when asked
			for i := range readings {
				s, left := key, &keyLeft
				if ownOnModel && i%2 == 0 {
					s, left = model, &modelLeft
				}
				*left--
				if !b.Observe(s, reading(kw{Requests, win(1e9, *left, reset)}), testNow.Add(time.Duration(i))) {
					t.Error("an own reading with less left changed nothing")
				}
			}
		})
		sides.Go(func() { // the fleet's readings of the model
			for range readings {
				fleetLeft--
				if b.Apply(report("openai", "other", ReportSlot{Key: "k1", Model: "gpt-4o", Windows: []ReportWindow{
					{Kind: "tokens", Limit: 1e12, Remaining: fleetLeft, Reset: time.Unix(0, reset), At: testNow}}}), "self") != 1 {
					t.Error("a fleet reading with less left changed nothing")
				}
			}
		})
		go func() { sides.Wait(); close(sidesDone) }()
		var reporter sync.WaitGroup
		reporter.Go(func() { // the reporter, the metrics and the waiters
			for {
				select {
				case <-stop:
					return
				case <-b.Changed():
				}
				b.TakeReports("self", testNow)
				b.Entries()
			}
		})
		for w := range workers {
			workersWG.Go(func() {
				need := Need{Input: int64(w + 1), Output: 3}
				var held []Ticket
				for i := 0; ; i++ {
					if i >= rounds && closed(sidesDone) {
						break
					}
					held = append(held, model.Charge(need), key.Charge(need))
					model.Fits(need, nowNs)
					key.Share(nowNs)
					if i%3 == 2 {
						for j := range held {
							held[j].Release()
							held[j].Release()
						}
						held = held[:0]
					}
				}
				for j := range held {
					held[j].Release()
				}
			})
		}
		workersWG.Wait()
		close(stop)
		reporter.Wait()
		for _, s := range []*Slot{key, model} {
			for _, w := range s.Windows(nil) {
				if w.InFlight != 0 {
					t.Errorf("all released: %s in flight %d, want 0", w.Kind, w.InFlight)
				}
			}
		}
	}
	t.Run("fleet readings of the charged model", func(t *testing.T) { run(t, false) })
	t.Run("own readings of the charged model", func(t *testing.T) { run(t, true) })
	if fits, _ := model.Fits(Need{Input: 1}, nowNs); !fits {
		t.Error("the model does not fit a request after all was released")
	}
}

// TestObserveAllocatesNothingUnwatched: on the request path an answer's
// reading is folded in without allocating while no request waits for a
// change (Changed hands a channel out only to those that do).
func TestObserveAllocatesNothingUnwatched(t *testing.T) {
	b := NewBook()
	s := b.Key("openai", "k1")
	reset := after(10 * time.Second)
	left := int64(1 << 30)
	allocs := testing.AllocsPerRun(100, func() {
		left--
		if !b.Observe(s, reading(kw{Requests, win(1<<31, left, reset)}), testNow) {
			t.Fatal("a reading with less left changed nothing")
		}
	})
	if allocs != 0 {
		t.Errorf("Observe allocates %v times per reading with nobody waiting, want 0", allocs)
	}
	ch := b.Changed()
	b.Observe(s, reading(kw{Requests, win(1<<31, left-1, reset)}), testNow)
	if !closed(ch) {
		t.Fatal("a waiter is not woken by the change after it asked")
	}
}

// TestLow: an own reading that leaves a window nearly spent signals Low
// (once, however many come before the reporter takes it); a roomy one,
// or a fleet report, does not.
func TestLow(t *testing.T) {
	b := NewBook()
	s := b.Key("openai", "k1")
	reset := after(10 * time.Second)
	signalled := func() bool { return closed(b.Low()) }
	b.Observe(s, reading(kw{Requests, win(100, 50, reset)}), testNow)
	if signalled() {
		t.Fatal("half a window left signals Low")
	}
	b.Observe(s, reading(kw{Requests, win(100, 10, reset)}), testNow)
	b.Observe(s, reading(kw{Requests, win(100, 9, reset)}), testNow)
	if !signalled() || signalled() {
		t.Fatal("a tenth left: want Low signalled once")
	}
	o := b.Key("openai", "k2")
	fleetRequests(b, "k2", 1, reset)
	if signalled() || !o.Known() {
		t.Fatal("a fleet report signals Low (or was not applied)")
	}
}

// TestFresh: an own reading that changes a slot signals Fresh (once,
// however many come before the reporter takes it); a reading that changes
// nothing, or a fleet report, does not.
func TestFresh(t *testing.T) {
	b := NewBook()
	s := b.Key("openai", "k1")
	reset := after(10 * time.Second)
	fresh := func() bool { return closed(b.Fresh()) }
	if fresh() {
		t.Fatal("an empty book signals Fresh")
	}
	b.Observe(s, reading(kw{Requests, win(100, 50, reset)}), testNow)
	b.Observe(s, reading(kw{Requests, win(100, 49, reset)}), testNow)
	if !fresh() || fresh() {
		t.Fatal("two own readings: want Fresh signalled once")
	}
	if b.Observe(s, reading(kw{Requests, win(100, 49, reset)}), testNow) && !fresh() {
		t.Fatal("a change without Fresh")
	} else if fresh() {
		t.Fatal("a reading that changed nothing signals Fresh")
	}
	fleetRequests(b, "k2", 1, reset)
	if fresh() {
		t.Fatal("a fleet report signals Fresh")
	}
	if reps := b.TakeReports("self", testNow); len(reps) != 1 {
		t.Fatalf("reports %+v: want the own reading's", reps)
	}
}
