package prober

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"

	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/fleet"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
	"switchyard.dev/tools/fakeprovider"
)

const fastProber = `
prober:
  check_interval: 200ms
  recheck_interval: 100ms
  jitter: 0
  unhealthy_after: 2
  lease_ttl: 1s
  check_timeout: 900ms
  settle_interval: 50ms
`

// TestOutageHeldByChecksAndReleased: with no proxy traffic at all, checks
// answering 503 make the provider unhealthy and trip its breaker (a
// provider-scope hold in switchyard_holds); when the provider answers
// again, the next passing check releases the hold and the record turns
// healthy.
func TestOutageHeldByChecksAndReleased(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	rule := f.fake.AddRule(fakeprovider.Rule{Path: "/v1/models", Status: 503})
	cfg := f.config(t, fastProber+`
resilience:
  breaker: {consecutive_failures: 3, cooldown: 30s}
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
`)
	sub, err := f.nc.SubscribeSync("switchyard.events.health.p1")
	if err != nil {
		t.Fatal(err)
	}
	f.startProber(t, cfg)

	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, "p1", "", health.Unhealthy))
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHold(f, "p1._", hold.StateHeld))
	rec, _ := f.holdRecord("p1._")
	if rec.Class != failure.Transient || rec.Scope.Kind != hold.ScopeProvider || rec.Source != hold.SourceBreaker {
		t.Fatalf("provider hold %+v", rec)
	}
	testkit.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		h, err := f.healthRecord("p1", "")
		if err != nil {
			return err
		}
		if h.CircuitState != health.CircuitOpen || h.LastStatus != 503 || h.CooldownUntil.IsZero() {
			return fmt.Errorf("record %+v", h)
		}
		return nil
	})
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no health event: %v", err)
	}
	if !strings.Contains(string(msg.Data), `"kind":"health"`) {
		t.Fatalf("event %s", msg.Data)
	}

	f.fake.RemoveRule(rule)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHold(f, "p1._", hold.StateReleased))
	testkit.CheckFor(t, 5*time.Second, 20*time.Millisecond, wantHealth(f, "p1", "", health.Healthy))
}

// TestOthersTripWaitsItsCooldown: a breaker hold another instance tripped
// (another prober replica here) is not released at once by this prober's
// passing checks, which release at once only the trips of their own: it
// waits out its cooldown and is probed like any.
func TestOthersTripWaitsItsCooldown(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
resilience:
  breaker: {consecutive_failures: 3, cooldown: 1h, max_cooldown: 2h}
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
`)
	other := f.member(t, cfg, "prober") // another prober replica
	for range 3 {
		other.Engine.Report("p1", "k1", "", false, hold.Outcome{Status: 503, Result: failure.Result{Class: failure.Transient, Code: "503"}})
	}
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, wantHold(f, "p1._", hold.StateHeld))

	f.startProber(t, cfg)
	checks := func() int {
		return f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Path == "/v1/models" })
	}
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := checks(); n < 3 {
			return fmt.Errorf("%d checks so far", n)
		}
		return nil
	})
	if err := wantHold(f, "p1._", hold.StateHeld)(); err != nil {
		t.Fatalf("after 3 passing checks of this prober: %v", err)
	}
}

// TestDueCredentialHoldSettledByProber: a key held as credential_rejected
// (by another instance) falls due; with no proxy traffic the prober takes
// the probe lease, lists models with that key once, and the hold is
// released.
func TestDueCredentialHoldSettledByProber(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
resilience:
  ladder:
    credential_rejected: {base: 1s, ceiling: 1m}
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys:
      - {id: k1, secret: env:K1, priority: 10}
      - {id: k2, secret: env:K2}
    models: [{name: gpt-4o-mini}]
    health_check: {interval: 1h}
`)
	// Another instance (a proxy, say) holds k1.
	other := f.otherInstance(t, cfg)
	other.Engine.Report("p1", "k1", "", false, hold.Outcome{Status: 401, Result: failure.Result{
		Class: failure.CredentialRejected, Scope: failure.ScopeKey, Code: "invalid_api_key", Reason: "invalid key"}})
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, wantHold(f, "p1.k1", hold.StateHeld))

	f.startProber(t, cfg)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHold(f, "p1.k1", hold.StateReleased))
	rec, _ := f.holdRecord("p1.k1")
	if !strings.HasPrefix(rec.RecordedBy, "prober-") {
		t.Fatalf("released by %q, want the prober", rec.RecordedBy)
	}
	k1Calls := func() int {
		return f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Key == "secret-one" })
	}
	// Exactly one check with k1, and it stays one.
	time.Sleep(300 * time.Millisecond) // let a second, wrong probe show up if there were one
	if n := k1Calls(); n != 1 {
		t.Fatalf("%d calls with k1, want exactly 1: %+v", n, f.fake.CallsFor("secret-one"))
	}
	if c := f.fake.CallsFor("secret-one")[0]; c.Method != http.MethodGet || c.Path != "/v1/models" {
		t.Fatalf("the settling check was %s %s, want GET /v1/models", c.Method, c.Path)
	}
}

