package telemetry

import (
	"bytes"
	"context"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/services/proxy/internal/telemetry/otlptest"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/testkit"
)

// testBundle is a chat request that failed on fake-openai (rate limited,
// rotated) and was served by fake-anthropic.
func testBundle(at time.Time) *debug.Bundle {
	cost := 0.0042
	return &debug.Bundle{
		V: debug.SchemaVersion, RequestID: "req-7c1e", At: at, Instance: "proxy-1",
		Endpoint: "/v1/chat/completions", Stream: true,
		Client: "team-a", Plan: "gold", Access: "allowed",
		Model: "demo-chat", ModelLabel: "demo-chat",
		Route: &debug.Route{Name: "chain:demo-chat", Kind: "chain", Strategy: "priority",
			Steps: []debug.Step{{Step: 1, Target: "fake-openai/gpt-x", Tried: 1}, {Step: 2, Target: "fake-anthropic/claude-x", Tried: 2}}},
		Attempts: []debug.Attempt{
			{N: 1, Provider: "fake-openai", Model: "gpt-x", KeyID: "a1", Fingerprint: "fp-a1",
				StartMS: 2.5, DurationMS: 40, TTFTMS: 39, Status: 429, Class: "rate_limit",
				Error:  &debug.ProviderError{Code: "rate_limit_exceeded", Type: "requests", Message: "canary-message-3f9d Limit reached for sk-canary-key-81c2"},
				Action: "rotate", BackoffMS: 10},
			{N: 2, Provider: "fake-anthropic", Model: "claude-x", KeyID: "b1",
				StartMS: 52.5, DurationMS: 300, TTFTMS: 120, Status: 200, Action: "served", Probe: true, StreamCompleted: true},
		},
		Request:  debug.DigestOf([]byte(`{"messages":[{"role":"user","content":"canary-prompt-a61b"}]}`)),
		Status:   200,
		Outcome:  debug.OutcomeOK,
		Provider: "fake-anthropic", ServedModel: "claude-x-2025", KeyID: "b1",
		LatencyMS: 360, TTFTMS: 180, StreamCompleted: true,
		Tokens:  &debug.Tokens{Input: 12, Output: 34, CachedInput: 5},
		CostUSD: &cost,
		Sampled: "forced",
	}
}

// failedBundle is an embeddings request no target answered.
func failedBundle(at time.Time) *debug.Bundle {
	return &debug.Bundle{
		V: debug.SchemaVersion, RequestID: "req-dead", At: at, Endpoint: "/v1/embeddings",
		Access: "allowed", Model: "demo-embed", ModelLabel: "demo-embed",
		Attempts: []debug.Attempt{{N: 1, Provider: "fake-openai", Model: "embed-x", KeyID: "a2",
			StartMS: 1, DurationMS: 5, Class: "transport", Action: "stopped"}},
		Status: 502, Outcome: debug.OutcomeFailed, ErrorCode: "upstream_unavailable", Class: "transport",
		LatencyMS: 7,
	}
}

