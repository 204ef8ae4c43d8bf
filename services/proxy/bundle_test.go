package proxy

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/telemetry/otlptest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// bundleOf waits for the bundle of a request id in the stream, read on a
// connection of its own (as any admin instance reads it).
func bundleOf(t testing.TB, s jetstream.Stream, id string) *debug.Bundle {
	t.Helper()
	var b *debug.Bundle
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		var err error
		b, err = debug.Get(context.Background(), s, id)
		return err
	})
	return b
}

func debugStream(t testing.TB, url string) jetstream.Stream {
	t.Helper()
	_, js := testkit.ConnectNATS(t, url)
	s, err := js.Stream(context.Background(), debug.Stream)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// post sends a chat request with a request id and returns the status.
func post(t testing.TB, url, id, body string, headers ...string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	req.Header.Set("X-Request-Id", id)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Request-Id"); got != id {
		t.Fatalf("x-request-id %q, want %q", got, id)
	}
	return resp.StatusCode
}

// A request that rotates keys and fails over a chain step has a bundle
// with every attempt in order, the right classes and actions, the route's
// trace and the digests; it is found by request id on another connection.
func TestBundleOfAFailover(t *testing.T) {
	ff := newFleet(t, 1, func(c *config.Config) { c.Retry.SameTargetAttempts = 2 })
	ff.openai.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.invalid_api_key"})
	ff.openai.AddRule(fakeprovider.Rule{Key: "key-a2", Error: "openai.server_error"})
	nc, _ := testkit.ConnectNATS(t, ff.ns.ClientURL())
	events := make(chan *nats.Msg, 16)
	if _, err := nc.ChanSubscribe("switchyard.events.hold.>", events); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"demo-chat","messages":[{"role":"user","content":"hello"}]}`
	if st := post(t, ff.urls[0], "req-failover-1", body); st != 200 {
		t.Fatalf("status %d", st)
	}
	// The hold the request's first attempt caused names the request.
	select {
	case m := <-events:
		var ev hold.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil || ev.RequestID != "req-failover-1" || ev.Scope.Key != "a1" {
			t.Errorf("hold event %s", m.Data)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no hold event")
	}
	b := bundleOf(t, debugStream(t, ff.ns.ClientURL()), "req-failover-1")
	type att struct{ provider, key, class, action string }
	var got []att
	for _, a := range b.Attempts {
		got = append(got, att{a.Provider, a.KeyID, a.Class, a.Action})
	}
	want := []att{
		{"fake-openai", "a1", "credential_rejected", "rotate"},
		{"fake-openai", "a2", "transient", "retry_same"},
		{"fake-openai", "a2", "transient", "rotate"},
		{"fake-anthropic", "b1", "", "served"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) && !(len(got) == 4 && got[3].key == "b2") {
		t.Fatalf("attempts %+v, want %+v", got, want)
	}
	for i, a := range b.Attempts {
		if a.N != i+1 || a.DurationMS <= 0 || (i > 0 && a.StartMS < b.Attempts[i-1].StartMS+b.Attempts[i-1].DurationMS) || a.Fingerprint == "" {
			t.Errorf("attempt %d timing or fingerprint: %+v", i+1, a)
		}
	}
	if e := b.Attempts[0].Error; e == nil || e.Code != "invalid_api_key" || b.Attempts[0].Status != 401 {
		t.Errorf("attempt 1 error %+v", b.Attempts[0])
	}
	if b.Attempts[1].BackoffMS <= 0 {
		t.Errorf("the retry of the same target waited %v ms", b.Attempts[1].BackoffMS)
	}
	if b.V != 1 || b.Status != 200 || b.Outcome != debug.OutcomeOK || b.Sampled != "retried" ||
		b.Provider != "fake-anthropic" || b.ServedModel != "claude-upstream" || b.Client != "team" || b.Access != "allowed" ||
		b.Model != "demo-chat" || b.Tokens == nil || b.Request.Bytes != len(body) || b.Response == nil || b.Response.Bytes == 0 {
		t.Errorf("bundle %+v", b)
	}
	r := b.Route
	if r == nil || r.Name != "chain:demo-chat" || r.Kind != "chain" || len(r.Steps) != 2 || r.Steps[0].Tried != 1 || r.Steps[1].Tried != 2 {
		t.Fatalf("route %+v", r)
	}
}

// Sampling: failures always, successes at debug.sample_successes, any
// request asking with X-Switchyard-Debug; the bundle says why it was kept.
func TestBundleSampling(t *testing.T) {
	none := 0.0
	ff := newFleet(t, 1, func(c *config.Config) { c.Debug.SampleSuccesses = &none })
	s := debugStream(t, ff.ns.ClientURL())
	body := `{"model":"demo-model","messages":[{"role":"user","content":"hi"}]}`
	post(t, ff.urls[0], "req-plain", body)
	post(t, ff.urls[0], "req-forced", body, "X-Switchyard-Debug", "true")
	// Refusals before any upstream attempt: kept only when asked for (a
	// caller looping on its mistake must not flush the stream).
	refusals := []struct {
		name, body string
		headers    []string
		status     int
	}{
		{"unknown-model", `{"model":"nope","messages":[]}`, nil, 404},
		{"invalid-json", `{"model":`, nil, 400},
		{"unreadable-body", "not gzip", []string{"Content-Encoding", "gzip"}, 400},
	}
	for _, rf := range refusals {
		if st := post(t, ff.urls[0], "req-"+rf.name, rf.body, rf.headers...); st != rf.status {
			t.Fatalf("%s: %d, want %d", rf.name, st, rf.status)
		}
		if st := post(t, ff.urls[0], "req-"+rf.name+"-forced", rf.body, append(rf.headers, "X-Switchyard-Debug", "true")...); st != rf.status {
			t.Fatalf("%s, forced: %d, want %d", rf.name, st, rf.status)
		}
	}
	// A failure after an attempt is kept.
	ff.openai.AddRule(fakeprovider.Rule{Error: "openai.server_error"})
	post(t, ff.urls[0], "req-failed", body)
	if b := bundleOf(t, s, "req-forced"); b.Sampled != "forced" {
		t.Errorf("forced: %+v", b.Sampled)
	}
	if b := bundleOf(t, s, "req-unknown-model-forced"); b.Sampled != "forced" || b.Status != 404 || b.Outcome != debug.OutcomeRejected || b.ErrorCode != gwerror.ModelNotFound {
		t.Errorf("404, forced: %+v", b)
	}
	for _, rf := range refusals {
		bundleOf(t, s, "req-"+rf.name+"-forced")
	}
	if b := bundleOf(t, s, "req-failed"); b.Sampled != "failure" || len(b.Attempts) == 0 {
		t.Errorf("a failure after attempts: %+v", b)
	}
	// The plain success and the refusals were queued before the last
	// failure: they are not there.
	for _, id := range []string{"req-plain", "req-unknown-model", "req-invalid-json", "req-unreadable-body"} {
		if _, err := debug.Get(context.Background(), s, id); !errors.Is(err, debug.ErrNotFound) {
			t.Errorf("%s has a bundle: %v", id, err)
		}
	}
}

// No canary reaches a bundle, nor any KV value or stream message: prompts,
// bodies, the gateway key, provider secrets echoed in upstream errors.
func TestBundlesLeakNothing(t *testing.T) {
	const (
		promptCanary = "CANARY-PROMPT-7f3a"
		secretA1     = "sk-CANARY-SECRET-a1-0123456789abcdef"
		secretB1     = "sk-ant-CANARY-SECRET-b1-0123456789abcdef"
		secretB2     = "plainCANARY42" // no credential shape: masked by value only
	)
	all := 1.0
	ff := newFleet(t, 1, func(c *config.Config) {
		c.Debug.SampleSuccesses = &all
		c.Providers[0].Keys[0].Value = config.NewSecret(secretA1)
		c.Providers[1].Keys[0].Value = config.NewSecret(secretB1)
		c.Providers[1].Keys[1].Value = config.NewSecret(secretB2)
	})
	ff.openai.AddRule(fakeprovider.Rule{Key: secretA1, Error: "openai.invalid_api_key_unmasked"})
	ff.anthropic.AddRule(fakeprovider.Rule{Key: secretB1, Error: "anthropic.invalid_api_key_unmasked"})
	ff.anthropic.AddRule(fakeprovider.Rule{Key: secretB2, Error: "anthropic.invalid_api_key_unmasked"})
	ff.openai.AddRule(fakeprovider.Rule{Model: "demo-model", Error: "openai.bad_request_echo", Times: 1})
	bodies := []string{
		`{"model":"demo-chat","messages":[{"role":"user","content":"` + promptCanary + `"}]}`,
		`{"model":"demo-chat","stream":true,"messages":[{"role":"user","content":"` + promptCanary + `"}]}`,
		`{"model":"demo-claude","messages":[{"role":"user","content":"` + promptCanary + `"}]}`,
		`{"model":"demo-model","user":"` + promptCanary + `","messages":[{"role":"user","content":"` + promptCanary + `"}]}`,
	}
	for i, body := range bodies {
		for j := range 3 {
			post(t, ff.urls[0], fmt.Sprintf("req-canary-%d-%d", i, j), body)
		}
	}
	s := debugStream(t, ff.ns.ClientURL())
	bundleOf(t, s, "req-canary-3-2")
	if bb := bundleOf(t, s, "req-canary-2-0"); testing.Verbose() {
		data, _ := json.Marshal(bb.Attempts)
		t.Logf("%s", data)
	}
	canaries := []string{promptCanary, secretA1, secretB1, secretB2, clientSecret}
	check := func(where string, data []byte) {
		for _, c := range canaries {
			if strings.Contains(string(data), c) {
				t.Errorf("%s holds %q: %s", where, c, data)
			}
		}
	}
	// Every message of every stream, and every KV value (the buckets are
	// streams too).
	nc, js := testkit.ConnectNATS(t, ff.ns.ClientURL())
	_ = nc
	ctx := context.Background()
	streams := js.ListStreams(ctx)
	n := 0
	for info := range streams.Info() {
		st, err := js.Stream(ctx, info.Config.Name)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue // deleted or purged
			}
			check(info.Config.Name+" "+m.Subject, m.Data)
			n++
		}
	}
	if n == 0 {
		t.Fatal("read nothing")
	}
	t.Logf("%d messages read, no canary", n)
}

// With OTEL_TRACES_EXPORTER=otlp, a proxy (no NATS: traces do not need
// it) exports a trace per request: a server span with a client span per
// attempt, the request id as an attribute, the served model, no prompt.
func TestProxyExportsTraces(t *testing.T) {
	rcv := otlptest.Start(t)
	oa, an := startFakes(t)
	cfg := baseConfig(oa, an)
	oa.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.server_error"})
	env := otlptest.Env(rcv, "OTEL_TRACES_EXPORTER=otlp")
	_, url := startService(t, cfg, Deps{Log: testLogger(t), Environ: env})
	const prompt = "CANARY-TRACE-PROMPT"
	for i := range 2 {
		if st := post(t, url, fmt.Sprintf("req-trace-%d", i), `{"model":"demo-chat","messages":[{"role":"user","content":"`+prompt+`"}]}`); st != 200 {
			t.Fatalf("status %d", st)
		}
	}
	var spans []otlptest.Span
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		spans = rcv.Spans()
		roots := 0
		for _, s := range spans {
			if len(s.ParentSpanId) == 0 {
				roots++
			}
		}
		if roots < 2 {
			return fmt.Errorf("%d request spans", roots)
		}
		return nil
	})
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		a := otlptest.AttrMap(s.Attributes)
		if id := a["switchyard.request_id"]; id != nil && len(s.ParentSpanId) == 0 {
			byID[id.GetStringValue()] = s
		}
		for _, q := range rcv.Received() {
			if strings.Contains(string(q.Raw), prompt) {
				t.Fatal("a trace carries the prompt")
			}
		}
	}
	root, ok := byID["req-trace-0"]
	if !ok {
		t.Fatalf("no span with the request id; spans: %v", otlptest.Names(spans))
	}
	a := otlptest.AttrMap(root.Attributes)
	if a["gen_ai.request.model"].GetStringValue() != "demo-chat" || a["gen_ai.response.model"] == nil {
		t.Errorf("request span attributes %v", a)
	}
	children := 0
	for _, s := range spans {
		if string(s.TraceId) == string(root.TraceId) && len(s.ParentSpanId) > 0 {
			children++
		}
	}
	if children < 1 {
		t.Errorf("request 0 has %d attempt spans", children)
	}
}

// A caller that sends a W3C traceparent finds the request's spans in its
// own trace: the request span is a child of the caller's span. A request
// without one, or with one that is not valid, starts a trace of its own.
func TestProxyJoinsCallerTrace(t *testing.T) {
	const (
		tid = "0af7651916cd43dd8448eb211c80319c"
		sid = "b7ad6b7169203331"
	)
	rcv := otlptest.Start(t)
	oa, an := startFakes(t)
	env := otlptest.Env(rcv, "OTEL_TRACES_EXPORTER=otlp")
	_, url := startService(t, baseConfig(oa, an), Deps{Log: testLogger(t), Environ: env})
	body := `{"model":"demo-chat","messages":[{"role":"user","content":"hi"}]}`
	for id, h := range map[string][]string{
		"req-joined":  {"traceparent", "00-" + tid + "-" + sid + "-01", "tracestate", "vendor=abc"},
		"req-invalid": {"traceparent", "00-" + strings.ToUpper(tid) + "-" + sid + "-01"},
		"req-none":    nil,
	} {
		if st := post(t, url, id, body, h...); st != 200 {
			t.Fatalf("%s: status %d", id, st)
		}
	}
	roots := map[string]otlptest.Span{}
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, s := range rcv.Spans() {
			if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
				roots[otlptest.AttrMap(s.Attributes)["switchyard.request_id"].GetStringValue()] = s
			}
		}
		if len(roots) < 3 {
			return fmt.Errorf("%d request spans", len(roots))
		}
		return nil
	})
	joined := roots["req-joined"]
	if hex.EncodeToString(joined.TraceId) != tid || hex.EncodeToString(joined.ParentSpanId) != sid || joined.TraceState != "vendor=abc" {
		t.Errorf("joined: trace %x parent %x state %q, want %s, %s, vendor=abc", joined.TraceId, joined.ParentSpanId, joined.TraceState, tid, sid)
	}
	for _, id := range []string{"req-invalid", "req-none"} {
		if s := roots[id]; len(s.ParentSpanId) != 0 || hex.EncodeToString(s.TraceId) == tid {
			t.Errorf("%s: trace %x parent %x, want a trace of its own", id, s.TraceId, s.ParentSpanId)
		}
	}
	for _, s := range rcv.Spans() {
		if s.Kind == tracepb.Span_SPAN_KIND_CLIENT && bytes.Equal(s.TraceId, joined.TraceId) && !bytes.Equal(s.ParentSpanId, joined.SpanId) {
			t.Errorf("attempt span %s: parent %x, want the request span %x", s.Name, s.ParentSpanId, joined.SpanId)
		}
	}
}

// TestBundleAcksThatNeverCome: acknowledgements that never come (a stream
// without a leader while the connection stays up; here a subscriber that
// never answers) time out and free their places: the publisher does not
// stay full, refusing every later bundle.
func TestBundleAcksThatNeverCome(t *testing.T) {
	defer func(d time.Duration) { bundleAckTimeout = d }(bundleAckTimeout)
	bundleAckTimeout = 300 * time.Millisecond
	ns := startNATS(t, t.TempDir(), "127.0.0.1:0")
	t.Cleanup(func() { natsembed.Stop(ns) })
	nc, _ := testkit.ConnectNATS(t, ns.ClientURL())
	if _, err := nc.Subscribe("switchyard.debug.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{}
	b := newBundler(cfg, prometheus.NewRegistry(), nc, "test", nil, nil, slog.New(slog.DiscardHandler))
	if b.js == nil {
		t.Fatal("bundles not enabled")
	}
	for i := range 256 {
		if _, err := b.js.PublishAsync("switchyard.debug.failed.p.x", []byte("{}")); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := b.js.PublishAsyncPending(); n > 0 {
			return fmt.Errorf("%d acknowledgements still pending", n)
		}
		return nil
	})
	if _, err := b.js.PublishAsync("switchyard.debug.failed.p.y", []byte("{}")); err != nil {
		t.Fatalf("a publish after the lost acknowledgements: %v", err)
	}
	if n := testutil.ToFloat64(b.results.WithLabelValues("failed")); n < 256 {
		t.Errorf("%v bundles counted failed, want the 256 whose acknowledgements never came", n)
	}
}

// TestNoBundleForPlanRefusals: a caller refused by its own plan's limit
// gets no bundle (one per refusal of a client retrying against its limit
// would push every other request's bundle out of the stream); a forced one
// does.
func TestNoBundleForPlanRefusals(t *testing.T) {
	ff := newFleet(t, 1, func(c *config.Config) {
		c.Plans = map[string]config.Plan{"tiny": {RequestsPerMinute: 1}}
		c.Clients[0].Plan = "tiny"
	})
	s := debugStream(t, ff.ns.ClientURL())
	body := `{"model":"demo-model","messages":[{"role":"user","content":"hi"}]}`
	post(t, ff.urls[0], "req-first", body)
	if st := post(t, ff.urls[0], "req-limited", body); st != 429 {
		t.Fatalf("second request: %d, want 429", st)
	}
	if st := post(t, ff.urls[0], "req-limited-forced", body, "X-Switchyard-Debug", "true"); st != 429 {
		t.Fatalf("third request: %d, want 429", st)
	}
	bundleOf(t, s, "req-limited-forced") // written after req-limited: that one is settled
	if _, err := debug.Get(context.Background(), s, "req-limited"); !errors.Is(err, debug.ErrNotFound) {
		t.Errorf("a plan refusal has a bundle: %v", err)
	}
}