// TestShutdownDuringSettleProbe: a prober stopped while a settling check
// is out (an upstream that does not answer) still shuts down: giving the
// probe lease back must not wait for a hold writer that has stopped.
func TestShutdownDuringSettleProbe(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "unused"})
	started := make(chan struct{}, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer secret-one" { // the held key's check hangs
			started <- struct{}{}
			<-r.Context().Done()
			return
		}
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"gpt-4o-mini","object":"model"}]}`))
	}))
	defer up.Close()
	cfg := f.config(t, fastProber+`
resilience:
  ladder:
    credential_rejected: {base: 1s, ceiling: 1m}
providers:
  - name: p1
    type: openai
    base_url: `+up.URL+`/v1
    keys:
      - {id: k1, secret: env:K1, priority: 10}
      - {id: k2, secret: env:K2}
    models: [{name: gpt-4o-mini}]
    health_check: {interval: 1h, timeout: 900ms}
`)
	other := f.otherInstance(t, cfg)
	other.Engine.Report("p1", "k1", "", false, hold.Outcome{Status: 401, Result: failure.Result{
		Class: failure.CredentialRejected, Scope: failure.ScopeKey, Code: "invalid_api_key", Reason: "invalid key"}})
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, wantHold(f, "p1.k1", hold.StateHeld))
	r := f.startProber(t, cfg)
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("no settling check of k1")
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the prober did not shut down with a settling check out")
	}
}

// TestCustomPathAndMethod: the check goes to the configured path with the
// configured method, body and expected status.
func TestCustomPathAndMethod(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	f.fake.AddRule(fakeprovider.Rule{Path: "/v1/ping", Status: 202})
	cfg := f.config(t, fastProber+`
providers:
  - name: p1
    type: openai-compatible
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: m1}]
    health_check:
      path: /ping
      method: POST
      body: '{"ping": true}'
      expected_statuses: [202]
`)
	r := f.startProber(t, cfg)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, "p1", "", health.Healthy))
	resp, err := r.svc.newApp().Test(httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`switchyard_prober_checks_total{outcome="ok",provider="p1"}`, "switchyard_prober_check_duration_seconds_bucket", "switchyard_prober_leases_held 1"} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	calls := f.fake.CallsMatching(func(c fakeprovider.Call) bool { return c.Path == "/v1/ping" })
	if len(calls) == 0 {
		t.Fatal("no call on /v1/ping")
	}
	c := calls[0]
	if c.Method != http.MethodPost || string(c.Body) != `{"ping": true}` || c.Key != "secret-one" {
		t.Fatalf("check call %s %s body %q key %q", c.Method, c.Path, c.Body, c.Key)
	}
	if n := f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Path != "/v1/ping" }); n != 0 {
		t.Fatalf("%d calls elsewhere (openai-compatible has no default discovery)", n)
	}
	h, _ := f.healthRecord("p1", "")
	if h.Check == nil || h.Check.Method != "POST" || h.Check.Path != "/ping" {
		t.Fatalf("record check %+v", h.Check)
	}
}

// TestNoPathSaysSo: an openai-compatible provider without a path is
// reported unknown with the reason, and nothing is sent.
func TestNoPathSaysSo(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
providers:
  - name: p1
    type: openai-compatible
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: m1}]
`)
	f.startProber(t, cfg)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		h, err := f.healthRecord("p1", "")
		if err != nil {
			return err
		}
		if h.Status != health.Unknown || h.Reason != "no health_check.path configured" {
			return fmt.Errorf("record %+v", h)
		}
		return nil
	})
	if n := len(f.fake.Calls()); n != 0 {
		t.Fatalf("%d calls sent without a path", n)
	}
}