func TestTracerExportsRequestTrace(t *testing.T) {
	recv := otlptest.Start(t)
	env := otlptest.Env(recv,
		"OTEL_EXPORTER_OTLP_HEADERS=x-tenant=acme%20co,authorization=Bearer%20tok",
		"OTEL_EXPORTER_OTLP_TIMEOUT=5000",
		"OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=test,service.name=from-attrs",
		"OTEL_SERVICE_NAME=sy-test",
		"SWITCHYARD_UNRELATED=1",
	)
	tr, err := New(config.Telemetry{Traces: config.TracesOTLP, ServiceName: "from-config"}, env, "proxy-1", slog.New(slog.DiscardHandler))
	if err != nil || tr == nil {
		t.Fatalf("newTracer: %v, %v", tr, err)
	}
	types := map[string]string{"fake-openai": "azure", "fake-anthropic": "anthropic"}
	tr.ProviderType = func(p string) string { return types[p] }

	at := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)
	tr.Export(testBundle(at))
	tr.Export(failedBundle(at.Add(time.Second)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	spans := recv.Spans()
	if len(spans) != 5 {
		t.Fatalf("received %d spans, want 5 (2 requests, 3 attempts)", len(spans))
	}
	byName := map[string]otlptest.Span{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	root, a1, a2 := byName["chat demo-chat"], byName["chat gpt-x"], byName["chat claude-x"]
	froot, fa := byName["embeddings demo-embed"], byName["embeddings embed-x"]
	for name, s := range map[string]otlptest.Span{"chat demo-chat": root, "chat gpt-x": a1, "chat claude-x": a2, "embeddings demo-embed": froot, "embeddings embed-x": fa} {
		if s.Span == nil {
			t.Fatalf("no span %q; got %v", name, otlptest.Names(spans))
		}
	}

	// The resource.
	res := root.Resource
	wantStr(t, "resource", res, "service.name", "sy-test")
	wantStr(t, "resource", res, "service.instance.id", "proxy-1")
	wantStr(t, "resource", res, "deployment.environment.name", "test")
	wantStr(t, "resource", res, "telemetry.sdk.language", "go")

	// Tree: each request is a trace; its attempts are its root's children.
	if len(root.ParentSpanId) != 0 || root.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("root: parent %x kind %v, want none and server", root.ParentSpanId, root.Kind)
	}
	for _, a := range []otlptest.Span{a1, a2} {
		if !bytes.Equal(a.TraceId, root.TraceId) || !bytes.Equal(a.ParentSpanId, root.SpanId) || a.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("%s: trace %x parent %x kind %v, want trace %x parent %x client",
				a.Name, a.TraceId, a.ParentSpanId, a.Kind, root.TraceId, root.SpanId)
		}
	}
	if bytes.Equal(froot.TraceId, root.TraceId) || !bytes.Equal(fa.ParentSpanId, froot.SpanId) {
		t.Errorf("second request: trace %x (first %x), attempt parent %x, want its own trace and root %x",
			froot.TraceId, root.TraceId, fa.ParentSpanId, froot.SpanId)
	}

	// Times: the bundle's, attempts at their offsets.
	ns := func(d time.Duration) uint64 { return uint64(at.Add(d).UnixNano()) }
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, c := range []struct {
		s          otlptest.Span
		start, end time.Duration
	}{
		{root, 0, ms(360)},
		{a1, ms(2.5), ms(42.5)},
		{a2, ms(52.5), ms(352.5)},
		{froot, time.Second, time.Second + ms(7)},
		{fa, time.Second + ms(1), time.Second + ms(6)},
	} {
		if c.s.StartTimeUnixNano != ns(c.start) || c.s.EndTimeUnixNano != ns(c.end) {
			t.Errorf("%s: %d..%d, want %d..%d (at+%s..at+%s)", c.s.Name,
				c.s.StartTimeUnixNano, c.s.EndTimeUnixNano, ns(c.start), ns(c.end), c.start, c.end)
		}
	}

	// The request's attributes.
	ra := otlptest.AttrMap(root.Attributes)
	wantStr(t, root.Name, ra, "gen_ai.operation.name", "chat")
	wantStr(t, root.Name, ra, "gen_ai.system", "anthropic")
	wantStr(t, root.Name, ra, "gen_ai.provider.name", "anthropic")
	wantStr(t, root.Name, ra, "gen_ai.request.model", "demo-chat")
	wantStr(t, root.Name, ra, "gen_ai.response.model", "claude-x-2025")
	wantInt(t, root.Name, ra, "gen_ai.usage.input_tokens", 12)
	wantInt(t, root.Name, ra, "gen_ai.usage.output_tokens", 34)
	wantInt(t, root.Name, ra, "gen_ai.usage.cache_read.input_tokens", 5)
	wantStr(t, root.Name, ra, "switchyard.request_id", "req-7c1e")
	wantStr(t, root.Name, ra, "switchyard.route", "chain:demo-chat")
	wantStr(t, root.Name, ra, "switchyard.client", "team-a")
	wantStr(t, root.Name, ra, "switchyard.provider", "fake-anthropic")
	wantStr(t, root.Name, ra, "switchyard.key_id", "b1")
	wantStr(t, root.Name, ra, "switchyard.outcome", "ok")
	wantInt(t, root.Name, ra, "http.response.status_code", 200)
	wantInt(t, root.Name, ra, "switchyard.attempts", 2)
	if _, ok := ra["gen_ai.response.finish_reasons"]; ok {
		t.Errorf("%s: finish reasons exported, but the bundle has none", root.Name)
	}
	if _, ok := ra["error.type"]; ok {
		t.Errorf("%s: error.type on a request served", root.Name)
	}
	if root.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("%s: status %v, want not an error", root.Name, root.Status)
	}

	// The attempts'.
	aa := otlptest.AttrMap(a1.Attributes)
	wantStr(t, a1.Name, aa, "gen_ai.system", "az.ai.openai")
	wantStr(t, a1.Name, aa, "gen_ai.request.model", "gpt-x")
	wantStr(t, a1.Name, aa, "switchyard.provider", "fake-openai")
	wantStr(t, a1.Name, aa, "switchyard.key_id", "a1")
	wantStr(t, a1.Name, aa, "switchyard.class", "rate_limit")
	wantStr(t, a1.Name, aa, "switchyard.action", "rotate")
	wantStr(t, a1.Name, aa, "switchyard.error_code", "rate_limit_exceeded")
	wantStr(t, a1.Name, aa, "error.type", "rate_limit_exceeded")
	wantInt(t, a1.Name, aa, "http.response.status_code", 429)
	wantInt(t, a1.Name, aa, "switchyard.attempt", 1)
	if a1.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || a1.Status.GetMessage() != "rate_limit_exceeded" {
		t.Errorf("%s: status %v, want error rate_limit_exceeded", a1.Name, a1.Status)
	}
	if _, ok := aa["gen_ai.response.model"]; ok {
		t.Errorf("%s: a response model on an attempt that did not serve", a1.Name)
	}
	sa := otlptest.AttrMap(a2.Attributes)
	wantStr(t, a2.Name, sa, "gen_ai.system", "anthropic")
	wantStr(t, a2.Name, sa, "gen_ai.response.model", "claude-x-2025")
	wantStr(t, a2.Name, sa, "switchyard.action", "served")
	wantStr(t, a2.Name, sa, "switchyard.key_id", "b1")
	wantInt(t, a2.Name, sa, "http.response.status_code", 200)
	if v := sa["switchyard.probe"]; !v.GetBoolValue() {
		t.Errorf("%s: switchyard.probe %v, want true", a2.Name, v)
	}
	if a2.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("%s: status %v, want not an error", a2.Name, a2.Status)
	}

	// The failed request.
	fra := otlptest.AttrMap(froot.Attributes)
	wantStr(t, froot.Name, fra, "gen_ai.operation.name", "embeddings")
	wantStr(t, froot.Name, fra, "gen_ai.system", "az.ai.openai") // the last provider tried
	wantStr(t, froot.Name, fra, "switchyard.outcome", "failed")
	wantStr(t, froot.Name, fra, "error.type", "upstream_unavailable")
	wantInt(t, froot.Name, fra, "http.response.status_code", 502)
	if froot.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || froot.Status.GetMessage() != "upstream_unavailable" {
		t.Errorf("%s: status %v, want error upstream_unavailable", froot.Name, froot.Status)
	}
	if _, ok := fra["gen_ai.usage.input_tokens"]; ok {
		t.Errorf("%s: token usage without tokens", froot.Name)
	}
	if fa.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || fa.Status.GetMessage() != "transport" {
		t.Errorf("%s: status %v, want error transport", fa.Name, fa.Status)
	}

	// The exporter: OTLP/HTTP to the traces path, with the headers asked.
	received := recv.Received()
	for i, q := range received {
		if h := q.Header; q.Path != "/v1/traces" || h.Get("X-Tenant") != "acme co" || h.Get("Authorization") != "Bearer tok" {
			t.Errorf("request %d: path %q headers %v, want /v1/traces with x-tenant and authorization", i, q.Path, h)
		}
	}
	// Nothing of the prompt, the provider's message or the key.
	for _, q := range received {
		raw := q.Raw
		for _, canary := range []string{"canary-message-3f9d", "sk-canary-key-81c2", "canary-prompt-a61b", "fp-a1"} {
			if bytes.Contains(raw, []byte(canary)) || strings.Contains(hex.EncodeToString(raw), hex.EncodeToString([]byte(canary))) {
				t.Errorf("exported spans hold %q", canary)
			}
		}
	}
}

