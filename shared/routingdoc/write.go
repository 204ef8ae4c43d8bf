package routingdoc

// Writing the bucket: Import, Activate, Rollback and Edit, and the commit
// they share (validate, store version.<N>, move the pointer by
// compare-and-set, remove the version of a write that lost).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/redact"
)

// Import makes doc the first active version (source import), unless there
// is an active version already: then it returns ErrExists and writes
// nothing, or nothing that stays. The pointer is created only if absent,
// so when every instance imports at its first start exactly one wins
// fleet-wide and the others get ErrExists. Instances importing the same
// document share version 1 (whichever creates the pointer, it names
// version 1); an importer of another document writes the next number and,
// losing, removes it again.
func (s *Store) Import(ctx context.Context, doc []byte, meta Meta) (Version, error) {
	kv, err := s.ready("import")
	if err != nil {
		return Version{}, err
	}
	if err := check(doc, meta); err != nil {
		return Version{}, err
	}
	cur, err := s.current(ctx, kv)
	if err != nil {
		return Version{}, err
	}
	if cur.ok {
		return Version{}, fmt.Errorf("%w: version %d", ErrExists, cur.ptr.Version)
	}
	if err := s.validateAs(doc, 1); err != nil {
		return Version{}, err
	}
	v := s.newVersion(doc, meta, SourceImport, 0, cur)
	// Version 1 first: an importer that finds it written with the same
	// document adopts it rather than writing another.
	v.Version = 1
	adopted := false
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	rev, err := kv.Update(octx, VersionKey(1), mustJSON(v), 0)
	cancel()
	switch {
	case err == nil:
		v.Revision = rev
	case !isLost(err):
		return Version{}, s.fail(ctx, "import: write "+VersionKey(1), err)
	default:
		one, gerr := s.get(ctx, kv, 1)
		if gerr == nil && one.SHA256 == v.SHA256 {
			v, adopted = one, true
		} else {
			v.Version = 0 // the next free number
			if err := s.writeVersion(ctx, kv, &v); err != nil {
				return Version{}, err
			}
		}
	}
	p := Pointer{V: SchemaVersion, Version: v.Version, By: meta.By, At: s.now().UTC()}
	octx, cancel = context.WithTimeout(ctx, s.opTimeout)
	ptrRev, err := kv.Create(octx, KeyActive, mustJSON(p))
	cancel()
	if err != nil {
		if !isLost(err) {
			return Version{}, s.fail(ctx, "import: create the active pointer", err)
		}
		// Another importer won.
		var winner current
		if adopted {
			winner, _ = s.current(ctx, kv)
		} else {
			winner = s.dropOrphan(ctx, kv, v)
		}
		if winner.ok {
			return Version{}, fmt.Errorf("%w: version %d", ErrExists, winner.ptr.Version)
		}
		return Version{}, ErrExists
	}
	v.ActiveRevision = ptrRev
	s.publish(v, meta.By)
	return v, nil
}

// Activate validates doc, writes it as the next version (source activate)
// and moves the active pointer to it by compare-and-set from revision
// base: the ActiveRevision of the version the caller previewed against. A
// base of 0 means "whatever is active when the call reads it" (the write
// is still a compare-and-set from that revision, so a concurrent
// activation makes it fail rather than be overwritten); with no active
// version, base 0 creates the pointer.
//
// The health checks' path and method of the active version's providers
// are kept where doc omits them (KeepRuntimeFields).
//
// It returns the new version (ActiveRevision set), or ErrConflict when the
// pointer is not (or no longer) at base — the version written for it is
// removed again —, ErrUnchanged when doc is the active document, ErrInvalid
// when doc fails validation (nothing written).
func (s *Store) Activate(ctx context.Context, doc []byte, meta Meta, base uint64) (Version, error) {
	kv, err := s.ready("activate")
	if err != nil {
		return Version{}, err
	}
	if err := check(doc, meta); err != nil {
		return Version{}, err
	}
	cur, err := s.based(ctx, kv, base)
	if err != nil {
		return Version{}, err
	}
	if cur.ok && cur.err == nil {
		// the gateway's own fields stay when doc omits them (a file
		// re-imported): KeepRuntimeFields
		if kept, _, err := KeepRuntimeFields([]byte(cur.version.Document), doc); err == nil {
			doc = kept
		}
	}
	return s.commit(ctx, kv, doc, meta, SourceActivate, 0, cur)
}

