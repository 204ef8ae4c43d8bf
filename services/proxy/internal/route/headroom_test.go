package route

import (
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/headroom"
	"switchyard.dev/shared/hold"
)

// roomStep builds a table of one provider "p" (model "m", keys k1..kn of
// equal priority, selection sel) on book, and returns the step of p/m.
func roomStep(t *testing.T, book *headroom.Book, sel string, n int) *Step {
	t.Helper()
	pc := config.Provider{Name: "p", Type: "openai", Selection: sel, Models: []config.Model{{Name: "m"}}}
	for i := range n {
		id := string(rune('1' + i))
		pc.Keys = append(pc.Keys, config.Key{ID: "k" + id, Weight: 1, Value: config.NewSecret("s-" + id)})
	}
	cfg := config.Defaults()
	cfg.Providers = []config.Provider{pc}
	tab, err := Build(cfg, Options{Headroom: book})
	if err != nil {
		t.Fatal(err)
	}
	rt, ok := tab.Resolve("p/m")
	if !ok {
		t.Fatal("p/m does not resolve")
	}
	return &rt.Steps[0]
}

// left states that key k of st has left of limit requests until reset.
func left(t *testing.T, book *headroom.Book, st *Step, k int, remaining, limit int64, reset time.Time) {
	t.Helper()
	r := headroom.Reading{Has: 1 << headroom.Requests}
	r.Windows[headroom.Requests] = headroom.Window{Limit: limit, Remaining: remaining, Reset: reset.UnixNano()}
	if !book.Observe(st.ModelRoom(st.Provider.Keys[k]), &r, time.Now()) {
		t.Fatalf("key %d: reading not applied", k)
	}
}

// probeKeys admits the keys named as the one probe of their hold and
// denies those set false.
type probeKeys map[string]bool

func (p probeKeys) Admit(_, keyID, _ string) hold.Admission {
	probe, ok := p[keyID]
	switch {
	case !ok:
		return hold.Admit
	case probe:
		return hold.AdmitProbe
	}
	return hold.Deny
}

// TestPickSkipsKeysWithoutHeadroom: a key whose window is spent is
// skipped and noted with its reset; a held key is not counted as a
// headroom refusal; a hold's probe goes whatever the headroom; a request
// without Room (headroom off) ignores the windows.
func TestPickSkipsKeysWithoutHeadroom(t *testing.T) {
	book := headroom.NewBook()
	st := roomStep(t, book, "", 3)
	soon, later := time.Now().Add(10*time.Second), time.Now().Add(40*time.Second)
	left(t, book, st, 0, 0, 20, soon)
	left(t, book, st, 1, 0, 20, later)
	left(t, book, st, 2, 5, 20, later)
	newReq := func() *Request {
		return &Request{Room: &Room{Need: headroom.Need{Input: 10}, Now: time.Now().UnixNano()}}
	}

	for range 4 {
		req := newReq()
		k, _ := st.Pick(denyKeys{}, 0, req)
		if k == nil || k.ID != "k3" {
			t.Fatalf("picked %v, want k3 (the only key with room)", k)
		}
	}
	req := newReq()
	if k, _ := st.Pick(denyKeys{}, 1<<2, req); k != nil {
		t.Fatalf("k3 tried: picked %s, want none", k.ID)
	}
	if rm := req.Room; rm.Skipped != 2 || rm.Reset != soon.UnixNano() || len(rm.Refusals) != 2 {
		t.Errorf("room %+v: want 2 skipped, the earliest reset (k1's)", rm)
	}

	req = newReq()
	if k, _ := st.Pick(denyKeys{"k1": true}, 1<<2, req); k != nil || req.Room.Skipped != 1 || req.Room.Reset != later.UnixNano() {
		t.Errorf("k1 held: picked %v, room %+v; want k2 alone counted, its reset", k, req.Room)
	}

	req = newReq()
	if k, adm := st.Pick(probeKeys{"k1": true}, 1<<2, req); k == nil || k.ID != "k1" || adm != hold.AdmitProbe {
		t.Errorf("k1's probe due: picked %v (%v), want k1 as the probe", k, adm)
	}

	if k, _ := st.Pick(denyKeys{}, 1<<2, &Request{}); k == nil {
		t.Error("without a Room a spent window is not asked: want a key")
	}

	// the window reset: whole again
	req = &Request{Room: &Room{Need: headroom.Need{Input: 10}, Now: later.Add(time.Second).UnixNano()}}
	if k, _ := st.Pick(denyKeys{}, 1<<2, req); k == nil || req.Room.Skipped != 0 {
		t.Errorf("after the resets: picked %v, room %+v", k, req.Room)
	}
}

// TestPickRoomiest: selection headroom draws keys in proportion to the
// share of their windows left, never a spent one while another has room.
func TestPickRoomiest(t *testing.T) {
	book := headroom.NewBook()
	st := roomStep(t, book, config.SelectionHeadroom, 3)
	reset := time.Now().Add(time.Minute)
	left(t, book, st, 0, 80, 100, reset) // share 0.8
	left(t, book, st, 1, 20, 100, reset) // share 0.2
	left(t, book, st, 2, 0, 100, reset)  // spent
	counts := map[string]int{}
	const n = 4000
	for range n {
		req := &Request{Room: &Room{Need: headroom.Need{Input: 1}, Now: time.Now().UnixNano()}}
		k, _ := st.Pick(denyKeys{}, 0, req)
		if k == nil {
			t.Fatal("no key")
		}
		counts[k.ID]++
	}
	if counts["k3"] != 0 {
		t.Errorf("the spent key was picked %d times", counts["k3"])
	}
	if share := float64(counts["k1"]) / n; share < 0.75 || share > 0.85 {
		t.Errorf("k1 picked %.2f of the time, want about 0.8 (counts %v)", share, counts)
	}
	// the spent key is still asked (and its refusal noted) once the others are tried
	req := &Request{Room: &Room{Need: headroom.Need{Input: 1}, Now: time.Now().UnixNano()}}
	if k, _ := st.Pick(denyKeys{}, 1<<0|1<<1, req); k != nil || req.Room.Skipped != 1 {
		t.Errorf("only the spent key left: picked %v, room %+v", k, req.Room)
	}
}