func wantStr(t *testing.T, what string, m map[string]*commonpb.AnyValue, k, want string) {
	t.Helper()
	if v, ok := m[k]; !ok || v.GetStringValue() != want {
		t.Errorf("%s: %s = %v, want %q", what, k, v, want)
	}
}

func wantInt(t *testing.T, what string, m map[string]*commonpb.AnyValue, k string, want int64) {
	t.Helper()
	if v, ok := m[k]; !ok || v.GetIntValue() != want {
		t.Errorf("%s: %s = %v, want %d", what, k, v, want)
	}
}

// Tracing is off unless asked for; OTEL_SDK_DISABLED and traces: none win.
func TestTracerOffByDefault(t *testing.T) {
	recv := otlptest.Start(t)
	for _, c := range []struct {
		name   string
		traces string
		env    []string
		on     bool
	}{
		{"nothing set", "", nil, false},
		{"exporter none", "", []string{"OTEL_TRACES_EXPORTER=none"}, false},
		{"exporter otlp", "", []string{"OTEL_TRACES_EXPORTER=otlp"}, true},
		{"exporter list", "", []string{"OTEL_TRACES_EXPORTER=console, otlp"}, true},
		{"config otlp", "otlp", nil, true},
		{"config none wins", "none", []string{"OTEL_TRACES_EXPORTER=otlp"}, false},
		{"config otlp wins over exporter none", "otlp", []string{"OTEL_TRACES_EXPORTER=none"}, true},
		{"sdk disabled wins", "otlp", []string{"OTEL_SDK_DISABLED=TRUE", "OTEL_TRACES_EXPORTER=otlp"}, false},
		{"sdk disabled false", "otlp", []string{"OTEL_SDK_DISABLED=false"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := New(config.Telemetry{Traces: c.traces}, otlptest.Env(recv, c.env...), "p", nil)
			if err != nil {
				t.Fatalf("newTracer: %v", err)
			}
			if (tr != nil) != c.on {
				t.Fatalf("tracer %v, want on=%v", tr, c.on)
			}
			tr.Export(testBundle(time.Now())) // a nil tracer does nothing
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
		})
	}
	var nilTracer *Tracer
	nilTracer.Export(nil)
}