// Rollback activates the document of version n again as a new version
// (source rollback, FromVersion n), through the same checks as Activate:
// validation (the document must still load), compare-and-set from base
// (0: whatever is active), ErrUnchanged when n's document is the active
// one.
func (s *Store) Rollback(ctx context.Context, n uint64, meta Meta, base uint64) (Version, error) {
	kv, err := s.ready("roll back")
	if err != nil {
		return Version{}, err
	}
	old, err := s.get(ctx, kv, n)
	if err != nil {
		return Version{}, err
	}
	doc := []byte(old.Document)
	if err := check(doc, meta); err != nil {
		return Version{}, err
	}
	cur, err := s.based(ctx, kv, base)
	if err != nil {
		return Version{}, err
	}
	return s.commit(ctx, kv, doc, meta, SourceRollback, n, cur)
}

// Edit applies fn (SetStepActive, SetKeyField, AddKey, SetTripRules or a
// composition) to the active document and activates the result as a new
// version (source edit, FromVersion the version edited), through the same
// checks as Activate; the compare-and-set is from the revision of the
// version edited, so an edit never overwrites a change it did not see.
// base 0 edits whatever is active. meta.Edit describes the edit; when
// empty, a summary of the changes is written (Summary). fn's errors are
// returned as they are (ErrNotFound, ErrInvalid).
func (s *Store) Edit(ctx context.Context, base uint64, meta Meta, fn func(doc []byte) ([]byte, error)) (Version, error) {
	kv, err := s.ready("edit")
	if err != nil {
		return Version{}, err
	}
	cur, err := s.based(ctx, kv, base)
	if err != nil {
		return Version{}, err
	}
	if !cur.ok {
		return Version{}, fmt.Errorf("edit: %w", ErrNoActive)
	}
	if cur.err != nil {
		return Version{}, fmt.Errorf("edit: %w", cur.err)
	}
	old := []byte(cur.version.Document)
	doc, err := fn(old)
	if err != nil {
		return Version{}, fmt.Errorf("edit config version %d: %w", cur.ptr.Version, err)
	}
	if err := check(doc, meta); err != nil {
		return Version{}, err
	}
	if meta.Edit == "" {
		ch, err := Diff(old, doc)
		if err != nil {
			return Version{}, fmt.Errorf("%w: edit config version %d: %w", ErrInvalid, cur.ptr.Version, err)
		}
		meta.Edit = ch.Summary()
	}
	return s.commit(ctx, kv, doc, meta, SourceEdit, cur.ptr.Version, cur)
}

// check is what every write requires of its arguments.
func check(doc []byte, meta Meta) error {
	if strings.TrimSpace(meta.By) == "" {
		return fmt.Errorf("%w: the writer (by) must be named", ErrInvalid)
	}
	return wellFormed(doc)
}

