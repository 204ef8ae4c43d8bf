package proxy

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"

	"switchyard.dev/shared/testkit"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/hold"
	"switchyard.dev/tools/fakeprovider"
)

const directBody = `{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"x"}]}`

func TestRejectedKeyIsHeldAndSkipped(t *testing.T) {
	f := newFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key"})
	for i := 0; i < 6; i++ {
		if status, _, body := f.call(t, "/v1/chat/completions", directBody); status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
	}
	if n := callsWith(f.openai, "key-a1"); n != 1 {
		t.Errorf("a1 called %d times; after its rejection it must be held", n)
	}
	holds := f.svc.member.Engine.Holds()
	if len(holds) != 1 || holds[0].ID != "fake-openai.a1" || holds[0].Class.String() != "credential_rejected" {
		t.Fatalf("holds %+v", holds)
	}
	if holds[0].Fingerprint == "" || holds[0].Fingerprint == "key-a1" {
		t.Errorf("hold fingerprint %q", holds[0].Fingerprint)
	}
}

func TestModelRefusalHoldsOnlyThatModel(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Providers[0].Models = append(c.Providers[0].Models, config.Model{Name: "other-model", Kind: "chat"})
	})
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Model: "demo-model", Error: "openai.model_not_found"})
	for i := 0; i < 4; i++ {
		f.call(t, "/v1/chat/completions", directBody)
	}
	before := callsWith(f.openai, "key-a1")
	for i := 0; i < 4; i++ {
		if status, _, body := f.call(t, "/v1/chat/completions",
			`{"model":"fake-openai/other-model","messages":[{"role":"user","content":"x"}]}`); status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
	}
	if callsWith(f.openai, "key-a1") == before {
		t.Error("a key held for one model was not used for another model")
	}
}

func TestBadRequestNeverHolds(t *testing.T) {
	f := newFixture(t)
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.context_length", Times: 2})
	for i := 0; i < 2; i++ {
		if status, _, _ := f.call(t, "/v1/chat/completions", directBody); status != 400 {
			t.Fatalf("status %d, want the provider's 400", status)
		}
	}
	if holds := f.svc.member.Engine.Holds(); len(holds) != 0 {
		t.Fatalf("a bad request held %+v", holds)
	}
	for i := 0; i < 4; i++ {
		f.call(t, "/v1/chat/completions", directBody)
	}
	if callsWith(f.openai, "key-a1") < 2 || callsWith(f.openai, "key-a2") < 2 {
		t.Error("keys left rotation after a bad request")
	}
}

