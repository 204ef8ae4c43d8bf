package prober

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/holdkv"
)

// lease is the fleet-wide right to run one unit of checks, a key in
// switchyard_leases created only if absent with a per-key TTL and renewed
// by its owner with a compare-and-set that keeps the TTL. When the owner
// dies the key expires and another replica creates it.
type lease struct {
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	key  string
	inst string
	ttl  time.Duration
	rev  uint64 // revision of our lease; 0 when not ours
	// until is when our lease lapses at the earliest (its last write's
	// send time plus ttl): work done under it ends by then.
	until time.Time
}

// errLeaseLost: the lease is someone else's.
var errLeaseLost = errors.New("lease held by another replica")

// acquire creates or renews the lease. It returns nil when this replica
// owns it, and otherwise when another replica's lease lapses at the
// latest (zero when unknown).
func (l *lease) acquire(ctx context.Context) (lapse time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ttl := holdkv.TTL(l.ttl)
	sent := time.Now()
	if l.rev != 0 {
		msg := &nats.Msg{Subject: "$KV." + l.kv.Bucket() + "." + l.key, Data: []byte(l.inst)}
		ack, err := l.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(l.rev), jetstream.WithMsgTTL(ttl))
		if err == nil {
			l.rev, l.until = ack.Sequence, sent.Add(l.ttl)
			return time.Time{}, nil
		}
		l.rev = 0
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) {
			return time.Time{}, err // NATS did not answer: the lease may still be ours; retry
		}
	}
	rev, err := l.kv.Create(ctx, l.key, []byte(l.inst), jetstream.KeyTTL(ttl))
	if err == nil {
		l.rev, l.until = rev, sent.Add(l.ttl)
		return time.Time{}, nil
	}
	var apiErr *jetstream.APIError
	if !errors.Is(err, jetstream.ErrKeyExists) && !errors.As(err, &apiErr) {
		return time.Time{}, err
	}
	e, gerr := l.kv.Get(ctx, l.key)
	if gerr != nil {
		return time.Time{}, errLeaseLost
	}
	if string(e.Value()) == l.inst { // ours after all (a renewal whose answer was lost)
		l.rev, l.until = e.Revision(), e.Created().Add(l.ttl)
		return time.Time{}, nil
	}
	return e.Created().Add(ttl), errLeaseLost
}

// release deletes the lease if it is still ours, so that another replica
// takes the work over at once (graceful shutdown).
func (l *lease) release(ctx context.Context) {
	if l.rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = l.kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev))
	l.rev = 0
}
