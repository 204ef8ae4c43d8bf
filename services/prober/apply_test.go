package prober

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/credentials"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// applyBase is the file of the apply tests: the process settings (with
// the variables the versions name allowed); the routing configuration
// comes from documents (LoadDocument), as it will from the fleet's
// versions.
const applyBase = `
credentials:
  references:
    env_prefixes: [K]
prober:
  check_interval: 300ms
  recheck_interval: 100ms
  jitter: 0
  lease_ttl: 1s
  check_timeout: 900ms
  settle_interval: 50ms
`

// startFake starts one more fake provider for the test.
func startFake(t *testing.T, name string) *fakeprovider.Server {
	t.Helper()
	fake, err := fakeprovider.Start(fakeprovider.Options{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	return fake
}

// version loads a routing document over the file base as version n, the
// way a version activated in NATS is loaded.
func version(t *testing.T, base, doc string, n int, moreEnv ...string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadDocument(path, append(append([]string(nil), env...), moreEnv...), []byte(doc), fmt.Sprintf("config version %d", n))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// readyzVersion is the routing_version of a replica's /readyz.
func readyzVersion(r *replica) (int, error) {
	resp, err := http.Get(r.base + "/readyz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		RoutingVersion *int `json:"routing_version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	if body.RoutingVersion == nil {
		return 0, errors.New("/readyz has no routing_version")
	}
	return *body.RoutingVersion, nil
}

// leaseOps follows one lease key and counts its deletions.
type leaseOps struct {
	mu      sync.Mutex
	deletes int
	puts    int
}

func watchLease(t *testing.T, kv jetstream.KeyValue, key string) *leaseOps {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := kv.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ops := &leaseOps{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			ops.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				ops.puts++
			} else {
				ops.deletes++
			}
			ops.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = w.Stop(); cancel(); <-done })
	return ops
}

func (o *leaseOps) counts() (puts, deletes int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.puts, o.deletes
}

func wantGone(kv jetstream.KeyValue, key string) func() error {
	return func() error {
		_, err := kv.Get(context.Background(), key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("%s still in %s", key, kv.Bucket())
	}
}

func wantLease(kv jetstream.KeyValue, key, owner string) func() error {
	return func() error {
		e, err := kv.Get(context.Background(), key)
		if err != nil {
			return fmt.Errorf("lease %s: %w", key, err)
		}
		if string(e.Value()) != owner {
			return fmt.Errorf("lease %s held by %q, want %q", key, e.Value(), owner)
		}
		return nil
	}
}

// TestApplyRoutingVersion: a routing configuration applied at runtime
// adds a provider (it is checked and gets a health record), removes one
// (its unit stops: its lease and health record are deleted and its
// provider is not called any more), replaces a per-key provider's key (the
// old key's unit stops, the new key's starts) and leaves one unchanged
// (its checks keep their schedule and its lease is never deleted). A
// configuration that does not build is refused and the one in use stays.
func TestApplyRoutingVersion(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "pk"})
	keep, gone, added := startFake(t, "keep"), startFake(t, "gone"), startFake(t, "added")
	urls := strings.NewReplacer("{{KEEP}}", keep.URL(), "{{GONE}}", gone.URL(), "{{ADDED}}", added.URL(), "{{PK}}", f.fake.URL())
	const keepProvider = `
  - name: keep
    type: openai-compatible
    base_url: {{KEEP}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: m1}]
    health_check: {path: /models, interval: 1s}
`
	// keep's interval is three lease renewals (lease_ttl/3) long: a check
	// run off schedule by the apply would show as a shorter gap.
	const keepInterval = time.Second
	v1 := version(t, applyBase, urls.Replace(`
providers:`+keepProvider+`
  - name: gone
    type: openai
    base_url: {{GONE}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
  - name: pk
    type: openai
    base_url: {{PK}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
    health_check: {per_key: true}
`), 1)
	v2 := version(t, applyBase, urls.Replace(`
providers:`+keepProvider+`
  - name: pk
    type: openai
    base_url: {{PK}}/v1
    keys: [{id: k2, secret: env:K2}]
    models: [{name: gpt-4o-mini}]
    health_check: {per_key: true}
  - name: added
    type: openai
    base_url: {{ADDED}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
`), 2)

	r := f.startProber(t, v1)
	inst := r.svc.Instance()
	for _, want := range []func() error{
		wantHealth(f, "keep", "", health.Healthy), wantHealth(f, "gone", "", health.Healthy),
		wantHealth(f, "pk", "k1", health.Healthy), wantHealth(f, "pk", "", health.Healthy),
		wantLease(f.res.Leases, "check.gone", inst), wantLease(f.res.Leases, "check.pk.k1", inst),
	} {
		testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, want)
	}
	if v, err := readyzVersion(r); err != nil || v != 0 {
		t.Fatalf("/readyz routing_version = %d, %v before any version was applied, want 0", v, err)
	}
	keepCalls := func() []fakeprovider.Call { return keep.Calls() }
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := len(keepCalls()); n < 2 {
			return fmt.Errorf("%d checks of keep so far", n)
		}
		return nil
	})
	keepLease := watchLease(t, f.res.Leases, "check.keep")

	applied := time.Now()
	if err := r.svc.Apply(v2, 2); err != nil {
		t.Fatal(err)
	}
	if got := r.svc.RoutingVersion(); got != 2 {
		t.Fatalf("RoutingVersion() = %d after Apply(v2, 2)", got)
	}

	// The removed provider: unit stopped, lease released, record deleted.
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantGone(f.res.Leases, "check.gone"))
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantGone(f.res.Health, "gone._"))
	goneAfter := len(gone.Calls())
	// The added provider: checked, recorded, its lease ours.
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, "added", "", health.Healthy))
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantLease(f.res.Leases, "check.added", inst))
	if len(added.Calls()) == 0 {
		t.Fatal("added provider never called")
	}
	// The replaced key: k1's unit stopped (lease and record gone), k2's
	// checks run with k2's secret; the provider record stays.
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, "pk", "k2", health.Healthy))
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantLease(f.res.Leases, "check.pk.k2", inst))
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantGone(f.res.Leases, "check.pk.k1"))
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantGone(f.res.Health, "pk.k1"))
	if _, err := f.healthRecord("pk", ""); err != nil {
		t.Fatalf("pk's provider record: %v", err)
	}
	if f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Key == "secret-two" }) == 0 {
		t.Fatal("no check with k2's secret")
	}
	k1Calls := f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Key == "secret-one" })

	// Let the unchanged unit run well past the apply: 3 more intervals.
	testkit.WaitFor(t, 10*time.Second, func() bool { return time.Since(applied) > 3*keepInterval+keepInterval/2 })
	if n := len(gone.Calls()); n != goneAfter {
		t.Errorf("the removed provider was called %d times after its lease went", n-goneAfter)
	}
	if n := f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Key == "secret-one" }); n != k1Calls {
		t.Errorf("the removed key was used %d times after its lease went", n-k1Calls)
	}
	// Unchanged: consecutive checks stay an interval apart across the
	// apply, as many as the window holds, and the lease was renewed, never
	// deleted or taken anew.
	calls := keepCalls()
	var around []fakeprovider.Call
	for _, c := range calls {
		if c.At.After(applied.Add(-keepInterval)) {
			around = append(around, c)
		}
	}
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].At.Sub(calls[i-1].At); gap < keepInterval-50*time.Millisecond {
			t.Errorf("checks of keep %d and %d only %s apart (apply at %s): an extra check",
				i-1, i, gap, applied.Format("15:04:05.000"))
		}
	}
	if limit := int(time.Since(applied.Add(-keepInterval))/keepInterval) + 1; len(around) > limit {
		t.Errorf("%d checks of keep since one interval before the apply, at most %d expected", len(around), limit)
	}
	if len(around) < 3 {
		t.Errorf("only %d checks of keep around the apply: its unit stopped?", len(around))
	}
	puts, deletes := keepLease.counts()
	if deletes != 0 {
		t.Errorf("keep's lease deleted %d times around the apply", deletes)
	}
	if puts == 0 {
		t.Error("keep's lease not renewed around the apply")
	}
	if err := wantLease(f.res.Leases, "check.keep", inst)(); err != nil {
		t.Error(err)
	}

	// A configuration that does not build is refused; version 2 stays.
	bad := *v2
	bad.Providers = append(append([]config.Provider(nil), v2.Providers...), v2.Providers[0])
	if err := r.svc.Apply(&bad, 3); err == nil || !strings.Contains(err.Error(), "configured twice") {
		t.Fatalf("Apply of a configuration naming keep twice: %v", err)
	}
	if got := r.svc.RoutingVersion(); got != 2 {
		t.Fatalf("RoutingVersion() = %d after a refused version", got)
	}
	testkit.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		v, err := readyzVersion(r)
		if err == nil && v != 2 {
			err = fmt.Errorf("/readyz routing_version = %d, want 2", v)
		}
		return err
	})
	if n := r.svc.units.count(); n != 3 {
		t.Fatalf("%d units run after the refused version, want 3 (keep, pk.k2, added)", n)
	}
}

