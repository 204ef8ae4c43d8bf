// Package kvwatch follows a JetStream KV bucket: one watcher that every
// Switchyard bucket consumer uses (hold tables, health views, rotated
// secrets, the admin's rotation status), so that all of them get the same
// robustness against NATS restarts and the loss of cluster nodes.
//
// Run delivers the values present in the bucket (the initial load), then
// an OpLoaded event, then every change, in revision order, one at a time, on
// the caller's goroutine, until its context ends. Underneath, the KV
// watcher (an ordered consumer) is replaced whenever it may have gone
// stale, resuming after the last revision applied so that no change is
// applied twice and none is missed:
//
//   - when the connection reconnects (a restarted server has forgotten the
//     consumer; the client would notice only after missed heartbeats);
//   - when the bucket's stream elects a leader (the consumer may have lived
//     on a node that is gone, and the client, connected elsewhere, hears no
//     reconnect);
//   - when the watcher's channel closes;
//   - when a periodic check finds the bucket ahead of the last revision
//     applied and the watcher does not catch up within a short grace (a
//     stall nothing else announced).
//
// The same periodic check notices a bucket whose last revision is below
// the last one applied: revisions never go back, so the bucket was deleted
// and created again (its storage lost, a memory-stored bucket after a full
// NATS restart), and the watcher loads it whole again from revision 1,
// reporting the keys that are gone as deleted.
//
// A replaced watcher keeps delivering until its successor is running (its
// consumer may well be alive), and the revision check drops what both
// deliver. Nothing slow runs on the watch loop: creating a watcher and
// asking the bucket for its last revision run on their own goroutines,
// bounded by timeouts, and report back over channels, so updates and
// reconnects are handled while the cluster elects a leader. A creation that
// fails is retried after 50 ms, doubling up to 500 ms; one that hangs (a
// request sent in the middle of an election) gets a second attempt beside
// it after 500 ms instead of being waited out.
package kvwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Op says what an Event is.
type Op uint8

// The events.
const (
	// OpPut: Key has the value Value at Revision.
	OpPut Op = iota + 1
	// OpDelete: Key was deleted, purged or expired (Value is empty). Only
	// keys delivered before by an OpPut are reported deleted.
	OpDelete
	// OpLoaded: the initial load is complete (no key). Sent once per Run,
	// also when the end of the initial values never came (after
	// Options.LoadTimeout).
	OpLoaded
)

func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpLoaded:
		return "loaded"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Event is one thing Run delivers.
type Event struct {
	Op       Op
	Key      string
	Value    []byte // OpPut only; owned by the callee
	Revision uint64 // the bucket revision of the change
	// Initial is true for events of the initial load (before OpLoaded).
	Initial bool
}

// Defaults of Options.
const (
	// DefaultLoadTimeout bounds the wait for the end of the initial values
	// once none arrive: the end marker has been seen missing under
	// concurrent writes.
	DefaultLoadTimeout = 5 * time.Second
	// DefaultStallCheck is how often the bucket's last revision is compared
	// with the last one applied.
	DefaultStallCheck = time.Second
	// DefaultOpTimeout bounds one stall check (a stream info request).
	DefaultOpTimeout = 2 * time.Second
)

// Watcher creation and stall detection.
const (
	// retryMin and retryMax bound the pause between failed creations.
	retryMin = 50 * time.Millisecond
	retryMax = 500 * time.Millisecond
	// hedgeAfter is how long a creation may hang before another one is
	// started beside it; at most maxAttempts are in flight.
	hedgeAfter  = 500 * time.Millisecond
	maxAttempts = 3
	// createTimeout abandons one creation attempt.
	createTimeout = 5 * time.Second
	// stallGrace is how long a live watcher may take to deliver a revision
	// the bucket already has.
	stallGrace = 200 * time.Millisecond
)

// Options configure Run.
type Options struct {
	// KV is the bucket. Required.
	KV jetstream.KeyValue
	// Conn is the connection KV uses (nil: no reconnect handling and no
	// leader-election trigger; stalls are still checked).
	Conn *nats.Conn
	// Keys filters the keys watched (wildcards allowed); empty: every key.
	Keys []string
	// Log receives watcher restarts and failures; nil discards them.
	Log *slog.Logger
	// MarkerTTL is the bucket's LimitMarkerTTL, 0 for a bucket without
	// per-key TTLs. A watcher out of touch with the bucket for more than
	// half of it reloads the bucket instead of resuming (the markers of keys
	// that expired meanwhile may be gone) and reports the keys that
	// vanished as deleted.
	MarkerTTL time.Duration
	// LoadTimeout bounds the wait for the end of a full load while
	// nothing arrives (default DefaultLoadTimeout): a load that keeps
	// delivering values (a large bucket, a busy machine) is not cut short.
	LoadTimeout time.Duration
	// StallCheck is the period of the stall check (default
	// DefaultStallCheck; negative turns it off). The check compares with
	// the bucket's last revision; when Keys is set it only looks for a
	// bucket created again (a change to another key would look like a
	// stall).
	StallCheck time.Duration
	// OpTimeout bounds one stall check (default DefaultOpTimeout).
	OpTimeout time.Duration
}

// Run watches o.KV and calls apply for each event until ctx ends; it
// returns nil then, and an error only for invalid options. apply runs on
// Run's goroutine; while it runs no other event is delivered. While NATS is
// unreachable Run keeps trying; it never gives up on its own.
func Run(ctx context.Context, o Options, apply func(Event)) error {
	if o.KV == nil {
		return errors.New("kvwatch: no bucket")
	}
	if apply == nil {
		return errors.New("kvwatch: no apply function")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.LoadTimeout <= 0 {
		o.LoadTimeout = DefaultLoadTimeout
	}
	if o.StallCheck == 0 {
		o.StallCheck = DefaultStallCheck
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	w := &watcher{
		o:        o,
		apply:    apply,
		log:      o.Log.With("bucket", o.KV.Bucket()),
		live:     make(map[string]struct{}),
		attempts: make(map[uint64]context.CancelFunc),
		results:  make(chan attempt, maxAttempts),
		statusC:  make(chan status, 1),
		first:    true,
	}
	return w.run(ctx)
}
