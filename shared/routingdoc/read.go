package routingdoc

// Reading the bucket: the active version, one version, the list of
// versions, and the pointer-then-version read every write starts from.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Active returns the active version (ErrNoActive when there is none), with
// ActiveRevision set: the base of a write that follows.
func (s *Store) Active(ctx context.Context) (Version, error) {
	kv, err := s.ready("read the active version")
	if err != nil {
		return Version{}, err
	}
	cur, err := s.current(ctx, kv)
	if err != nil {
		return Version{}, err
	}
	if !cur.ok {
		return Version{}, ErrNoActive
	}
	if cur.err != nil {
		return Version{}, cur.err
	}
	return cur.version, nil
}

// Get returns version n (ErrNotFound when there is none).
func (s *Store) Get(ctx context.Context, n uint64) (Version, error) {
	kv, err := s.ready("read a version")
	if err != nil {
		return Version{}, err
	}
	return s.get(ctx, kv, n)
}

// List returns every stored version, newest first, without documents.
// Versions that cannot be decoded are left out (and logged). Version
// numbers may have gaps: a number taken by a write that lost its
// compare-and-set is never reused.
func (s *Store) List(ctx context.Context) ([]Version, error) {
	kv, err := s.ready("list versions")
	if err != nil {
		return nil, err
	}
	var out []Version
	err = s.scan(ctx, kv, false, func(e jetstream.KeyValueEntry) {
		v, err := decodeVersion(e.Key(), e.Revision(), e.Value())
		if err != nil {
			s.log.Error("config history: skipping a version", "err", err)
			return
		}
		v.Document = ""
		out = append(out, v)
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Version) int {
		switch {
		case a.Version > b.Version:
			return -1
		case a.Version < b.Version:
			return 1
		}
		return 0
	})
	return out, nil
}

// current is what the active pointer says.
type current struct {
	ok      bool    // a pointer exists
	rev     uint64  // its revision
	ptr     Pointer // its value
	version Version // the version it names (ActiveRevision set), unless err
	err     error   // why the version could not be read
}

// current reads the pointer and the version it names. An absent pointer
// is ok=false, no error; a version that cannot be read is cur.err.
func (s *Store) current(ctx context.Context, kv jetstream.KeyValue) (current, error) {
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	e, err := kv.Get(octx, KeyActive)
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return current{}, nil
	}
	if err != nil {
		return current{}, s.fail(ctx, "read the active pointer", err)
	}
	p, err := decodePointer(e.Revision(), e.Value())
	if err != nil {
		return current{}, err
	}
	cur := current{ok: true, rev: e.Revision(), ptr: p}
	cur.version, cur.err = s.get(ctx, kv, p.Version)
	if cur.err != nil {
		if ctx.Err() != nil || errors.Is(cur.err, ErrUnavailable) {
			return current{}, cur.err
		}
		cur.err = fmt.Errorf("the active pointer names version %d, which cannot be read: %w", p.Version, cur.err)
	}
	cur.version.ActiveRevision = cur.rev
	return cur, nil
}

// based is current checked against the caller's base (0: any).
func (s *Store) based(ctx context.Context, kv jetstream.KeyValue, base uint64) (current, error) {
	cur, err := s.current(ctx, kv)
	if err != nil {
		return current{}, err
	}
	if base != 0 && (!cur.ok || cur.rev != base) {
		if !cur.ok {
			return current{}, fmt.Errorf("%w: based on active revision %d, but there is no active version", ErrConflict, base)
		}
		return current{}, fmt.Errorf("%w: based on active revision %d, now version %d at revision %d",
			ErrConflict, base, cur.ptr.Version, cur.rev)
	}
	return cur, nil
}

// get reads version n.
func (s *Store) get(ctx context.Context, kv jetstream.KeyValue, n uint64) (Version, error) {
	key := VersionKey(n)
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	e, err := kv.Get(octx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Version{}, fmt.Errorf("%w: config version %d", ErrNotFound, n)
	}
	if err != nil {
		return Version{}, s.fail(ctx, "read "+key, err)
	}
	v, err := decodeVersion(key, e.Revision(), e.Value())
	if err != nil {
		return Version{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return v, nil
}

// scan calls f with the last entry of every version key (with meta, keys
// and revisions only, removed ones included; otherwise values, removed
// ones left out).
func (s *Store) scan(ctx context.Context, kv jetstream.KeyValue, meta bool, f func(jetstream.KeyValueEntry)) error {
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	opts := []jetstream.WatchOpt{jetstream.IgnoreDeletes()}
	if meta {
		opts = []jetstream.WatchOpt{jetstream.MetaOnly()}
	}
	w, err := kv.Watch(octx, versionPrefix+"*", opts...)
	if err != nil {
		return s.fail(ctx, "list the version keys", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return s.fail(ctx, "list the version keys", errors.New("watcher closed"))
			}
			if e == nil {
				return nil
			}
			f(e)
			// The end marker has been seen missing under concurrent
			// writes: a consumer with nothing pending is done too.
			if e.Delta() == 0 {
				return nil
			}
		case <-octx.Done():
			return s.fail(ctx, "list the version keys", octx.Err())
		}
	}
}