// validateAs runs the Validate option on doc as version n.
func (s *Store) validateAs(doc []byte, n uint64) error {
	if s.validate == nil {
		return nil
	}
	if err := s.validate(doc, fmt.Sprintf("config version %d", n)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func (s *Store) newVersion(doc []byte, meta Meta, src Source, from uint64, cur current) Version {
	v := Version{
		V: SchemaVersion, Document: string(doc), SHA256: Sum(doc),
		By: meta.By, At: s.now().UTC(), Comment: redact.String(meta.Comment),
		Source: src, FromVersion: from,
	}
	if cur.ok {
		v.Replaces = cur.ptr.Version
	}
	if src == SourceEdit {
		v.Edit = redact.String(meta.Edit)
	}
	return v
}

// commit validates doc, writes it as the next version and moves the
// pointer from cur to it.
func (s *Store) commit(ctx context.Context, kv jetstream.KeyValue, doc []byte, meta Meta, src Source, from uint64, cur current) (Version, error) {
	if cur.ok && cur.err == nil && cur.version.SHA256 == Sum(doc) {
		return Version{}, fmt.Errorf("%w: config version %d", ErrUnchanged, cur.ptr.Version)
	}
	n, err := s.nextNumber(ctx, kv)
	if err != nil {
		return Version{}, err
	}
	if err := s.validateAs(doc, n); err != nil {
		return Version{}, err
	}
	v := s.newVersion(doc, meta, src, from, cur)
	v.Version = n
	if err := s.writeVersion(ctx, kv, &v); err != nil {
		return Version{}, err
	}
	p := Pointer{V: SchemaVersion, Version: v.Version, By: meta.By, At: v.At}
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	var rev uint64
	if cur.ok {
		rev, err = kv.Update(octx, KeyActive, mustJSON(p), cur.rev)
	} else {
		rev, err = kv.Create(octx, KeyActive, mustJSON(p))
	}
	cancel()
	if err != nil {
		if !isLost(err) {
			// Unknown outcome: the pointer may have moved. The version
			// stays (if the pointer names it, it must).
			return Version{}, s.fail(ctx, fmt.Sprintf("activate config version %d", v.Version), err)
		}
		lost := fmt.Errorf("%w: another version became active first", ErrConflict)
		if cur.ok {
			lost = fmt.Errorf("%w: the active pointer moved from revision %d", ErrConflict, cur.rev)
		}
		if now := s.dropOrphan(ctx, kv, v); now.ok {
			lost = fmt.Errorf("%w (now version %d)", lost, now.ptr.Version)
		}
		return Version{}, lost
	}
	v.ActiveRevision = rev
	s.publish(v, meta.By)
	return v, nil
}

// writeVersion writes v under version.<v.Version>, or under the next free
// number when others took it. A number is free only if its key was never
// written: a removed orphan's number is not reused.
func (s *Store) writeVersion(ctx context.Context, kv jetstream.KeyValue, v *Version) error {
	if v.Version == 0 {
		n, err := s.nextNumber(ctx, kv)
		if err != nil {
			return err
		}
		v.Version = n
	}
	for range maxNumberTries {
		octx, cancel := context.WithTimeout(ctx, s.opTimeout)
		rev, err := kv.Update(octx, VersionKey(v.Version), mustJSON(*v), 0)
		cancel()
		if err == nil {
			v.Revision = rev
			return nil
		}
		if !isLost(err) {
			return s.fail(ctx, "write "+VersionKey(v.Version), err)
		}
		v.Version++
	}
	return fmt.Errorf("%w: write a version: %d numbers in a row were taken", ErrConflict, maxNumberTries)
}

// nextNumber is one more than the highest version number ever written
// (removed orphans included).
func (s *Store) nextNumber(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	var top uint64
	err := s.scan(ctx, kv, true, func(e jetstream.KeyValueEntry) {
		if n, ok := parseVersionKey(e.Key()); ok && n > top {
			top = n
		}
	})
	return top + 1, err
}

// dropOrphan removes a version whose write lost its compare-and-set (a
// purge: its document goes, its number stays taken), unless the pointer
// names it after all (an importer of the same document adopted it) or the
// pointer cannot be read. It returns what the pointer says.
func (s *Store) dropOrphan(ctx context.Context, kv jetstream.KeyValue, v Version) current {
	ctx = context.WithoutCancel(ctx) // clean up even if the caller gave up
	cur, err := s.current(ctx, kv)
	if err != nil || (cur.ok && cur.ptr.Version == v.Version) {
		return cur
	}
	octx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	if err := kv.Purge(octx, VersionKey(v.Version), jetstream.LastRevision(v.Revision)); err != nil {
		s.log.Warn("routingdoc: could not remove a version that was never activated",
			"version", v.Version, "err", err)
	}
	return cur
}

// isLost reports whether err is a lost compare-and-set or create: the key
// exists, or is not at the expected revision (10071, or 10164 on
// replicated streams).
func isLost(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		bus.WrongLastSequence(err)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("routingdoc: encode %T: %v", v, err)) // plain structs: cannot fail
	}
	return b
}