// TestAllHeldPolicy: with every key rate limited, fail_fast answers 503
// at once; try_soft tries the keys (an early probe of each hold), unless
// the provider stated its wait, which no early probe cuts short (before,
// a stated Retry-After of 30 s cost an upstream call a second). A
// provider's own resilience.all_held_policy decides for its targets.
func TestAllHeldPolicy(t *testing.T) {
	stated := fakeprovider.Rule{Error: "openai.rate_limit", RetryAfter: time.Minute}
	noWait := fakeprovider.Rule{Error: "openai.rate_limit_no_wait"}
	tests := []struct {
		name, policy, own string // own: the provider's all_held_policy
		rule              fakeprovider.Rule
		wantStatus        int
		wantCode          string
		wantCalls         int // upstream calls by the second request
	}{
		{"fail_fast", config.AllHeldFailFast, "", stated, 503, "no_available_target", 0},
		{"try_soft", config.AllHeldTrySoft, "", noWait, 429, "rate_limited", 2},
		{"try_soft stated wait", config.AllHeldTrySoft, "", stated, 503, "no_available_target", 0},
		{"provider try_soft under global fail_fast", config.AllHeldFailFast, config.AllHeldTrySoft, noWait, 429, "rate_limited", 2},
		{"provider fail_fast under global try_soft", config.AllHeldTrySoft, config.AllHeldFailFast, noWait, 503, "no_available_target", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, func(c *config.Config) {
				c.Resilience.AllHeldPolicy = tt.policy
				c.Providers[0].Resilience.AllHeldPolicy = tt.own
			})
			f.openai.AddRule(tt.rule)
			// every attempt rate limited: the caller is told so (429)
			if status, _, body := f.call(t, "/v1/chat/completions", directBody); status != 429 || errorCode(t, body) != gwerror.RateLimited {
				t.Fatalf("first request: %d %s", status, body)
			}
			// Both holds written (a soft pass takes its early lease by
			// compare-and-set on the stored record: on a loaded machine the
			// second request could come before the writes landed).
			testkit.WaitFor(t, 5*time.Second, func() bool {
				h := f.svc.member.Engine.Holds()
				return len(h) == 2 && h[0].Revision != 0 && h[1].Revision != 0
			})
			before := len(f.openai.Calls())
			status, h, body := f.call(t, "/v1/chat/completions", directBody)
			if status != tt.wantStatus || errorCode(t, body) != tt.wantCode {
				t.Fatalf("second request: %d %s", status, body)
			}
			// A 503 says when to come back: the keys' stated minute.
			if ra, _ := strconv.Atoi(h.Get("Retry-After")); status == 503 && tt.rule.RetryAfter > 0 && (ra < 50 || ra > 60) {
				t.Errorf("Retry-After %q, want the held keys' remaining wait (about 60 s)", h.Get("Retry-After"))
			}
			if got := len(f.openai.Calls()) - before; got != tt.wantCalls {
				t.Errorf("%d upstream calls while every key was held, want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestDueHoldIsProbedOnceAndReleased(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Resilience.StatedWaitFloor = time.Second
		c.Providers[0].Keys = c.Providers[0].Keys[:1] // a1 only
	})
	// a1 is rate limited with a stated wait of 1 s (the floor).
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.rate_limit", RetryAfter: time.Second, Times: 1})
	status, _, _ := f.call(t, "/v1/chat/completions", chatBody)
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	if n := callsWith(f.openai, "key-a1"); n != 1 {
		t.Fatalf("a1 calls %d", n)
	}
	// While held, chain traffic goes to the next step; once due, exactly
	// one request probes a1 and the hold is released.
	deadline := time.Now().Add(10 * time.Second)
	for callsWith(f.openai, "key-a1") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the due hold was never probed")
		}
		if status, _, body := f.call(t, "/v1/chat/completions", chatBody); status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		time.Sleep(20 * time.Millisecond) // pacing real traffic, not synchronisation
	}
	testkit.WaitFor(t, 5*time.Second, func() bool {
		hs := f.svc.member.Engine.Holds()
		return len(hs) == 0 || hs[0].State == hold.StateReleased
	})
	if n := callsWith(f.openai, "key-a1"); n != 2 {
		t.Errorf("a1 calls %d, want 2 (the failure and one probe)", n)
	}
}

// TestProbeNotTakenByAStoppedRequest: a request out of attempts picks no
// further key, so it cannot take a due hold's only probe and then not send
// it (the hold stayed probing, every request denied the key, until the
// probe's lease lapsed).
func TestProbeNotTakenByAStoppedRequest(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Resilience.AllHeldPolicy = config.AllHeldFailFast
		c.Providers[0].Keys[0].Priority = 1 // a1 second
		c.Providers[0].Keys[1].Priority = 2 // a2 first
		c.Limits.MaxAttempts = 1
	})
	leaseA1(t, f)
	// a2 answers 429: the request's one attempt is spent, and it stops.
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a2", Error: "openai.rate_limit", RetryAfter: time.Minute})
	if status, _, body := f.call(t, "/v1/chat/completions", directBody); status == 200 {
		t.Fatalf("first request: %d %s", status, body)
	}
	a1 := callsWith(f.openai, "key-a1")
	// a2 is held now: the next request probes a1, whose probe is free.
	if status, _, body := f.call(t, "/v1/chat/completions", directBody); status != 200 || callsWith(f.openai, "key-a1") != a1+1 {
		t.Fatalf("second request: %d %s; a1 called %d times", status, body, callsWith(f.openai, "key-a1")-a1)
	}
}