// sample_ratio 0 exports nothing.
func TestTracerSampleRatio(t *testing.T) {
	recv := otlptest.Start(t)
	zero := 0.0
	tr, err := New(config.Telemetry{Traces: "otlp", SampleRatio: &zero}, otlptest.Env(recv), "p", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		tr.Export(testBundle(time.Now()))
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(recv.Spans()); n != 0 {
		t.Fatalf("%d spans exported at sample_ratio 0", n)
	}
}

// Bad settings are errors naming the key or the variable (never a header's
// value).
func TestTracerBadConfig(t *testing.T) {
	for _, c := range []struct {
		env  string
		want string
	}{
		{"OTEL_EXPORTER_OTLP_ENDPOINT=collector:4318", "OTEL_EXPORTER_OTLP_ENDPOINT: want an http:// or https:// URL"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=ftp://collector", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: want an http:// or https:// URL"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc: the proxy exports traces over http/protobuf only"},
		{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT=10s", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: want milliseconds"},
		{"OTEL_EXPORTER_OTLP_COMPRESSION=zstd", "OTEL_EXPORTER_OTLP_COMPRESSION: want gzip or none"},
		{"OTEL_EXPORTER_OTLP_INSECURE=yes-please", "OTEL_EXPORTER_OTLP_INSECURE: want true or false"},
		{"OTEL_EXPORTER_OTLP_TRACES_HEADERS=authorization=Bearer sekrit-9a1,broken", "OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 2: want key=value"},
		{"OTEL_EXPORTER_OTLP_CERTIFICATE=/nonexistent/ca.pem", "OTEL_EXPORTER_OTLP_CERTIFICATE: open /nonexistent/ca.pem"},
		{"OTEL_EXPORTER_OTLP_CLIENT_KEY=/k.pem", "OTEL_EXPORTER_OTLP_CLIENT_KEY is set without OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
		{"OTEL_BSP_MAX_QUEUE_SIZE=-1", "OTEL_BSP_MAX_QUEUE_SIZE: want a positive integer"},
	} {
		tr, err := New(config.Telemetry{Traces: "otlp"}, []string{c.env}, "p", nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: tracer %v, error %v, want %q", c.env, tr, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "sekrit") {
			t.Errorf("%s: the error shows a header's value: %v", c.env, err)
		}
	}
	// The same variables are not read when tracing is off.
	if tr, err := New(config.Telemetry{}, []string{"OTEL_EXPORTER_OTLP_PROTOCOL=grpc"}, "p", nil); tr != nil || err != nil {
		t.Errorf("tracing off: %v, %v", tr, err)
	}

	// The configuration's keys.
	ratio := 1.5
	cfg := config.Defaults()
	cfg.Telemetry = config.Telemetry{Traces: "zipkin", ServiceName: "  ", SampleRatio: &ratio}
	err := cfg.Validate()
	for _, want := range []string{
		`telemetry.traces: unknown value "zipkin" (want one of: otlp, none)`,
		"telemetry.service_name: must not be blank",
		"telemetry.sample_ratio: must be from 0 to 1, got 1.5",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %q", err, want)
		}
	}
	cfg.Telemetry = config.Telemetry{Traces: "otlp"}
	if err := cfg.Validate(); err != nil && strings.Contains(err.Error(), "telemetry") {
		t.Errorf("Validate: %v", err)
	}
	if cfg.Telemetry.Service() != "switchyard-proxy" || cfg.Telemetry.Ratio() != 1 {
		t.Errorf("defaults: %q %g", cfg.Telemetry.Service(), cfg.Telemetry.Ratio())
	}
	if tr, err := New(config.Telemetry{Traces: "zipkin"}, nil, "p", nil); tr != nil || err == nil {
		t.Errorf("traces: zipkin: %v, %v", tr, err)
	}
}

// A collector that is down or hangs never blocks export, and shutdown
// returns when its context ends.
func TestTracerCollectorDownDoesNotBlock(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()

	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)

	for name, endpoint := range map[string]string{"refused": down, "hanging": hang.URL} {
		t.Run(name, func(t *testing.T) {
			env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=5", "OTEL_BSP_MAX_QUEUE_SIZE=64",
				"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20sekrit-44d0"}
			var logs testkit.SyncBuffer
			tr, err := New(config.Telemetry{Traces: "otlp"}, env, "p", slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			b := testBundle(time.Now())
			for range 2000 { // beyond the queue: dropped, not waited for
				tr.Export(b)
			}
			d := time.Since(start)
			if d > 2*time.Second {
				t.Errorf("2000 exports took %s", d)
			}
			t.Logf("2000 exports: %s", d)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start = time.Now()
			err = tr.Shutdown(ctx)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("shutdown took %s with a 200ms context", d)
			}
			t.Logf("shutdown: %v", err)
			out := logs.String()
			if n := strings.Count(out, "OTLP trace export failed"); n > 1 {
				t.Errorf("%d export failures logged, want at most 1 a minute:\n%s", n, out)
			}
			if name == "refused" && !strings.Contains(out, "OTLP trace export failed") {
				t.Errorf("a refused export not logged:\n%s", out)
			}
			if strings.Contains(out, "sekrit") {
				t.Errorf("the logs show a header's value:\n%s", out)
			}
		})
	}
}

