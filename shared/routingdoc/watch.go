package routingdoc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/kvwatch"
)

// Reading the version a pointer names.
const (
	// readGrace is how long a version the pointer names may stay
	// unreadable before it is skipped: on a replicated bucket a direct Get
	// may be answered by a follower that has not stored it yet.
	readGrace = 2 * time.Second
	// readRetryMax bounds the pause between two reads.
	readRetryMax = 500 * time.Millisecond
)

// Watch calls apply with the active version (with ActiveRevision) when it
// starts, if there is one, then with each version activated after it, in
// order, until ctx ends; it returns nil then. apply runs on Watch's
// goroutine, one version at a time. The watcher is package kvwatch's, on
// the active key only: it survives NATS restarts and leader changes and
// never delivers a pointer revision twice.
//
// A pointer whose version cannot be read (a missing key past a short
// grace, a value that does not decode or does not match its sha256, a
// newer schema) is skipped: logged at error level and passed to the
// WithOnSkip hook; the version applied last stays in force. While NATS is
// unreachable the read is retried until ctx ends. A deleted pointer is
// logged and otherwise ignored. An unbound Store waits for its bucket.
func (s *Store) Watch(ctx context.Context, apply func(Version)) error {
	return s.watch(ctx, apply, func(_ uint64, err error) {
		if s.onSkip != nil {
			s.onSkip(err)
		}
	})
}

// watch is Watch with skip called for each active version that cannot be
// read (its number, 0 when the pointer itself does not decode).
func (s *Store) watch(ctx context.Context, apply func(Version), skip func(version uint64, err error)) error {
	if apply == nil {
		return errors.New("routingdoc: watch: no apply function")
	}
	select {
	case <-s.b.Bound():
	case <-ctx.Done():
		return nil
	}
	kv := s.b.Load().kv
	o := kvwatch.Options{KV: kv, Conn: s.nc, Keys: []string{KeyActive}, Log: s.log}
	return kvwatch.Run(ctx, o, func(ev kvwatch.Event) {
		switch ev.Op {
		case kvwatch.OpPut:
			p, err := decodePointer(ev.Revision, ev.Value)
			var n uint64
			if err == nil {
				n = p.Version
				var v Version
				if v, err = s.load(ctx, kv, p.Version); err == nil {
					v.ActiveRevision = ev.Revision
					apply(v)
					return
				}
				err = fmt.Errorf("active pointer revision %d names config version %d: %w", ev.Revision, p.Version, err)
			}
			if ctx.Err() != nil {
				return
			}
			s.log.Error("config watcher: skipping an active version that cannot be read; the last one applied stays",
				"revision", ev.Revision, "err", err)
			skip(n, err)
		case kvwatch.OpDelete:
			s.log.Warn("config watcher: the active pointer was removed; the last version applied stays",
				"revision", ev.Revision)
		}
	})
}

// load reads version n for the watcher: while NATS does not answer it
// retries until ctx ends; a missing version is retried for readGrace; a
// version that does not decode is given up at once.
func (s *Store) load(ctx context.Context, kv jetstream.KeyValue, n uint64) (Version, error) {
	var missingSince time.Time
	pause := 10 * time.Millisecond
	for {
		v, err := s.get(ctx, kv, n)
		switch {
		case err == nil:
			return v, nil
		case ctx.Err() != nil:
			return Version{}, ctx.Err()
		case errors.Is(err, ErrNotFound):
			if missingSince.IsZero() {
				missingSince = time.Now()
			} else if time.Since(missingSince) > readGrace {
				return Version{}, err
			}
		case !errors.Is(err, ErrUnavailable):
			return Version{}, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return Version{}, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, readRetryMax)
	}
}
