package kvwatch

// The periodic stall check: the bucket's last revision against the last
// one applied, a watcher that does not catch up within stallGrace, and a
// bucket whose revisions went back (deleted and created again).

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// status is the outcome of one stall check.
type status struct {
	gen     uint64
	lastSeq uint64
	// applied is the last revision the watcher had applied when the check
	// asked: revisions applied while the answer travelled are newer than
	// the bucket's last one then, and say nothing.
	applied uint64
	err     error
}

// checkBehind asks the bucket for its last revision on a goroutine of its
// own; checked takes the answer. Without this a stall is only noticed by
// the client after missed heartbeats (tens of seconds).
func (w *watcher) checkBehind(ctx context.Context) {
	if w.kw == nil || w.loading || w.checking || w.behindSeq != 0 || !w.connected() {
		return
	}
	w.checking = true
	gen, kv, timeout, applied := w.gen, w.o.KV, w.o.OpTimeout, w.last
	w.bg.Go(func() {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		st := status{gen: gen, applied: applied}
		s, err := kv.Status(cctx)
		if err == nil {
			if bs, ok := s.(*jetstream.KeyValueBucketStatus); ok {
				st.lastSeq = bs.StreamInfo().State.LastSeq
			} else {
				err = fmt.Errorf("kvwatch: unexpected bucket status %T", s)
			}
		}
		st.err = err
		w.statusC <- st // buffered: one check at a time
	})
}

// checked compares the bucket's last revision with the last one applied.
// When the watcher is behind it arms the recheck: a live watcher delivers
// within milliseconds, so one still short of that revision a moment later
// has stalled. It reports a bucket whose last revision is below the last
// one applied: revisions never go back, so the bucket was deleted and
// created again (its storage lost, a memory-stored bucket after a full
// NATS restart, an operator re-creating it), and its new revisions would
// be taken for ones already applied.
func (w *watcher) checked(st status) (recreated bool) {
	w.checking = false
	if st.err != nil || st.gen != w.gen || w.kw == nil || w.loading {
		return false
	}
	if st.lastSeq < st.applied {
		return true
	}
	if len(w.o.Keys) > 0 {
		// Filtered: the bucket's last revision may be another key's, so
		// it says nothing of this watcher's progress.
		return false
	}
	if st.lastSeq <= max(w.last, w.caughtUp) {
		w.contact = time.Now()
		return false
	}
	w.behindSeq, w.behindFrom = st.lastSeq, w.last
	w.recheck.Reset(stallGrace)
	return false
}

// stalled reports whether the watcher is still short of the revision the
// check saw and delivered nothing since the check (or the last recheck):
// one that is delivering is only slower than the bucket grew (a burst of
// writes, a busy machine) and is rechecked after another grace, as a
// second watcher beside it would deliver the same revisions again. A
// revision that a fresh watcher does not deliver either (an expiry marker
// that has itself expired, a change to a key outside the filter) is
// accounted for after one restart.
func (w *watcher) stalled() bool {
	seq := w.behindSeq
	w.behindSeq = 0
	if seq == 0 || w.kw == nil || w.loading || w.last >= seq {
		return false
	}
	if w.last > w.behindFrom {
		w.behindSeq, w.behindFrom = seq, w.last
		w.recheck.Reset(stallGrace)
		return false
	}
	if w.restartedFor == seq {
		w.caughtUp = seq
		return false
	}
	w.restartedFor = seq
	return true
}
