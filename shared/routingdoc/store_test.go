package routingdoc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"
)

// race runs f(i) for i in [0, n) at once and returns their errors.
func race(n int, f func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// TestImportRace: three instances import at their first start; exactly
// one wins, the others get ErrExists, and one version stays.
func TestImportRace(t *testing.T) {
	tests := []struct {
		name     string
		sameDocs bool
	}{
		{"same file everywhere", true},
		{"different files", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t)
			var nodes []*node
			for range 3 {
				nodes = append(nodes, join(t, s.ClientURL()))
			}
			events := subscribeEvents(t, nodes[0])
			ctx := ctxFor(t)
			docs := make([][]byte, 3)
			for i := range docs {
				docs[i] = doc(1)
				if !tt.sameDocs {
					docs[i] = doc(i + 1)
				}
			}
			errs := race(3, func(i int) error {
				_, err := nodes[i].store.Import(ctx, docs[i], Meta{By: fmt.Sprintf("proxy-%d", i)})
				return err
			})
			won := -1
			for i, err := range errs {
				switch {
				case err == nil:
					if won >= 0 {
						t.Fatalf("importers %d and %d both won", won, i)
					}
					won = i
				case !errors.Is(err, ErrExists):
					t.Fatalf("importer %d: %v", i, err)
				}
			}
			if won < 0 {
				t.Fatalf("no importer won: %v", errs)
			}
			active, err := nodes[1].store.Active(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if active.Source != SourceImport || active.Document != string(docs[won]) || active.ActiveRevision == 0 {
				t.Fatalf("active %+v", active)
			}
			if tt.sameDocs && active.Version != 1 {
				t.Fatalf("active version %d: importers of one file share version 1", active.Version)
			}
			if got := numbers(t, nodes[2].store); len(got) != 1 || got[0] != active.Version {
				t.Fatalf("versions %v: only the active one stays", got)
			}
			ev := events.next(t)
			if ev.Source != SourceImport || ev.Version != active.Version || ev.By != fmt.Sprintf("proxy-%d", won) {
				t.Fatalf("event %+v", ev)
			}
			events.none(t, nodes...)
			// A later start finds the active version.
			_, err = nodes[0].store.Import(ctx, doc(9), Meta{By: "proxy-late"})
			wantErr(t, err, ErrExists)
		})
	}
}