// TestApplyKeepsRotatedSecrets: a key's secret rotated through the admin
// API still wins over the configured one once a new routing configuration
// is applied, for a key that was configured already and for a key that
// only the new configuration adds (rotated before it was).
func TestApplyKeepsRotatedSecrets(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1", Keys: []string{"rotated-1", "rotated-2"}})
	const credKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	base := strings.Replace(applyBase, "credentials:\n", "credentials:\n  encryption_key: env:CRED_KEY\n", 1)
	doc := func(keys string) string { return p1Doc(f, keys, "    health_check: {per_key: true}\n") }
	v1 := version(t, base, doc("{id: k1, secret: env:K1}"), 1, "CRED_KEY="+credKey)
	v2 := version(t, base, doc("{id: k1, secret: env:K1}, {id: k2, secret: env:K2}"), 2, "CRED_KEY="+credKey)
	box, err := credentials.NewBox(v1.Credentials.Key)
	if err != nil {
		t.Fatal(err)
	}
	for id, secret := range map[string]string{"k1": "rotated-1", "k2": "rotated-2"} {
		if _, _, err := credentials.Put(context.Background(), f.res.Credentials, box, "p1", id, config.NewSecret(secret), "test"); err != nil {
			t.Fatal(err)
		}
	}
	r := f.startProber(t, v1)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, "p1", "k1", health.Healthy))
	if err := r.svc.Apply(v2, 2); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, "p1", "k2", health.Healthy))
	after := len(f.fake.Calls())
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Key == "rotated-1" }); n < 3 {
			return fmt.Errorf("%d checks with k1's rotated secret", n)
		}
		if n := len(f.fake.Calls()); n < after+4 {
			return fmt.Errorf("%d calls since k2 turned healthy", n-after)
		}
		return nil
	})
	for _, s := range []string{"secret-one", "secret-two"} {
		if n := len(f.fake.CallsFor(s)); n != 0 {
			t.Errorf("%d checks sent the configured secret %s over the rotated one", n, s)
		}
	}
	for _, k := range []string{"k1", "k2"} {
		if err := wantHealth(f, "p1", k, health.Healthy)(); err != nil {
			t.Error(err)
		}
	}
}

