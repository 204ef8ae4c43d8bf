package route

import (
	"testing"
	"time"

	"switchyard.dev/shared/headroom"
)

// TestChargeUntilReleased: an attempt's charge is taken from what its
// model's window has left until it is released, once; a request without
// headroom routing charges nothing.
func TestChargeUntilReleased(t *testing.T) {
	book := headroom.NewBook()
	st := roomStep(t, book, "round_robin", 1)
	k := st.Provider.Keys[0]
	left(t, book, st, 0, 2, 10, time.Now().Add(time.Minute))
	rm := &Room{Need: headroom.Need{Input: 1}, Now: time.Now().UnixNano()}
	fits := func() bool { ok, _ := rm.Fits(k, st.ModelRoom(k)); return ok }
	a, b := st.Charge(k, rm), st.Charge(k, rm)
	if fits() {
		t.Fatal("two attempts in flight on 2 requests left: a third fits")
	}
	a.Release()
	a.Release() // once only
	if !fits() {
		t.Fatal("released: still no room")
	}
	b.Release()
	if none := st.Charge(k, nil); none != (Tickets{}) {
		t.Fatalf("headroom off charged %+v", none)
	}
}

// TestObserveBySlot: an OpenAI answer's reading is its model's on the
// key, not the key's over its models.
func TestObserveBySlot(t *testing.T) {
	book := headroom.NewBook()
	st := roomStep(t, book, "round_robin", 1)
	k := st.Provider.Keys[0]
	rd := headroom.Reading{Has: 1 << headroom.Requests}
	rd.Windows[headroom.Requests] = headroom.Window{Limit: 10, Remaining: 0, Reset: time.Now().Add(time.Minute).UnixNano()}
	st.Observe(book, k, &rd, time.Now())
	if !st.ModelRoom(k).Known() || k.Room.Known() {
		t.Fatalf("model slot known %v, key slot known %v: want the model's only", st.ModelRoom(k).Known(), k.Room.Known())
	}
}