// TestProbeEndsWithItsLease: a caller's request that is a hold's probe
// is cut when the probe lease ends (resilience.probe.lease), not at the
// attempt timeout: past the lease another instance may probe the hold
// too, and this probe's answer would be thrown away. The cut is a timeout
// of the target: the probe settles the hold on its rung.
func TestProbeEndsWithItsLease(t *testing.T) {
	const lease = time.Second
	f := newFixture(t, func(c *config.Config) {
		c.Resilience.Probe.Lease = lease
		c.Timeouts.Attempt = 10 * time.Second
		c.Providers[0].Keys = c.Providers[0].Keys[:1] // a1 only
	})
	eng := f.svc.engine
	leaseUntil := leaseA1(t, f)
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Hang: true, Times: 1}) // the upstream never answers
	status, _, body := f.call(t, "/v1/chat/completions", directBody)
	ended := time.Now()
	if status != 502 || callsWith(f.openai, "key-a1") != 1 {
		t.Fatalf("the probe: %d %s; a1 called %d times", status, body, callsWith(f.openai, "key-a1"))
	}
	if late := ended.Sub(leaseUntil); late > 500*time.Millisecond {
		t.Errorf("the probe ended %s after its lease (attempt timeout 10s)", late)
	}
	// the probe's own answer (a timeout) settled the hold: held on its rung
	testkit.WaitFor(t, 3*time.Second, func() bool {
		hs := eng.Holds()
		return len(hs) == 1 && hs[0].State == hold.StateHeld && hs[0].Probe == nil && hs[0].Rung == 0 && hs[0].Until.After(ended)
	})
}

// TestHeldStepBesideUntranslatableOne: a chain whose only step that can
// serve the request (n > 1 does not translate to Anthropic) is held: under
// try_soft the held step is tried, under fail_fast the answer is 503 with
// Retry-After, never 400 unsupported_translation (which SDKs never retry).
func TestHeldStepBesideUntranslatableOne(t *testing.T) {
	for _, policy := range []string{config.AllHeldTrySoft, config.AllHeldFailFast} {
		t.Run(policy, func(t *testing.T) {
			f := newFixture(t, func(c *config.Config) { c.Resilience.AllHeldPolicy = policy })
			f.openai.AddRule(fakeprovider.Rule{Error: "openai.rate_limit_no_wait", Times: 2}) // no stated wait: try_soft may probe early
			if status, _, body := f.call(t, "/v1/chat/completions", `{"model":"chain:demo-chat","messages":[{"role":"user","content":"x"}]}`); status != 200 {
				t.Fatalf("first: %d %s", status, body)
			}
			status, h, body := f.call(t, "/v1/chat/completions", `{"model":"chain:demo-chat","n":2,"messages":[{"role":"user","content":"x"}]}`)
			switch {
			case policy == config.AllHeldTrySoft && status != 200:
				t.Fatalf("try_soft: %d %s", status, body)
			case policy == config.AllHeldFailFast && (status != 503 || errorCode(t, body) != gwerror.NoTarget || h.Get("Retry-After") == ""):
				t.Fatalf("fail_fast: %d %s", status, body)
			}
		})
	}
}