// TestImportAdoptsOrphan: an importer that finds version 1 written with
// its document but no pointer (the first importer stopped in between)
// points at it rather than writing another version.
func TestImportAdoptsOrphan(t *testing.T) {
	s := startServer(t)
	n := join(t, s.ClientURL())
	ctx := ctxFor(t)
	v := Version{V: SchemaVersion, Version: 1, Document: string(doc(1)), SHA256: Sum(doc(1)), By: "proxy-gone",
		At: time.Now().UTC(), Source: SourceImport}
	if _, err := n.kv.Create(ctx, VersionKey(1), mustJSON(v)); err != nil {
		t.Fatal(err)
	}
	got, err := n.store.Import(ctx, doc(1), Meta{By: "proxy-b"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 1 || got.By != "proxy-gone" || got.ActiveRevision == 0 {
		t.Fatalf("imported %+v", got)
	}
	// Another document next to an orphan: the next number.
	s2 := startServer(t)
	n2 := join(t, s2.ClientURL())
	if _, err := n2.kv.Create(ctx, VersionKey(1), mustJSON(v)); err != nil {
		t.Fatal(err)
	}
	got, err = n2.store.Import(ctx, doc(2), Meta{By: "proxy-b"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 2 || got.Document != string(doc(2)) {
		t.Fatalf("imported %+v", got)
	}
}

// TestActivateConflict: two activations from the same base; one wins,
// the other gets ErrConflict and leaves no version behind.
func TestActivateConflict(t *testing.T) {
	s := startServer(t)
	ctx := ctxFor(t)

	t.Run("stale base", func(t *testing.T) {
		n := join(t, s.ClientURL())
		v1, err := n.store.Import(ctx, doc(1), Meta{By: "proxy"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.store.Activate(ctx, doc(2), Meta{By: "alice"}, v1.ActiveRevision); err != nil {
			t.Fatal(err)
		}
		before := lastSeq(t, n.kv)
		_, err = n.store.Activate(ctx, doc(3), Meta{By: "bob"}, v1.ActiveRevision)
		wantErr(t, err, ErrConflict)
		if !strings.Contains(err.Error(), fmt.Sprintf("based on active revision %d, now version 2", v1.ActiveRevision)) {
			t.Errorf("err = %v", err)
		}
		if lastSeq(t, n.kv) != before {
			t.Fatal("a write based on a stale revision wrote something")
		}
	})

	t.Run("lost compare-and-set", func(t *testing.T) {
		// Alice's validation holds her write between her check of the
		// base and her writes, while Bob activates: Alice then writes
		// her version and loses the compare-and-set.
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		slow := WithValidate(func(doc []byte, name string) error {
			once.Do(func() {
				close(entered)
				<-release
			})
			return nil
		})
		s := startServer(t)
		alice, bob := join(t, s.ClientURL(), slow), join(t, s.ClientURL())
		v1, err := bob.store.Import(ctx, doc(1), Meta{By: "proxy"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := alice.store.Activate(ctx, doc(2), Meta{By: "alice"}, v1.ActiveRevision)
			done <- err
		}()
		<-entered
		vb, err := bob.store.Activate(ctx, doc(3), Meta{By: "bob"}, v1.ActiveRevision)
		if err != nil {
			t.Fatal(err)
		}
		close(release)
		err = <-done
		wantErr(t, err, ErrConflict)
		if !strings.Contains(err.Error(), fmt.Sprintf("the active pointer moved from revision %d (now version 2)", v1.ActiveRevision)) {
			t.Errorf("err = %v", err)
		}
		// Alice picked number 2 too, found it taken, wrote 3 and removed it.
		if vb.Version != 2 {
			t.Fatalf("bob's version %d", vb.Version)
		}
		if got := numbers(t, bob.store); !slices.Equal(got, []uint64{2, 1}) {
			t.Fatalf("versions %v: an orphan stayed", got)
		}
		_, err = bob.store.Get(ctx, 3)
		wantErr(t, err, ErrNotFound)
		hist, err := bob.kv.History(ctx, VersionKey(3))
		if err != nil || len(hist) != 1 || hist[0].Operation() != jetstream.KeyValuePurge {
			t.Fatalf("version.3 history: %v %v: want only a purge marker", hist, err)
		}
		// Its number is not reused.
		v4, err := alice.store.Activate(ctx, doc(4), Meta{By: "alice"}, vb.ActiveRevision)
		if err != nil || v4.Version != 4 || v4.Replaces != 2 {
			t.Fatalf("next activation: %+v %v", v4, err)
		}
		if active, err := bob.store.Active(ctx); err != nil || active.Version != 4 {
			t.Fatalf("active %+v %v", active, err)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		s := startServer(t)
		a, b := join(t, s.ClientURL()), join(t, s.ClientURL())
		cur, err := a.store.Import(ctx, doc(1), Meta{By: "proxy"})
		if err != nil {
			t.Fatal(err)
		}
		nodes := []*node{a, b}
		wins := []uint64{cur.Version}
		for round := range 10 {
			base := cur.ActiveRevision
			var mu sync.Mutex
			errs := race(2, func(i int) error {
				v, err := nodes[i].store.Activate(ctx, doc(100*round+i+2), Meta{By: fmt.Sprint(i)}, base)
				if err == nil {
					mu.Lock()
					cur = v
					mu.Unlock()
				}
				return err
			})
			if (errs[0] == nil) == (errs[1] == nil) {
				t.Fatalf("round %d: %v", round, errs)
			}
			for _, err := range errs {
				if err != nil {
					wantErr(t, err, ErrConflict)
				}
			}
			wins = append(wins, cur.Version)
		}
		slices.Reverse(wins)
		if got := numbers(t, a.store); !slices.Equal(got, wins) {
			t.Fatalf("versions %v, want the winners %v", got, wins)
		}
	})
}

// TestNoActive: writes and reads without an active version.
func TestNoActive(t *testing.T) {
	s := startServer(t)
	n := join(t, s.ClientURL())
	ctx := ctxFor(t)
	_, err := n.store.Active(ctx)
	wantErr(t, err, ErrNoActive)
	_, err = n.store.Edit(ctx, 0, Meta{By: "alice"}, func(d []byte) ([]byte, error) { return d, nil })
	wantErr(t, err, ErrNoActive)
	_, err = n.store.Activate(ctx, doc(1), Meta{By: "alice"}, 7)
	wantErr(t, err, ErrConflict)
	if got := numbers(t, n.store); len(got) != 0 {
		t.Fatalf("versions %v", got)
	}
	// Base 0 with nothing active creates the pointer.
	v, err := n.store.Activate(ctx, doc(1), Meta{By: "alice"}, 0)
	if err != nil || v.Version != 1 || v.Source != SourceActivate || v.Replaces != 0 {
		t.Fatalf("%+v %v", v, err)
	}
}

// TestInvalidNeverWritten: nothing is written for a document that is not
// well formed or fails validation, whatever the path.
func TestInvalidNeverWritten(t *testing.T) {
	s := startServer(t)
	n := join(t, s.ClientURL())
	ctx := ctxFor(t)
	bad := []byte(strings.Replace(string(doc(1)), "type: openai", "type: INVALID", 1))
	_, err := n.store.Import(ctx, bad, Meta{By: "proxy"})
	wantErr(t, err, ErrInvalid)
	if lastSeq(t, n.kv) != 0 {
		t.Fatal("an invalid import wrote something")
	}
	v1, err := n.store.Import(ctx, doc(1), Meta{By: "proxy"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		write func() error
		want  string
	}{
		{"fails validation", func() error {
			_, err := n.store.Activate(ctx, bad, Meta{By: "alice"}, 0)
			return err
		}, `config version 2: providers[0].type: unknown type "INVALID"`},
		{"process key", func() error {
			_, err := n.store.Activate(ctx, []byte("log:\n  level: debug\n"), Meta{By: "alice"}, 0)
			return err
		}, "log: not part of the routing configuration"},
		{"not a mapping", func() error {
			_, err := n.store.Activate(ctx, []byte("- providers\n"), Meta{By: "alice"}, 0)
			return err
		}, "not a mapping"},
		{"not YAML", func() error {
			_, err := n.store.Activate(ctx, []byte("providers: ["), Meta{By: "alice"}, 0)
			return err
		}, "not a YAML or JSON document"},
		{"empty", func() error {
			_, err := n.store.Activate(ctx, []byte("\n"), Meta{By: "alice"}, 0)
			return err
		}, "empty document"},
		{"nobody", func() error {
			_, err := n.store.Activate(ctx, doc(2), Meta{}, 0)
			return err
		}, "the writer (by) must be named"},
		{"edit makes it invalid", func() error {
			_, err := n.store.Edit(ctx, 0, Meta{By: "alice"}, func(d []byte) ([]byte, error) {
				return []byte(strings.Replace(string(d), "gpt-4o-mini}", "INVALID}", 1)), nil
			})
			return err
		}, "config version 2: providers[0].type"},
		{"edit fails", func() error {
			_, err := n.store.Edit(ctx, 0, Meta{By: "alice"}, func(d []byte) ([]byte, error) {
				return SetKeyField(d, "openai", "k1", "weight", "heavy")
			})
			return err
		}, "edit config version 1: routingdoc: invalid configuration document: providers.openai.keys.k1.weight: want an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := lastSeq(t, n.kv)
			err := tt.write()
			wantErr(t, err, ErrInvalid)
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if lastSeq(t, n.kv) != before {
				t.Fatal("an invalid write wrote something")
			}
		})
	}
	if active, err := n.store.Active(ctx); err != nil || active.Version != 1 || active.ActiveRevision != v1.ActiveRevision {
		t.Fatalf("active %+v %v", active, err)
	}
}

// TestValidateWithLoadDocument: the validator the services pass (a
// closure over config.LoadDocument) keeps inline secrets out of the
// bucket, without quoting them.
func TestValidateWithLoadDocument(t *testing.T) {
	env := []string{"OPENAI_API_KEY=sk-test-secret"}
	validate := func(doc []byte, name string) error {
		_, err := config.LoadDocument("", env, doc, name)
		return err
	}
	s := startServer(t)
	n := join(t, s.ClientURL(), WithValidate(validate))
	ctx := ctxFor(t)
	if _, err := n.store.Import(ctx, doc(1), Meta{By: "proxy"}); err != nil {
		t.Fatal(err)
	}
	inline := []byte(strings.Replace(string(doc(2)), "env:OPENAI_API_KEY", "sk-live-0123456789abcdefgh", 1))
	_, err := n.store.Activate(ctx, inline, Meta{By: "alice"}, 0)
	wantErr(t, err, ErrInvalid)
	if !strings.Contains(err.Error(), "config version 2: providers[0].keys[0].secret: secrets are referenced") ||
		strings.Contains(err.Error(), "sk-live") {
		t.Fatalf("err = %v", err)
	}
	missing := []byte(strings.Replace(string(doc(2)), "env:OPENAI_API_KEY", "env:NOT_SET_ANYWHERE", 1))
	_, err = n.store.Activate(ctx, missing, Meta{By: "alice"}, 0)
	wantErr(t, err, ErrInvalid)
	if got := numbers(t, n.store); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("versions %v", got)
	}
}

// TestRollback: a stored version's document activated again, as a new
// version that records its source.
func TestRollback(t *testing.T) {
	s := startServer(t)
	at := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	n := join(t, s.ClientURL(), WithClock(func() time.Time { return at }))
	ctx := ctxFor(t)
	if _, err := n.store.Import(ctx, doc(1), Meta{By: "proxy"}); err != nil {
		t.Fatal(err)
	}
	v2, err := n.store.Activate(ctx, doc(2), Meta{By: "alice", Comment: "heavier"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	v3, err := n.store.Rollback(ctx, 1, Meta{By: "bob", Comment: "back"}, v2.ActiveRevision)
	if err != nil {
		t.Fatal(err)
	}
	if v3.Version != 3 || v3.Source != SourceRollback || v3.FromVersion != 1 || v3.Replaces != 2 ||
		v3.Document != string(doc(1)) || v3.SHA256 != Sum(doc(1)) || v3.By != "bob" || v3.Comment != "back" || !v3.At.Equal(at) {
		t.Fatalf("rollback %+v", v3)
	}
	active, err := n.store.Active(ctx)
	if err != nil || active.Version != 3 || active.ActiveRevision != v3.ActiveRevision {
		t.Fatalf("active %+v %v", active, err)
	}
	_, err = n.store.Rollback(ctx, 1, Meta{By: "bob"}, 0)
	wantErr(t, err, ErrUnchanged)
	_, err = n.store.Activate(ctx, doc(1), Meta{By: "bob"}, 0)
	wantErr(t, err, ErrUnchanged)
	_, err = n.store.Rollback(ctx, 99, Meta{By: "bob"}, 0)
	wantErr(t, err, ErrNotFound)
	_, err = n.store.Rollback(ctx, 2, Meta{By: "bob"}, v2.ActiveRevision)
	wantErr(t, err, ErrConflict)
}

// TestEdit: a small edit of the active version, as a new version.
func TestEdit(t *testing.T) {
	s := startServer(t)
	n := join(t, s.ClientURL())
	ctx := ctxFor(t)
	v1, err := n.store.Import(ctx, doc(1), Meta{By: "proxy"})
	if err != nil {
		t.Fatal(err)
	}
	weight := func(w int) func([]byte) ([]byte, error) {
		return func(d []byte) ([]byte, error) { return SetKeyField(d, "openai", "k1", "weight", w) }
	}
	v2, err := n.store.Edit(ctx, v1.ActiveRevision, Meta{By: "alice", Comment: "more to k1"}, weight(3))
	if err != nil {
		t.Fatal(err)
	}
	if v2.Version != 2 || v2.Source != SourceEdit || v2.FromVersion != 1 || v2.Replaces != 1 ||
		v2.Edit != "providers.openai.keys.k1.weight: 1 -> 3" || !strings.Contains(v2.Document, "weight: 3") {
		t.Fatalf("edit %+v", v2)
	}
	v3, err := n.store.Edit(ctx, 0, Meta{By: "alice", Edit: "switch the only step off"}, func(d []byte) ([]byte, error) {
		return SetStepActive(d, "default", 0, false)
	})
	if err != nil || v3.Edit != "switch the only step off" || v3.FromVersion != 2 {
		t.Fatalf("%+v %v", v3, err)
	}
	_, err = n.store.Edit(ctx, 0, Meta{By: "alice"}, weight(3))
	wantErr(t, err, ErrUnchanged)
	_, err = n.store.Edit(ctx, v2.ActiveRevision, Meta{By: "alice"}, weight(4))
	wantErr(t, err, ErrConflict)
	_, err = n.store.Edit(ctx, 0, Meta{By: "alice"}, func(d []byte) ([]byte, error) {
		return SetStepActive(d, "cheap", 0, false)
	})
	wantErr(t, err, ErrNotFound)
	if !strings.Contains(err.Error(), `edit config version 3: routingdoc: not found: chain "cheap" (chains: default)`) {
		t.Fatalf("err = %v", err)
	}
}

// TestList: the history, newest first, without documents.
func TestList(t *testing.T) {
	s := startServer(t)
	at := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	n := join(t, s.ClientURL(), WithClock(func() time.Time { return at }))
	ctx := ctxFor(t)
	if vs, err := n.store.List(ctx); err != nil || len(vs) != 0 {
		t.Fatalf("empty bucket: %v %v", vs, err)
	}
	if _, err := n.store.Import(ctx, doc(1), Meta{By: "proxy-a", Comment: "from gateway.yaml"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.store.Activate(ctx, doc(2), Meta{By: "alice", Comment: "api_key=sk-live-0123456789abcdefghij"}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := n.store.Rollback(ctx, 1, Meta{By: "bob"}, 0); err != nil {
		t.Fatal(err)
	}
	vs, err := n.store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		n      uint64
		by     string
		source Source
		from   uint64
	}{{3, "bob", SourceRollback, 1}, {2, "alice", SourceActivate, 0}, {1, "proxy-a", SourceImport, 0}}
	if len(vs) != len(want) {
		t.Fatalf("%d versions", len(vs))
	}
	for i, w := range want {
		v := vs[i]
		if v.Version != w.n || v.By != w.by || v.Source != w.source || v.FromVersion != w.from || v.Document != "" ||
			v.SHA256 == "" || !v.At.Equal(at) || v.Revision == 0 {
			t.Errorf("version %d: %+v", w.n, v)
		}
	}
	if vs[2].Comment != "from gateway.yaml" || strings.Contains(vs[1].Comment, "sk-live") {
		t.Errorf("comments %q, %q: kept, secrets masked", vs[2].Comment, vs[1].Comment)
	}
	if got, err := n.store.Get(ctx, 2); err != nil || got.Document != string(doc(2)) {
		t.Fatalf("Get: %+v %v", got, err)
	}
}

// TestWatch: two watchers get the active version, then every change, in
// order; a pointer to a version that cannot be read is skipped.
func TestWatch(t *testing.T) {
	s := startServer(t)
	var skipsMu sync.Mutex
	var skips []string
	onSkip := WithOnSkip(func(err error) {
		skipsMu.Lock()
		skips = append(skips, err.Error())
		skipsMu.Unlock()
	})
	a, b := join(t, s.ClientURL(), onSkip), join(t, s.ClientURL())
	ctx := ctxFor(t)
	early := watch(t, a.store) // before anything is imported
	if _, err := a.store.Import(ctx, doc(1), Meta{By: "proxy"}); err != nil {
		t.Fatal(err)
	}
	early.waitFor(t, 1)
	late := watch(t, b.store)
	late.waitFor(t, 1)

	v2, err := b.store.Activate(ctx, doc(2), Meta{By: "alice"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	v3, err := b.store.Edit(ctx, v2.ActiveRevision, Meta{By: "alice"}, func(d []byte) ([]byte, error) {
		return SetStepActive(d, "default", 0, false)
	})
	if err != nil {
		t.Fatal(err)
	}
	v4, err := a.store.Rollback(ctx, 1, Meta{By: "bob"}, v3.ActiveRevision)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []*applied{early, late} {
		w.waitFor(t, 1, 2, 3, 4)
		if got := w.last(); got.ActiveRevision != v4.ActiveRevision || got.Document != string(doc(1)) || got.Source != SourceRollback {
			t.Fatalf("last applied %+v", got)
		}
	}

	// A pointer put by hand to a version that is corrupt, then to one that
	// does not exist: skipped, the last applied stays, later ones apply.
	corrupt := Version{V: SchemaVersion, Version: 50, Document: string(doc(5)), SHA256: "0000", By: "mallory", Source: SourceActivate}
	if _, err := a.kv.Create(ctx, VersionKey(50), mustJSON(corrupt)); err != nil {
		t.Fatal(err)
	}
	rev := v4.ActiveRevision
	for _, n := range []uint64{50, 60} {
		if rev, err = a.kv.Update(ctx, KeyActive, mustJSON(Pointer{V: SchemaVersion, Version: n, By: "mallory"}), rev); err != nil {
			t.Fatal(err)
		}
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		skipsMu.Lock()
		defer skipsMu.Unlock()
		if len(skips) != 2 {
			return fmt.Errorf("skips %q", skips)
		}
		return nil
	})
	if !strings.Contains(skips[0], "names config version 50: routingdoc: invalid configuration document: routingdoc: version.50 (revision") ||
		!strings.Contains(skips[0], "does not match its sha256") || !strings.Contains(skips[1], "not found: config version 60") {
		t.Fatalf("skips %q", skips)
	}
	v, err := b.store.Activate(ctx, doc(6), Meta{By: "alice"}, rev)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []*applied{early, late} {
		w.waitFor(t, 1, 2, 3, 4, v.Version)
	}
	if v.Version != 51 || v.Replaces != 60 {
		t.Fatalf("after the broken pointer: %+v", v)
	}
}

// TestUnbound: a Store without its bucket fails fast, and its Watch waits
// for Bind.
func TestUnbound(t *testing.T) {
	s := startServer(t)
	n := join(t, s.ClientURL())
	ctx := ctxFor(t)
	if _, err := n.store.Import(ctx, doc(1), Meta{By: "proxy"}); err != nil {
		t.Fatal(err)
	}
	u := NewUnbound(n.nc, testLog())
	_, err := u.Active(ctx)
	wantErr(t, err, ErrUnavailable)
	_, err = u.Activate(ctx, doc(2), Meta{By: "alice"}, 0)
	wantErr(t, err, ErrUnavailable)
	w := watch(t, u)
	select {
	case <-u.Bound():
		t.Fatal("bound")
	default:
	}
	u.Bind(n.kv)
	w.waitFor(t, 1)
}

// TestEvents: each write that moves the pointer is an event on
// switchyard.events.config.<source>.
func TestEvents(t *testing.T) {
	s := startServer(t)
	n := join(t, s.ClientURL())
	events := subscribeEvents(t, n)
	ctx := ctxFor(t)
	v1, err := n.store.Import(ctx, doc(1), Meta{By: "proxy"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.store.Activate(ctx, doc(2), Meta{By: "alice", Comment: "c"}, v1.ActiveRevision); err != nil {
		t.Fatal(err)
	}
	if _, err := n.store.Activate(ctx, doc(3), Meta{By: "late"}, v1.ActiveRevision); !errors.Is(err, ErrConflict) {
		t.Fatal(err)
	}
	if _, err := n.store.Rollback(ctx, 1, Meta{By: "bob"}, 0); err != nil {
		t.Fatal(err)
	}
	v4, err := n.store.Edit(ctx, 0, Meta{By: "carol"}, func(d []byte) ([]byte, error) {
		return SetKeyField(d, "openai", "k1", "priority", 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		subject string
		version uint64
		by      string
		from    uint64
	}{
		{"switchyard.events.config.import", 1, "proxy", 0},
		{"switchyard.events.config.activate", 2, "alice", 0},
		{"switchyard.events.config.rollback", 3, "bob", 1},
		{"switchyard.events.config.edit", 4, "carol", 3},
	}
	for _, w := range want {
		ev := events.next(t)
		if ev.subject != w.subject || ev.Version != w.version || ev.By != w.by || ev.FromVersion != w.from ||
			ev.Kind != EventKind || ev.V != SchemaVersion || ev.ActiveRevision == 0 {
			t.Fatalf("event %+v, want %+v", ev, w)
		}
	}
	if last := events.last; last.Edit != v4.Edit || last.ActiveRevision != v4.ActiveRevision || last.Replaces != 3 {
		t.Fatalf("edit event %+v", last)
	}
	events.none(t, n)
}

// eventSub reads configuration events.
type eventSub struct {
	nc   *nats.Conn
	sub  *nats.Subscription
	ch   chan subjectEvent
	read int
	last subjectEvent
}

type subjectEvent struct {
	Event
	subject string
}

func subscribeEvents(tb testing.TB, n *node) *eventSub {
	tb.Helper()
	es := &eventSub{nc: n.nc, ch: make(chan subjectEvent, 64)}
	sub, err := n.nc.Subscribe(EventsFilter, func(m *nats.Msg) {
		var ev Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			tb.Errorf("event %s: %v", m.Data, err)
			return
		}
		es.ch <- subjectEvent{ev, m.Subject}
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := n.nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	es.sub = sub
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	return es
}

func (es *eventSub) next(tb testing.TB) subjectEvent {
	tb.Helper()
	select {
	case ev := <-es.ch:
		es.last = ev
		es.read++
		return ev
	case <-time.After(5 * time.Second):
		tb.Fatal("no config event")
	}
	return subjectEvent{}
}

// none checks that no event arrived beyond those read. Flushing the
// publishers' connections, then the subscriber's, brings in whatever they
// published: the subscription has then received it (delivered or
// pending).
func (es *eventSub) none(tb testing.TB, publishers ...*node) {
	tb.Helper()
	for _, n := range publishers {
		if err := n.nc.Flush(); err != nil {
			tb.Fatal(err)
		}
	}
	if err := es.nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	// nats.go counts a message pending until its callback has returned,
	// and delivered from before the callback: wait for pending to drain
	// (the callback never blocks) and count the delivered ones.
	testkit.CheckFor(tb, 5*time.Second, time.Millisecond, func() error {
		pending, _, err := es.sub.Pending()
		if err == nil && pending > 0 {
			err = fmt.Errorf("%d events pending", pending)
		}
		return err
	})
	delivered, err := es.sub.Delivered()
	if err != nil {
		tb.Fatal(err)
	}
	if got := int(delivered); got != es.read {
		var extra []string
		for len(es.ch) > 0 {
			ev := <-es.ch
			extra = append(extra, fmt.Sprintf("%s version %d by %s", ev.subject, ev.Version, ev.By))
		}
		tb.Fatalf("%d config events, want %d (unread: %v)", got, es.read, extra)
	}
}

// TestCancelled: a write whose context has ended fails without writing.
func TestCancelled(t *testing.T) {
	s := startServer(t)
	n := join(t, s.ClientURL())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := n.store.Import(ctx, doc(1), Meta{By: "proxy"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if lastSeq(t, n.kv) != 0 {
		t.Fatal("wrote with a cancelled context")
	}
}