// TestChecksOffStillSettleAndDiscoveryHolds: with health_check.enabled
// false, a tripped breaker's due hold is settled by a one-token request of
// what tripped it (it does not stay due), and a discovery asked for explicitly
// (health_check.discovery) refused with a 401 holds the key like a
// failed check.
func TestChecksOffStillSettleAndDiscoveryHolds(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
  discovery_interval: 100ms
  discovery_retry: 100ms
resilience:
  breaker: {cooldown: 1s, max_cooldown: 1m}
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys:
      - {id: k1, secret: env:K1, priority: 10}
      - {id: k2, secret: env:K2}
    models: [{name: gpt-4o-mini}]
    health_check: {enabled: false, discovery: true}
`)
	// A proxy's breaker tripped on p1.
	other := f.otherInstance(t, cfg)
	for range 5 {
		other.Engine.Report("p1", "k1", "gpt-4o-mini", false, hold.Outcome{Status: 503, Result: failure.Result{Class: failure.Transient, Code: "server_error"}, Operation: "chat"})
	}
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, wantHold(f, "p1._", hold.StateHeld))

	// k1 is revoked: the model list with k1 answers 401.
	f.fake.AddRule(fakeprovider.Rule{Key: "secret-one", Error: "openai.invalid_api_key"})
	f.startProber(t, cfg)
	testkit.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if err := wantHold(f, "p1._", hold.StateReleased)(); err != nil {
			return fmt.Errorf("breaker hold: %w", err)
		}
		return wantHold(f, "p1.k1", hold.StateHeld)()
	})
}

// TestDiscoveryMovesOnFromARefusingKey: a key that refuses the models
// list with an answer that holds nothing (a 400) is not asked again at
// every retry: the next discovery lists the models with the next key.
func TestDiscoveryMovesOnFromARefusingKey(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
  discovery_interval: 1h
  discovery_retry: 100ms
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys:
      - {id: k1, secret: env:K1, priority: 10}
      - {id: k2, secret: env:K2}
    models: [{name: gpt-4o-mini}]
    health_check: {enabled: false, discovery: true}
`)
	f.fake.AddRule(fakeprovider.Rule{Key: "secret-one", Path: "/v1/models", Error: "openai.bad_request"})
	f.startProber(t, cfg)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		h, err := f.healthRecord("p1", "")
		if err != nil {
			return err
		}
		if len(h.Models) == 0 {
			return fmt.Errorf("no models discovered: %+v (calls with k1: %d)", h,
				f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Key == "secret-one" }))
		}
		return nil
	})
	if n := f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Key == "secret-one" }); n != 1 {
		t.Errorf("k1 asked %d times, want once", n)
	}
	if _, err := f.holdRecord("p1.k1"); err == nil {
		t.Error("a 400 on the models list held k1")
	}
}

// TestChecksOffNoDiscovery: a provider whose checks are off gets no
// discovery calls either (they would hold keys and trip breakers before
// any traffic) unless it asks for them with health_check.discovery.
func TestChecksOffNoDiscovery(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
  discovery_interval: 100ms
  discovery_retry: 100ms
providers:
  - name: off
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
    health_check: {enabled: false}
  - name: asked
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k2, secret: env:K2}]
    models: [{name: gpt-4o-mini}]
    health_check: {enabled: false, discovery: true}
`)
	f.startProber(t, cfg)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHealth(f, "off", "", health.Unknown))
	asked := func() int { return f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Key == "secret-two" }) }
	after := asked()
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := asked(); n < after+2 {
			return fmt.Errorf("%d discoveries of the provider that asked", n)
		}
		return nil
	})
	if n := f.fake.CountCalls(func(c fakeprovider.Call) bool { return c.Key == "secret-one" }); n != 0 {
		t.Fatalf("%d calls to a provider with checks and discovery off", n)
	}
}

// otherInstance runs a hold engine on the fleet's buckets as another
// instance (a proxy) would, until the test ends.
func (f *fixture) otherInstance(t *testing.T, cfg *config.Config) *fleet.Member {
	t.Helper()
	return f.member(t, cfg, "proxy")
}

// member is a running fleet member of service (its instance id says
// which) on a connection of its own: another instance in the fleet.
func (f *fixture) member(t *testing.T, cfg *config.Config, service string) *fleet.Member {
	t.Helper()
	onc, _ := testkit.ConnectNATS(t, f.ns.ClientURL())
	other, err := fleet.New(cfg, fleet.Options{Service: service, NATS: onc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- other.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return other
}

// TestRetripAfterReleaseWaitsItsCooldown: a breaker hold this prober's
// checks tripped, released another way (an operator), then tripped again
// by a proxy's failures is a new trip (rung 0 again: the operator's
// release started the ladder over; a Since of its own): it is not the
// prober's own trip, and a passing check does not release it at once.
func TestRetripAfterReleaseWaitsItsCooldown(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, `
prober:
  check_interval: 1h
  recheck_interval: 1h
  jitter: 0
  lease_ttl: 1s
  check_timeout: 900ms
  settle_interval: 50ms
