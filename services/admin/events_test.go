package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/credentials"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/sse"
	"switchyard.dev/shared/testkit"
)

// stream opens /admin/events with query and returns the next-event
// function and a stop function.
func (e *env) stream(query string) (func() (string, hold.Event), func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/admin/events"+query, nil)
	req.Header.Set("Authorization", "Bearer "+readToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		e.t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	type item struct {
		name string
		ev   hold.Event
	}
	ch := make(chan item, 16)
	go func() {
		defer close(ch)
		r := sse.NewReader(resp.Body)
		for {
			ev, err := r.Next()
			if err != nil {
				return
			}
			if len(ev.Data) == 0 {
				continue
			}
			var he hold.Event
			_ = json.Unmarshal(ev.Data, &he)
			ch <- item{string(ev.Name), he}
		}
	}()
	next := func() (string, hold.Event) {
		e.t.Helper()
		select {
		case it, ok := <-ch:
			if !ok {
				e.t.Fatal("event stream ended")
			}
			return it.name, it.ev
		case <-time.After(testTimeout):
			e.t.Fatal("no event")
		}
		return "", hold.Event{}
	}
	return next, func() { cancel(); resp.Body.Close() }
}

func TestEvents(t *testing.T) {
	e := startEnv(t, true)
	e.fail("openai", "primary", "gpt-4o", credentialRejected, 401)
	e.waitHold("openai.primary", hold.StateHeld)

	t.Run("replay since", func(t *testing.T) {
		next, stop := e.stream("?since=10m")
		defer stop()
		// the import of the file's routing configuration at the fleet's
		// first start, then the hold
		name, ev := next()
		if name != "config" || ev.Source != "import" {
			t.Fatalf("got %s %+v, want the config event of the import", name, ev)
		}
		name, ev = next()
		if name != "hold" || ev.HoldID != "openai.primary" || ev.Class.String() != "credential_rejected" {
			t.Fatalf("got %s %+v", name, ev)
		}
	})
	t.Run("live, filtered by kind and provider", func(t *testing.T) {
		next, stop := e.stream("?kind=release,credential&provider=openai")
		defer stop()
		e.do("DELETE", "/admin/holds/openai.primary", opToken, nil).expect(t, 204, "")
		name, ev := next()
		if name != "release" || ev.HoldID != "openai.primary" || ev.Outcome != hold.SourceAdmin {
			t.Fatalf("got %s %+v", name, ev)
		}
	})
	t.Run("provider filter excludes others", func(t *testing.T) {
		next, stop := e.stream("?provider=local")
		defer stop()
		e.fail("openai", "secondary", "gpt-4o", credentialRejected, 401)
		e.fail("local", "", "llama", credentialRejected, 401)
		name, ev := next()
		if name != "hold" || ev.Scope.Provider != "local" {
			t.Fatalf("got %s %+v", name, ev)
		}
	})
	t.Run("repeated filter values", func(t *testing.T) {
		// each value makes filter subjects, and JetStream refuses a
		// consumer whose subjects overlap: repeats are dropped (this
		// answered 503 nats_unavailable)
		next, stop := e.stream("?since=10m&kind=hold,hold&provider=local,local")
		defer stop()
		name, ev := next()
		if name != "hold" || ev.Scope.Provider != "local" {
			t.Fatalf("got %s %+v", name, ev)
		}
	})
	for _, q := range []string{"?kind=bogus", "?provider=a.b", "?since=yesterday", "?last_event_id=x"} {
		e.do("GET", "/admin/events"+q, readToken, nil).expect(t, 400, codeBadRequest)
	}
	// streams end when the clients go away (heartbeats notice) or at shutdown
	testkit.CheckFor(t, testTimeout, 20*time.Millisecond, func() error {
		if n := e.openStreams(); n != 0 {
			return fmt.Errorf("%d streams open", n)
		}
		return nil
	})
}

func (e *env) openStreams() int {
	r := e.do("GET", "/metrics", "", nil)
	for _, l := range strings.Split(string(r.raw), "\n") {
		if v, ok := strings.CutPrefix(l, "switchyard_admin_event_streams "); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	return -1
}

// proxySecrets is a minimal stand-in for the proxy side of rotation: it
// watches the credentials bucket with credentials.Watch and keeps the
// current secret of each key, as the proxy's key table will.
type proxySecrets struct {
	mu sync.Mutex
	m  map[string]string
}

func (p *proxySecrets) set(provider, keyID string, s config.Secret) {
	p.mu.Lock()
	p.m[provider+"/"+keyID] = s.Reveal()
	p.mu.Unlock()
}

func (p *proxySecrets) get(k string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[k]
}

func TestRotation(t *testing.T) {
	e := startEnv(t, true)
	secrets := &proxySecrets{m: map[string]string{"openai/primary": "sk-old-primary"}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- credentials.Watch(ctx, e.proxy.Resources().Credentials, e.cfg.Credentials.Key, secrets.set,
			credentials.WithReady(func() { close(ready) }))
	}()
	defer func() { cancel(); <-done }()
	<-ready

	e.fail("openai", "primary", "gpt-4o", credentialRejected, 401)
	e.waitHold("openai.primary", hold.StateHeld)
	events, stop := e.stream("?kind=credential")
	defer stop()

	start := time.Now()
	r := e.do("PUT", "/admin/providers/openai/keys/primary", opToken, map[string]string{"secret": "sk-brand-new"})
	r.expect(t, 200, "")
	if strings.Contains(string(r.raw), "sk-brand-new") {
		t.Fatalf("answer reveals the secret: %s", r.raw)
	}
	wantFP := config.NewSecret("sk-brand-new").Fingerprint()
	if r.body["fingerprint"] != wantFP || r.body["released_holds"] != 1.0 {
		t.Fatalf("answer %s", r.raw)
	}
	// the proxy uses the new secret and the old hold is gone (a correctness
	// deadline: how fast is for benchmarks)
	for secrets.get("openai/primary") != "sk-brand-new" {
		if time.Since(start) > testTimeout {
			t.Fatalf("the proxy did not get the new secret within %s", testTimeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
	for {
		if _, held := e.proxy.Engine.HeldUntil("openai", "primary", "gpt-4o"); !held {
			break
		}
		if time.Since(start) > testTimeout {
			t.Fatalf("the key's hold was not released within %s", testTimeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("rotation applied at the stand-in proxy after %s", time.Since(start))

	name, ev := events()
	if name != "credential" || ev.Scope.Key != "primary" || ev.Fingerprint != wantFP {
		t.Errorf("event %s %+v", name, ev)
	}
	// the bucket holds ciphertext only
	raw, err := e.proxy.Resources().Credentials.Get(context.Background(), "openai.primary")
	if err != nil || strings.Contains(string(raw.Value()), "sk-brand-new") {
		t.Fatalf("bucket value: %v %s", err, raw.Value())
	}
	// status shows the new fingerprint, never the secret
	st := e.do("GET", "/admin/providers/status", readToken, nil)
	if strings.Contains(string(st.raw), "sk-brand-new") || !strings.Contains(string(st.raw), wantFP) {
		t.Errorf("status: %s", st.raw)
	}

	for _, tt := range []struct {
		name, path string
		body       any
		status     int
		code       string
	}{
		{"unknown provider", "/admin/providers/nope/keys/primary", `{"secret":"x"}`, 404, codeNotFound},
		{"unknown key", "/admin/providers/openai/keys/nope", `{"secret":"x"}`, 404, codeNotFound},
		{"keyless provider", "/admin/providers/local/keys/any", `{"secret":"x"}`, 404, codeNotFound},
		{"empty body", "/admin/providers/openai/keys/primary", "", 400, codeBadRequest},
		{"empty secret", "/admin/providers/openai/keys/primary", `{"secret":"  "}`, 400, codeBadRequest},
		{"multi-line secret", "/admin/providers/openai/keys/primary", `{"secret":"a\nb"}`, 400, codeBadRequest},
		{"unknown field", "/admin/providers/openai/keys/primary", `{"secret":"x","value":"y"}`, 400, codeBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e.do("PUT", tt.path, opToken, tt.body).expect(t, tt.status, tt.code)
		})
	}

	// A secret goes into request headers: a control character, a space or
	// DEL is refused, the rule named, and nothing is written.
	before, err := e.proxy.Resources().Credentials.Get(context.Background(), "openai.primary")
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{"secret":"sk-abc\u0000def"}`, `{"secret":" sk-abc\t"}`, `{"secret":"sk abc"}`, `{"secret":"sk-abc\u007f"}`} {
		r := e.do("PUT", "/admin/providers/openai/keys/primary", opToken, body)
		r.expect(t, 400, codeBadRequest)
		if msg := r.errMessage(); !strings.Contains(msg, "must not contain spaces or control characters") || strings.Contains(msg, "abc") {
			t.Errorf("%s: message %q", body, msg)
		}
	}
	after, err := e.proxy.Resources().Credentials.Get(context.Background(), "openai.primary")
	if err != nil || after.Revision() != before.Revision() {
		t.Fatalf("a refused secret was written: revision %d, was %d (%v)", after.Revision(), before.Revision(), err)
	}
}

func TestRotationDisabled(t *testing.T) {
	e := startEnv(t, false)
	e.do("PUT", "/admin/providers/openai/keys/primary", opToken, `{"secret":"x"}`).expect(t, 409, codeRotationOff)
}

func TestNATSDown(t *testing.T) {
	e := startEnv(t, true)
	e.fail("openai", "primary", "gpt-4o", credentialRejected, 401)
	e.waitHold("openai.primary", hold.StateHeld)
	stopServer(e)
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		if e.svc.natsUp() {
			return fmt.Errorf("still up")
		}
		return nil
	})
	for _, tt := range []struct {
		name, method, path string
		body               any
	}{
		{"release", "DELETE", "/admin/holds/openai.primary", nil},
		{"pin", "POST", "/admin/holds", `{"provider":"openai","duration":"1m"}`},
		{"reset", "POST", "/admin/providers/openai/reset", nil},
		{"rotate", "PUT", "/admin/providers/openai/keys/primary", `{"secret":"x"}`},
		{"events", "GET", "/admin/events", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e.do(tt.method, tt.path, opToken, tt.body).expect(t, 503, codeNATSUnavailable)
		})
	}
	// reads answer from the local table, saying NATS is down
	r := e.do("GET", "/admin/holds", readToken, nil)
	r.expect(t, 200, "")
	if r.body["nats"] != false || len(r.body["holds"].([]any)) != 1 {
		t.Errorf("holds while down: %s", r.raw)
	}
	// an unknown id is still 404, bad bodies still 400
	e.do("DELETE", "/admin/holds/openai.nokey", opToken, nil).expect(t, 404, codeNotFound)
	e.do("POST", "/admin/holds", opToken, `{}`).expect(t, 400, codeBadRequest)
}

// TestRefusedByJetStream: JetStream refusing a consumer as malformed (its
// 400 API errors) is the caller's 400 with the server's description; a
// missing stream or any other error is NATS not being available.
func TestRefusedByJetStream(t *testing.T) {
	e := startEnv(t, false)
	js, err := jetstream.New(e.anc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"switchyard.events.hold.openai", "switchyard.events.hold.openai"},
	})
	if desc, ok := refusedByJetStream(err); !ok || !strings.Contains(desc, "consumer subject filters cannot overlap") {
		t.Errorf("overlapping filters: %q, %v (err %v)", desc, ok, err)
	}
	_, err = js.Stream(ctx, "NO_SUCH_STREAM")
	if desc, ok := refusedByJetStream(err); ok || err == nil {
		t.Errorf("a missing stream counts as refused: %q (err %v)", desc, err)
	}
	if _, ok := refusedByJetStream(context.DeadlineExceeded); ok {
		t.Error("a timeout counts as refused")
	}
	if _, ok := refusedByJetStream(nil); ok {
		t.Error("nil counts as refused")
	}
}