// BenchmarkTracerExport is the cost of one request's trace (a root and two
// attempt spans) on the bundle worker: building the spans and queueing
// them for the batch processor, which sends them to an in-process
// receiver. Spans beyond the processor's queue are dropped, as in
// production.
func BenchmarkTracerExport(b *testing.B) {
	for _, c := range []struct {
		name  string
		ratio float64
	}{{"sampled", 1}, {"unsampled", 0}} {
		b.Run(c.name, func(b *testing.B) {
			recv := otlptest.Start(b)
			ratio := c.ratio
			tr, err := New(config.Telemetry{Traces: "otlp", SampleRatio: &ratio}, otlptest.Env(recv), "p", nil)
			if err != nil {
				b.Fatal(err)
			}
			bundle := testBundle(time.Now())
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				tr.Export(bundle)
			}
			b.StopTimer()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tr.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// A bundle with the caller's trace context is exported into the caller's
// trace: its root span's parent is the caller's span. sample_ratio
// decides whether it is exported, or, with follow_caller_sampling, the
// caller's sampled flag does, both ways.
func TestTracerJoinsCallerTrace(t *testing.T) {
	const (
		tid = "4bf92f3577b34da6a3ce929d0e0e4736"
		sid = "00f067aa0ba902b7"
	)
	for _, c := range []struct {
		name   string
		follow bool
		ratio  float64
		flags  string
		spans  int
	}{
		{"sampled caller, ratio 1", false, 1, "01", 3},
		{"sampled caller, ratio 0", false, 0, "01", 0},
		{"caller not sampled, ratio 1", false, 1, "00", 3},
		{"following the caller: sampled, ratio 0", true, 0, "01", 3},
		{"following the caller: not sampled, ratio 1", true, 1, "00", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			recv := otlptest.Start(t)
			ratio := c.ratio
			tr, err := New(config.Telemetry{Traces: "otlp", SampleRatio: &ratio, FollowCallerSampling: c.follow}, otlptest.Env(recv), "p", nil)
			if err != nil {
				t.Fatal(err)
			}
			b := testBundle(time.Now())
			b.TraceParent, b.TraceState = "00-"+tid+"-"+sid+"-"+c.flags, "rojo=1"
			tr.Export(b)
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := recv.Spans()
			if len(spans) != c.spans {
				t.Fatalf("%d spans, want %d", len(spans), c.spans)
			}
			for _, s := range spans {
				if hex.EncodeToString(s.TraceId) != tid {
					t.Errorf("%s: trace %x, want the caller's %s", s.Name, s.TraceId, tid)
				}
				if s.Kind == tracepb.Span_SPAN_KIND_SERVER && (hex.EncodeToString(s.ParentSpanId) != sid || s.TraceState != "rojo=1") {
					t.Errorf("request span: parent %x state %q, want the caller's span %s and state rojo=1", s.ParentSpanId, s.TraceState, sid)
				}
			}
		})
	}
}

// TestSpanNamesAndStatusOfRefusals: a model name the caller made up never
// names a span (it would be a new span name, and span-derived metric,
// per request), and a request refused with a 4xx is the caller's error: its
// server span's status stays unset.
func TestSpanNamesAndStatusOfRefusals(t *testing.T) {
	recv := otlptest.Start(t)
	tr, err := New(config.Telemetry{Traces: config.TracesOTLP}, otlptest.Env(recv), "proxy-1", slog.New(slog.DiscardHandler))
	if err != nil || tr == nil {
		t.Fatalf("newTracer: %v, %v", tr, err)
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	tr.Export(&debug.Bundle{V: debug.SchemaVersion, RequestID: "req-404", At: at, Endpoint: "/v1/chat/completions",
		Model: "made-up-" + strings.Repeat("x", 300), ModelLabel: debug.ModelUnknown, Status: 404,
		Outcome: debug.OutcomeRejected, ErrorCode: gwerror.ModelNotFound, LatencyMS: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	spans := recv.Spans()
	if len(spans) != 1 || spans[0].Name != "chat "+debug.ModelUnknown {
		t.Fatalf("spans %v", otlptest.Names(spans))
	}
	if c := spans[0].GetStatus().GetCode(); c != tracepb.Status_STATUS_CODE_UNSET {
		t.Errorf("a 404's server span has status %v", c)
	}
	if m := otlptest.AttrMap(spans[0].Attributes)["gen_ai.request.model"]; len(m.GetStringValue()) != maxModelAttr {
		t.Errorf("gen_ai.request.model of %d bytes", len(m.GetStringValue()))
	}
	for endpoint, want := range map[string]string{"/v1/chat/completions": "chat", "/v1/messages": "chat", "/v1/responses": "chat",
		"/v1/completions": "text_completion", "/v1/embeddings": "embeddings", "/v1/images/generations": "generations",
		"/v1/audio/speech": "speech", "/:provider/*": "passthrough"} {
		if got := genAIOperation(endpoint); got != want {
			t.Errorf("genAIOperation(%s) = %q, want %q", endpoint, got, want)
		}
	}
}
