// Package lease is the fleet-wide right of one process to do one piece of
// work (a prober unit's checks, the usage recorder): a key in the
// switchyard_leases KV bucket, created only if absent with a per-key TTL
// and renewed by its owner with a compare-and-set that keeps the TTL.
// When the owner dies the key expires and another process creates it; an
// owner that stops deletes it, so that another takes over at once.
package lease

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/holdkv"
)

// Lease is one key of the leases bucket, as one process holds it. It is
// not safe for concurrent use: one goroutine acquires, renews and
// releases it.
type Lease struct {
	JS  jetstream.JetStream
	KV  jetstream.KeyValue
	Key string
	// Owner is the value written: the process's instance id.
	Owner string
	TTL   time.Duration

	rev uint64 // revision of our lease; 0 when not ours
	// Until is when our lease lapses at the earliest (its last write's
	// send time plus TTL): work done under it ends by then. Set by
	// Acquire.
	Until time.Time
}

// ErrLost: the lease is another process's.
var ErrLost = errors.New("lease held by another instance")

// Acquire creates or renews the lease. It returns nil when this process
// owns it; ErrLost, with when the other owner's lease lapses at the
// latest (zero when unknown), when another does; another error when NATS
// did not answer (the lease may still be ours: Acquire again).
func (l *Lease) Acquire(ctx context.Context) (lapse time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ttl := holdkv.TTL(l.TTL)
	sent := time.Now()
	if l.rev != 0 {
		msg := &nats.Msg{Subject: "$KV." + l.KV.Bucket() + "." + l.Key, Data: []byte(l.Owner)}
		ack, err := l.JS.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(l.rev), jetstream.WithMsgTTL(ttl))
		if err == nil {
			l.rev, l.Until = ack.Sequence, sent.Add(l.TTL)
			return time.Time{}, nil
		}
		l.rev = 0
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) {
			return time.Time{}, err // NATS did not answer: the lease may still be ours; retry
		}
	}
	rev, err := l.KV.Create(ctx, l.Key, []byte(l.Owner), jetstream.KeyTTL(ttl))
	if err == nil {
		l.rev, l.Until = rev, sent.Add(l.TTL)
		return time.Time{}, nil
	}
	var apiErr *jetstream.APIError
	if !errors.Is(err, jetstream.ErrKeyExists) && !errors.As(err, &apiErr) {
		return time.Time{}, err
	}
	e, gerr := l.KV.Get(ctx, l.Key)
	if gerr != nil {
		return time.Time{}, ErrLost
	}
	if string(e.Value()) == l.Owner { // ours after all (a renewal whose answer was lost)
		l.rev, l.Until = e.Revision(), e.Created().Add(l.TTL)
		return time.Time{}, nil
	}
	return e.Created().Add(ttl), ErrLost
}

// Release deletes the lease if it is still ours, so that another process
// takes the work over at once (graceful shutdown).
func (l *Lease) Release(ctx context.Context) {
	if l.rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = l.KV.Delete(ctx, l.Key, jetstream.LastRevision(l.rev))
	l.rev = 0
}