// TestProviderOutageFailsOver: a provider answering 500 on every key gets
// two of them (each with its retry), then the chain's next step serves; it
// does not spend the request's attempts on each of its keys in turn.
func TestProviderOutageFailsOver(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		var keys []config.Key
		for i := range 5 {
			keys = append(keys, config.Key{ID: fmt.Sprintf("a%d", i), Weight: 1, Priority: 1, Value: config.NewSecret(fmt.Sprintf("key-a%d", i))})
		}
		keys[4].Priority = 0 // tried last
		off := false
		c.Resilience.Breaker.Enabled = &off // the failures here would trip it
		c.Providers[0].Keys = keys
	})
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
	status, h, body := f.call(t, "/v1/chat/completions", chatBody)
	if status != 200 || h.Get(headerProvider) != "fake-anthropic" || h.Get(headerAttempts) != "5" {
		t.Fatalf("%d, served by %q after %s attempts: %s", status, h.Get(headerProvider), h.Get(headerAttempts), body)
	}
	// With no step after it, the provider's other keys are tried.
	f.openai.ClearRules()
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a0", Error: "openai.server_error"})
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.server_error"})
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a2", Error: "openai.server_error"})
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a3", Error: "openai.server_error"})
	status, h, body = f.call(t, "/v1/chat/completions", `{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"x"}]}`)
	if status != 200 || h.Get(headerKeyID) != "a4" {
		t.Fatalf("one step: %d, served by key %q after %s attempts: %s", status, h.Get(headerKeyID), h.Get(headerAttempts), body)
	}
}

// leaseA1 holds key a1 for a second (a stated rate limit), waits for the
// hold to be written and fall due, and takes its probe lease, as a request
// admitted to probe it would; it returns when the lease ends.
func leaseA1(t *testing.T, f *fixture) time.Time {
	t.Helper()
	eng := f.svc.engine
	eng.Report("fake-openai", "a1", "demo-model", false, hold.Outcome{Result: failure.Result{
		Class: failure.RateLimit, Scope: failure.ScopeKey, HasWait: true, RetryAfter: time.Second, Code: "rate_limit_exceeded"}})
	var until time.Time
	testkit.WaitFor(t, 3*time.Second, func() bool {
		hs := eng.Holds()
		if len(hs) == 1 && hs[0].Revision != 0 {
			until = hs[0].Until
		}
		return !until.IsZero()
	})
	testkit.WaitFor(t, 5*time.Second, func() bool { return time.Now().After(until) }) // the hold falls due
	eng.Admit("fake-openai", "a1", "demo-model")                                      // its lease is taken
	var leaseUntil time.Time
	testkit.WaitFor(t, 3*time.Second, func() bool {
		hs := eng.Holds()
		if len(hs) == 1 && hs[0].State == hold.StateProbing {
			leaseUntil = hs[0].Probe.LeaseUntil
		}
		return !leaseUntil.IsZero()
	})
	return leaseUntil
}

// TestAllHeldKeepsTheDeclaredOrder: both steps of a chain tripped, the
// first one's provider offline by its health: the try_soft pass tries the
// steps in declared order, the first step first (before, an offline step
// was only a fallback, and the second step took every early probe). The
// next request finds both holds within their early-probe interval and is
// answered 503 with Retry-After at once, at no upstream cost.
func TestAllHeldKeepsTheDeclaredOrder(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Resilience.AllHeldPolicy = config.AllHeldTrySoft
		c.Resilience.Breaker.ConsecutiveFailures = new(1)
	})
	f.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
	f.anthropic.AddRule(fakeprovider.Rule{Error: "anthropic.overloaded"})
	if status, _, body := f.call(t, "/v1/chat/completions", chatBody); status != 502 {
		t.Fatalf("the tripping request: %d %s", status, body)
	}
	testkit.WaitFor(t, 5*time.Second, func() bool {
		n := 0
		for _, r := range f.svc.member.Engine.Holds() {
			if r.Source == hold.SourceBreaker && r.Revision != 0 {
				n++
			}
		}
		return n == 2
	})
	view := health.NewView(nil)
	view.Apply(health.Change{ID: "fake-openai._", Record: health.Record{ID: "fake-openai._", Provider: "fake-openai",
		Status: health.Unhealthy, CircuitState: health.CircuitOpen, UpdatedAt: time.Now()}})
	f.svc.setHealth(view.Snapshot())

	oa, an := len(f.openai.Calls()), len(f.anthropic.Calls())
	if status, _, body := f.call(t, "/v1/chat/completions", chatBody); status != 502 {
		t.Fatalf("the soft pass: %d %s", status, body)
	}
	if got := len(f.openai.Calls()) - oa; got != 1 {
		t.Errorf("the first step (offline, tripped) got %d early probes, want 1: the declared order", got)
	}
	if got := len(f.anthropic.Calls()) - an; got != 1 {
		t.Errorf("the second step got %d early probes, want 1", got)
	}
	oa, an = len(f.openai.Calls()), len(f.anthropic.Calls())
	status, h, body := f.call(t, "/v1/chat/completions", chatBody)
	if status != 503 || errorCode(t, body) != gwerror.CircuitOpen || h.Get("Retry-After") == "" {
		t.Fatalf("within the early-probe interval: %d %s (Retry-After %q), want 503 with Retry-After", status, body, h.Get("Retry-After"))
	}
	if got := len(f.openai.Calls()) + len(f.anthropic.Calls()) - oa - an; got != 0 {
		t.Errorf("%d upstream calls within the early-probe interval", got)
	}
	for _, r := range f.svc.member.Engine.Holds() {
		if r.Rung != 0 {
			t.Errorf("%s on rung %d after early probes only, want 0", r.ID, r.Rung)
		}
	}
}

