package upstream

import (
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/headroom"
)

// ReadRoom reads an answer's rate-limit headers in the provider's
// dialect into rd (headroom.Parse), gathered in one pass (fasthttp's Peek
// would walk them once per name asked), allocating nothing. It reports
// whether they said anything; a provider without a dialect says nothing.
func ReadRoom(d headroom.Dialect, h *fasthttp.ResponseHeader, now time.Time, rd *headroom.Reading) bool {
	if d == headroom.DialectNone {
		return false
	}
	hs := collectedPool.Get().(*headroom.Collected)
	for k, v := range h.All() {
		hs.Add(k, v)
	}
	ok := headroom.Parse(d, hs, now, rd)
	hs.Reset()
	collectedPool.Put(hs)
	return ok
}

// collectedPool keeps the header sets ReadRoom gathers into (one per
// answer being read: Parse's interface would move a local one to the heap).
var collectedPool = sync.Pool{New: func() any { return new(headroom.Collected) }}
