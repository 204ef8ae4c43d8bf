package routingdoc

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"
)

// TestFollow: the first process imports its file's routing as version 1
// (a second one uses it), and every process applies the active version
// and those activated after it; a version that does not load is reported
// and the applied one stays.
func TestFollow(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	file := "proxy:\n  listen: 127.0.0.1:9999\nproviders:\n  - name: openai\n    type: openai\n    keys: [{id: k1, secret: env:FOLLOW_TEST_KEY}]\n    models: [{name: gpt-4o-mini}]\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"FOLLOW_TEST_KEY=sk-follow"}
	base, err := config.Load(path, env)
	if err != nil {
		t.Fatal(err)
	}
	type applied struct {
		version uint64
		models  int
	}
	follow := func(ctx context.Context, n *node, got chan<- applied, failed chan<- uint64, loaded chan<- struct{}) {
		_ = Follow(ctx, n.store, FollowOptions{
			Base: base, Environ: env, Instance: "p", Log: testLog(),
			Apply: func(cfg *config.Config, v uint64) error {
				got <- applied{v, len(cfg.Providers[0].Models)}
				return nil
			},
			Loaded: func() { close(loaded) },
			Failed: func(v uint64, err error) {
				if err != nil {
					failed <- v
				}
			},
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	a, b := join(t, s.ClientURL()), join(t, s.ClientURL())
	gotA, gotB := make(chan applied, 8), make(chan applied, 8)
	failedA := make(chan uint64, 8)
	loadedA, loadedB := make(chan struct{}), make(chan struct{})
	wg.Go(func() { follow(ctx, a, gotA, failedA, loadedA) })
	wg.Go(func() { follow(ctx, b, gotB, make(chan uint64, 8), loadedB) })
	for _, ch := range []chan applied{gotA, gotB} {
		select {
		case v := <-ch:
			if v.version != 1 || v.models != 1 {
				t.Errorf("applied %+v, want the imported version 1", v)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the imported version was not applied")
		}
	}
	<-loadedA
	<-loadedB
	vs, err := a.store.List(ctx)
	if err != nil || len(vs) != 1 || vs[0].Source != SourceImport {
		t.Fatalf("versions %+v (%v), want one import", vs, err)
	}
	v1, err := a.store.Active(ctx)
	if err != nil {
		t.Fatal(err)
	}
	doc := []byte("providers:\n  - name: openai\n    type: openai\n    keys: [{id: k1, secret: env:FOLLOW_TEST_KEY}]\n    models: [{name: gpt-4o-mini}, {name: gpt-4o}]\n")
	v2, err := a.store.Activate(ctx, doc, Meta{By: "op"}, v1.ActiveRevision)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() bool {
		select {
		case v := <-gotA:
			return v.version == v2.Version && v.models == 2
		default:
			return false
		}
	})
	bad := []byte("providers:\n  - name: openai\n    type: openai\n    keys: [{id: k1, secret: env:NOT_ON_THIS_HOST}]\n    models: [{name: gpt-4o}]\n")
	v3, err := a.store.Activate(ctx, bad, Meta{By: "op"}, v2.ActiveRevision)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-failedA:
		if v != v3.Version {
			t.Errorf("failed version %d, want %d", v, v3.Version)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a version that does not load was not reported")
	}
}

// TestFollowUnreadableActive: an active version this build cannot read
// (a newer schema, as a newer release would write it during a rolling
// upgrade) is reported like one that does not load: the process knows
// where the fleet stands (Loaded) and says which version it could not
// apply (Failure), instead of waiting for ever.
func TestFollowUnreadableActive(t *testing.T) {
	s := startServer(t)
	n := join(t, s.ClientURL())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	v, err := n.store.Import(ctx, doc(1), Meta{By: "a"})
	if err != nil {
		t.Fatal(err)
	}
	newer := v
	newer.V, newer.Version = 2, 2
	b, _ := json.Marshal(newer)
	if _, err := n.kv.Create(ctx, VersionKey(2), b); err != nil {
		t.Fatal(err)
	}
	p, _ := json.Marshal(Pointer{V: 1, Version: 2, By: "newer-release"})
	if _, err := n.kv.Update(ctx, KeyActive, p, v.ActiveRevision); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte("proxy:\n  listen: 127.0.0.1:9999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker()
	wg.Go(func() {
		_ = tr.Follow(ctx, n.store, FollowOptions{Base: base, Environ: []string{"OPENAI_API_KEY=x"}, Log: testLog(),
			Apply: func(*config.Config, uint64) error { return nil }})
	})
	select {
	case <-tr.Loaded():
	case <-time.After(10 * time.Second):
		t.Fatal("not loaded 10 s after start with an unreadable active version")
	}
	if f := tr.Failure(); f == nil || f.Version != 2 || f.Error == "" {
		t.Fatalf("failure %+v, want version 2 reported", f)
	}
}
