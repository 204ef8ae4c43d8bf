package route

import (
	"time"

	"switchyard.dev/shared/headroom"
)

// Tickets are one attempt's charges on its key's and its model's
// headroom (Step.Charge), held until its answer comes (Release): between
// answers, what is in flight is taken from what the provider last said
// was left.
type Tickets [2]headroom.Ticket

// Release gives the charges back (once; later calls do nothing).
func (ts *Tickets) Release() {
	ts[0].Release()
	ts[1].Release()
}

// Charge charges an attempt of the request rm on key k of the step: on
// the key's windows and on the model's on k. A request without headroom
// routing (rm nil) charges nothing.
func (st *Step) Charge(k *Key, rm *Room) Tickets {
	var ts Tickets
	if rm == nil {
		return ts
	}
	ts[0] = k.Room.Charge(rm.Need)
	if m := st.ModelRoom(k); m != nil {
		ts[1] = m.Charge(rm.Need)
	}
	return ts
}

// Observe applies a reading of an answer on key k of the step to the
// slot its dialect's windows belong to (Dialect.PerModel): the model's on
// the key, or the key's over all its models. A step without the model's
// slot (an unlisted model, a passthrough call) says nothing of the key's
// other models: its reading is dropped.
func (st *Step) Observe(book *headroom.Book, k *Key, rd *headroom.Reading, now time.Time) {
	slot := k.Room
	if st.Provider.Dialect.PerModel() {
		if slot = st.ModelRoom(k); slot == nil {
			return
		}
	}
	book.Observe(slot, rd, now)
}
