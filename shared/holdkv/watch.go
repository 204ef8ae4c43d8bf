package holdkv

import (
	"context"

	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/kvwatch"
)

// Watch calls apply for every record in the bucket (Change.Initial), then
// for every change, until ctx ends; it returns nil then. Deleted, purged
// and expired records arrive as Change{Deleted: true}. apply runs on the
// Watch goroutine, one change at a time, in revision order. An unbound
// Store waits for its bucket first.
//
// The watcher is package kvwatch's: re-created, resuming after the last
// applied revision, when the connection reconnects, when the bucket's
// stream elects a leader, when it closes, or when it falls behind the
// bucket; revisions already applied are skipped, and after an absence
// longer than half the marker TTL the bucket is reloaded (records that
// vanished meanwhile arrive as deleted). While NATS is unreachable Watch
// keeps retrying; it never gives up on its own.
func (s *Store) Watch(ctx context.Context, apply func(hold.Change)) error {
	select {
	case <-s.b.Bound():
	case <-ctx.Done():
		return nil
	}
	b := s.b.Load()
	o := kvwatch.Options{KV: b.kv, Conn: s.nc, Log: s.log, MarkerTTL: s.markerTTL}
	strs := interner{}
	return kvwatch.Run(ctx, o, func(ev kvwatch.Event) {
		switch ev.Op {
		case kvwatch.OpLoaded:
			s.syncOnce.Do(func() { close(s.synced) })
		case kvwatch.OpDelete:
			apply(hold.Change{ID: ev.Key, Deleted: true, Revision: ev.Revision, Initial: ev.Initial})
		case kvwatch.OpPut:
			rec, err := decode(ev.Key, ev.Revision, ev.Value)
			if err != nil {
				s.log.Error("hold watcher: skipping a record", "err", err)
				return
			}
			strs.record(&rec)
			apply(hold.Change{ID: ev.Key, Record: rec, Revision: ev.Revision, Initial: ev.Initial})
		}
	})
}