resilience:
  breaker: {consecutive_failures: 3, cooldown: 1h, max_cooldown: 2h}
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
`)
	r := f.startProber(t, cfg)
	s := r.svc
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, wantHealth(f, "p1", "", health.Healthy)) // the first check passed
	tgt := s.routing().targets["p1"]
	fail := result{status: 503, res: failure.Result{Class: failure.Transient, Code: "503", Reason: "503"}}
	for range 3 {
		s.report(tgt, "k1", fail) // this prober's checks trip the breaker
	}
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, wantHold(f, "p1._", hold.StateHeld))
	other := f.member(t, cfg, "proxy")
	inTable := func(e *hold.Engine, st hold.State, minRung int) func() error {
		return func() error {
			for _, h := range e.Holds() {
				if h.ID == "p1._" && h.State == st && h.Rung >= minRung && h.Revision != 0 {
					return nil
				}
			}
			return fmt.Errorf("p1._ not %s at rung %d or above in the table", st, minRung)
		}
	}
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, inTable(other.Engine, hold.StateHeld, 0))
	if err := other.Engine.Release(context.Background(), "p1._", hold.SourceAdmin); err != nil { // an operator's reset
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, inTable(s.engine, hold.StateReleased, 0))
	for range 3 { // a proxy's failures trip it again while it ramps
		other.Engine.Report("p1", "k1", "", false, hold.Outcome{Status: 503, Result: failure.Result{Class: failure.Transient, Code: "503", Reason: "503"}})
	}
	// The re-trip (the proxy's breaker or, from its tallies, the prober's
	// records it: neither is a trip of the prober's checks).
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, inTable(s.engine, hold.StateHeld, 0))
	s.releaseProviderHold(context.Background(), tgt) // the prober's next passing check (its release waits for its write)
	if err := wantHold(f, "p1._", hold.StateHeld)(); err != nil {
		t.Fatalf("a proxy's trip after a release: %v", err)
	}
}

// TestTripSettledByWhatTripped: a proxy's breaker tripped by failing chat
// requests is settled by the prober only with a one-token chat request of
// that model: while chat fails (and the models list passes) the hold
// stays, once chat answers it is released. A trip whose cause is unknown
// (an older instance's record) gets no cheap check: a caller's request
// settles it.
func TestTripSettledByWhatTripped(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, fastProber+`
resilience:
  breaker: {consecutive_failures: 3, cooldown: 1s, max_cooldown: 2s}
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: fast, upstream: gpt-4o-mini}]
    health_check: {interval: 1h}
  - name: p2
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: other}]
    health_check: {interval: 1h}
`)
	chatFails := f.fake.AddRule(fakeprovider.Rule{Path: "/v1/chat/completions", Status: 500})
	other := f.otherInstance(t, cfg)
	fail := hold.Outcome{Status: 500, Result: failure.Result{Class: failure.Transient, Code: "server_error"}}
	for range 3 {
		chat := fail
		chat.Operation = "chat"
		other.Engine.Report("p1", "k1", "fast", false, chat)
		other.Engine.Report("p2", "k1", "other", false, fail) // what failed is not said
	}
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, wantHold(f, "p1._", hold.StateHeld))
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, wantHold(f, "p2._", hold.StateHeld))
	rec, _ := f.holdRecord("p1._")
	if rec.Tripped == nil || rec.Tripped.Operation != "chat" || rec.Tripped.Model != "fast" {
		t.Fatalf("trip record %+v: tripped %+v", rec, rec.Tripped)
	}
	f.startProber(t, cfg)

	chatProbes := func() []fakeprovider.Call {
		var out []fakeprovider.Call
		for _, c := range f.fake.Calls() {
			if c.Path == "/v1/chat/completions" {
				out = append(out, c)
			}
		}
		return out
	}
	// the hold comes due within a second: the prober's check is a chat
	// request of the model that failed, which fails: held again
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := len(chatProbes()); n < 2 {
			return fmt.Errorf("%d chat probes", n)
		}
		return nil
	})
	for _, c := range chatProbes() {
		if c.Model != "gpt-4o-mini" || !strings.Contains(string(c.Body), `"max_tokens":1`) {
			t.Errorf("probe %s %s", c.Model, c.Body)
		}
	}
	// one read: the hold goes held -> probing -> held while chat fails, so
	// two reads (one per state) can each see the other state
	if rec, err := f.holdRecord("p1._"); err != nil || (rec.State != hold.StateHeld && rec.State != hold.StateProbing) {
		t.Fatalf("while chat fails: hold %+v %v, want held or probing", rec, err)
	}
	f.fake.RemoveRule(chatFails)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, wantHold(f, "p1._", hold.StateReleased))
	if rec, _ := f.holdRecord("p1._"); rec.ReleaseSource != "probe" || !strings.HasPrefix(rec.RecordedBy, "prober-") {
		t.Errorf("released %+v", rec)
	}
	// p2's trip, cause unknown, was left alone: still due, no check of p2
	if rec, err := f.holdRecord("p2._"); err != nil || rec.State != hold.StateHeld || rec.Tripped != nil {
		t.Errorf("p2 %+v %v", rec, err)
	}
}