// TestApplyChangedCheck: a unit whose check changed (here its path) keeps
// its lease and is checked at once with the new check, not an interval
// later.
func TestApplyChangedCheck(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	f.fake.AddRule(fakeprovider.Rule{Path: "/v1/ping", Status: 404}) // expected: the check passes
	doc := func(path string) string {
		return strings.ReplaceAll(`
providers:
  - name: p1
    type: openai-compatible
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: m1}]
    health_check: {path: `+path+`, interval: 1h, expected_statuses: [200, 404]}
`, "{{URL}}", f.fake.URL())
	}
	r := f.startProber(t, version(t, applyBase, doc("/models"), 1))
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, "p1", "", health.Healthy))
	lease := watchLease(t, f.res.Leases, "check.p1")
	if err := r.svc.Apply(version(t, applyBase, doc("/ping"), 2), 2); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		h, err := f.healthRecord("p1", "")
		if err != nil {
			return err
		}
		if h.Check == nil || h.Check.Path != "/ping" || h.Status != health.Healthy {
			return fmt.Errorf("record check %+v, status %s", h.Check, h.Status)
		}
		return nil
	})
	if n := f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Path == "/v1/ping" }); n != 1 {
		t.Fatalf("%d checks on the new path, want 1", n)
	}
	if _, deletes := lease.counts(); deletes != 0 {
		t.Fatalf("the lease was deleted %d times", deletes)
	}
	if err := wantLease(f.res.Leases, "check.p1", r.svc.Instance())(); err != nil {
		t.Fatal(err)
	}
}