// TestAttemptCap: a request makes at most limits.max_attempts attempts,
// however many keys could still be tried or retried: twelve rate-limited
// keys cost the default ten calls; with max_attempts 3, two keys failing
// with 500 (each retried once) cost three.
func TestAttemptCap(t *testing.T) {
	tests := []struct {
		name        string
		max         int
		rule        string
		keys, calls int
		status      int
		code        string
	}{
		// every attempt rate limited: 429, as the providers said
		{"rotations", 0, "openai.rate_limit_no_wait", 12, 10, 429, gwerror.RateLimited},
		{"retries", 3, "openai.server_error", 2, 3, 502, gwerror.AllFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, func(c *config.Config) {
				var keys []config.Key
				for i := range tt.keys {
					keys = append(keys, config.Key{ID: fmt.Sprintf("a%d", i), Weight: 1, Priority: 1, Value: config.NewSecret(fmt.Sprintf("key-a%d", i))})
				}
				c.Providers[0].Keys = keys
				c.Resilience.Breaker.ConsecutiveFailures = new(100)
				if tt.max > 0 {
					c.Limits.MaxAttempts = tt.max
				}
			})
			f.openai.AddRule(fakeprovider.Rule{Error: tt.rule})
			status, h, body := f.call(t, "/v1/chat/completions", directBody)
			if status != tt.status || errorCode(t, body) != tt.code || h.Get(headerAttempts) != strconv.Itoa(tt.calls) {
				t.Fatalf("%d %s (attempts %q), want %d %s after %d", status, body, h.Get(headerAttempts), tt.status, tt.code, tt.calls)
			}
			if n := len(f.openai.Calls()); n != tt.calls {
				t.Errorf("%d upstream calls, want %d (limits.max_attempts)", n, tt.calls)
			}
		})
	}
}

// TestProbeMakesOneAttempt: a due hold's probe is one attempt: a 500 from
// the probed key is not retried in place (retry.same_target_attempts 2).
func TestProbeMakesOneAttempt(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Resilience.AllHeldPolicy = config.AllHeldFailFast // the normal pass's probe, not the soft pass's
		c.Resilience.StatedWaitFloor = time.Second
		c.Providers[0].Keys = c.Providers[0].Keys[:1] // a1 only
	})
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.rate_limit", RetryAfter: time.Second, Times: 1})
	if status, _, body := f.call(t, "/v1/chat/completions", directBody); status != 429 {
		t.Fatalf("first request: %d %s", status, body)
	}
	f.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.server_error"})
	before := callsWith(f.openai, "key-a1")
	testkit.WaitFor(t, 10*time.Second, func() bool {
		status, _, _ := f.call(t, "/v1/chat/completions", directBody)
		return status != 503 // the due hold's probe went out
	})
	if n := callsWith(f.openai, "key-a1") - before; n != 1 {
		t.Errorf("the probe made %d upstream calls, want 1 (no retry)", n)
	}
}