// count is the number of units running (for the tests).
func (us *unitSet) count() int {
	us.mu.Lock()
	defer us.mu.Unlock()
	return len(us.running)
}

// TestReloadUnderAVersion: under a fleet routing version, a SIGHUP reload
// of the file gives a key the file's secret only where the version refers
// to the same secret; the version decides which keys exist.
func TestReloadUnderAVersion(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	doc := func(keys string) string { return p1Doc(f, keys, "") }
	v1 := version(t, applyBase, doc("{id: k1, secret: env:K1}"), 1)
	v2 := version(t, applyBase, doc("{id: k1, secret: env:K2}"), 2)
	r := f.startProber(t, v1)
	if err := r.svc.Apply(v2, 2); err != nil {
		t.Fatal(err)
	}
	file := version(t, applyBase, doc("{id: k1, secret: env:K1}, {id: k9, secret: env:K1}"), 0, "K1=stale-file-secret")
	w := r.svc.ReloadSecrets(context.Background(), file)
	cur, _ := r.svc.routing().targets["p1"].keyByID("k1")
	if got := r.svc.secrets.of("p1", cur).Reveal(); got != "secret-two" {
		t.Fatalf("k1 sends %q, want the version's secret-two", got)
	}
	if len(w) != 1 || !strings.Contains(w[0], "key k1") || !strings.Contains(w[0], "env:K2") {
		t.Fatalf("warnings %q, want one about k1", w)
	}
}

// p1Doc is a routing document with one provider, p1 at the fixture's fake,
// its keys (YAML flow items) and more of its fields (YAML lines).
func p1Doc(f *fixture, keys, more string) string {
	return strings.ReplaceAll(`
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [`+keys+`]
    models: [{name: gpt-4o-mini}]
`+more, "{{URL}}", f.fake.URL())
}

// TestReloadAfterAVersionKeepsRotation: a file secret noted at a reload
// the version did not take (it referred to the key's secret otherwise) is
// not taken for a change at the next reload of the same file, after a
// version that refers to it and a rotation: the rotation stands.
func TestReloadAfterAVersionKeepsRotation(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	doc := func(keys string) string { return p1Doc(f, keys, "") }
	r := f.startProber(t, version(t, applyBase, doc("{id: k1, secret: env:K1}"), 1))
	if err := r.svc.Apply(version(t, applyBase, doc("{id: k1, secret: env:K2}"), 2), 2); err != nil {
		t.Fatal(err)
	}
	file := version(t, applyBase, doc("{id: k1, secret: env:K3}"), 0, "K3=file-new")
	if w := r.svc.ReloadSecrets(context.Background(), file); len(w) != 1 {
		t.Fatalf("warnings %q, want one: the version refers to k1 otherwise", w)
	}
	if err := r.svc.Apply(version(t, applyBase, doc("{id: k1, secret: env:K3}"), 3, "K3=file-new"), 3); err != nil {
		t.Fatal(err)
	}
	r.svc.secrets.m.Store("p1/k1", override{secret: config.NewSecret("rotated")}) // what a rotation does
	r.svc.ReloadSecrets(context.Background(), file)
	k1, _ := r.svc.routing().targets["p1"].keyByID("k1")
	if got := r.svc.secrets.of("p1", k1).Reveal(); got != "rotated" {
		t.Fatalf("k1 checks with %q after reloading an unchanged file, want its rotated secret", got)
	}
}
