package proxy

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"switchyard.dev/services/proxy/internal/telemetry/otlptest"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

const (
	testTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	testSpanID  = "00f067aa0ba902b7"
)

// An upstream request carries the request's trace on: with traces
// exported, each attempt's traceparent names that attempt's exported span
// in the caller's trace (or the trace the proxy started), and the sampled
// flag is the exporter's decision; without export, the caller's context
// passes through unchanged, and nothing is sent when the caller sent none.
func TestUpstreamTraceContext(t *testing.T) {
	body := `{"model":"demo-chat","messages":[{"role":"user","content":"hi"}]}`
	callerParent := "00-" + testTraceID + "-" + testSpanID + "-01"
	upstreamTrace := func(oa *fakeprovider.Server) []string {
		var out []string
		for _, c := range oa.Calls() {
			out = append(out, c.Header.Get("Traceparent")+" "+c.Header.Get("Tracestate"))
		}
		return out
	}

	t.Run("exported", func(t *testing.T) {
		rcv := otlptest.Start(t)
		oa, an := startFakes(t)
		oa.AddRule(fakeprovider.Rule{Key: "key-a1", Error: "openai.server_error"}) // two failed attempts, then a2
		_, url := startService(t, baseConfig(oa, an), Deps{Log: testLogger(t), Environ: otlptest.Env(rcv, "OTEL_TRACES_EXPORTER=otlp")})
		for id, h := range map[string][]string{
			"req-caller": {"traceparent", callerParent, "tracestate", "vendor=abc"},
			"req-own":    nil,
		} {
			oa.ResetCalls()
			if st := post(t, url, id, body, h...); st != 200 {
				t.Fatalf("%s: status %d", id, st)
			}
			sent := upstreamTrace(oa)
			if len(sent) != 3 {
				t.Fatalf("%s: %d upstream calls, want 3", id, len(sent))
			}
			var spans []otlptest.Span
			testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
				spans = nil
				for _, s := range rcv.Spans() {
					if otlptest.AttrMap(s.Attributes)["switchyard.request_id"].GetStringValue() == id {
						spans = append(spans, s)
					}
				}
				if len(spans) < 4 {
					return fmt.Errorf("%s: %d spans", id, len(spans))
				}
				return nil
			})
			var root otlptest.Span
			attempts := map[string]otlptest.Span{} // by span id
			for _, s := range spans {
				if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
					root = s
				} else {
					attempts[fmt.Sprintf("%x", s.SpanId)] = s
				}
			}
			traceID := fmt.Sprintf("%x", root.TraceId)
			if id == "req-caller" && (traceID != testTraceID || fmt.Sprintf("%x", root.ParentSpanId) != testSpanID) {
				t.Errorf("%s: root in trace %s under %x, want the caller's", id, traceID, root.ParentSpanId)
			}
			if id == "req-own" && (traceID == testTraceID || len(root.ParentSpanId) != 0) {
				t.Errorf("%s: root in trace %s under %x, want a trace of its own", id, traceID, root.ParentSpanId)
			}
			seen := map[string]bool{}
			for i, s := range sent {
				parent, state, _ := strings.Cut(s, " ")
				f := strings.Split(parent, "-")
				flags := map[string]string{"req-caller": "01", "req-own": "03"}[id] // sampled; random when the proxy drew the trace id
				if len(f) != 4 || f[0] != "00" || f[1] != traceID || f[3] != flags {
					t.Fatalf("%s: attempt %d sent %q, want 00-%s-<span>-%s", id, i+1, parent, traceID, flags)
				}
				a, ok := attempts[f[2]]
				if !ok || seen[f[2]] || fmt.Sprintf("%x", a.ParentSpanId) != fmt.Sprintf("%x", root.SpanId) {
					t.Errorf("%s: attempt %d's upstream parent %s is not an attempt span of its own (attempt spans %v)", id, i+1, f[2], slices.Sorted(maps.Keys(attempts)))
				}
				seen[f[2]] = true
				if want := map[string]string{"req-caller": "vendor=abc"}[id]; state != want {
					t.Errorf("%s: tracestate %q, want %q", id, state, want)
				}
			}
		}
	})

	// Passthrough carries the trace on the same way: the caller's trace,
	// the gateway's attempt span as the upstream's parent when exported,
	// the caller's own context otherwise.
	passthrough := func(t *testing.T, url, parent string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url+"/fake-openai/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+clientSecret)
		req.Header.Set("Traceparent", parent)
		req.Header.Set("TraceState", "vendor=abc")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("passthrough: status %d", resp.StatusCode)
		}
	}
	for _, export := range []bool{true, false} {
		t.Run(fmt.Sprintf("passthrough, exported %v", export), func(t *testing.T) {
			rcv := otlptest.Start(t)
			oa, an := startFakes(t)
			deps := Deps{Log: testLogger(t)}
			if export {
				deps.Environ = otlptest.Env(rcv, "OTEL_TRACES_EXPORTER=otlp")
			}
			_, url := startService(t, baseConfig(oa, an), deps)
			// A traceparent that is not valid is not passed on, whatever
			// its header's spelling.
			passthrough(t, url, "00-"+strings.ToUpper(testTraceID)+"-"+testSpanID+"-01")
			if c := oa.Calls(); len(c) != 1 || (!export && (c[0].Header.Get("Traceparent") != "" || c[0].Header.Get("Tracestate") != "")) {
				t.Fatalf("an invalid traceparent: upstream trace headers %q %q", c[0].Header.Values("Traceparent"), c[0].Header.Values("Tracestate"))
			}
			oa.ResetCalls()
			passthrough(t, url, callerParent)
			calls := oa.Calls()
			if len(calls) != 1 || len(calls[0].Header.Values("Traceparent")) != 1 || calls[0].Header.Get("Tracestate") != "vendor=abc" {
				t.Fatalf("upstream calls %d, trace headers %q %q", len(calls), calls[0].Header.Values("Traceparent"), calls[0].Header.Values("Tracestate"))
			}
			sent := strings.Split(calls[0].Header.Get("Traceparent"), "-")
			if !export {
				if got := strings.Join(sent, "-"); got != callerParent {
					t.Errorf("upstream traceparent %q, want the caller's %q", got, callerParent)
				}
				return
			}
			if len(sent) != 4 || sent[1] != testTraceID || sent[2] == testSpanID {
				t.Fatalf("upstream traceparent %q, want the caller's trace under the gateway's span", sent)
			}
			testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
				for _, s := range rcv.Spans() {
					if s.Kind == tracepb.Span_SPAN_KIND_CLIENT && fmt.Sprintf("%x", s.SpanId) == sent[2] && fmt.Sprintf("%x", s.TraceId) == testTraceID {
						return nil
					}
				}
				return fmt.Errorf("no exported attempt span %s in trace %s", sent[2], testTraceID)
			})
		})
	}

	// The upstream's sampled flag is the exporter's decision: off at
	// sample_ratio 0, whatever a caller says, unless the proxy follows
	// callers' sampling.
	for _, c := range []struct {
		name    string
		follow  bool
		headers []string
		flag    string
	}{
		{"ratio 0", false, nil, "02"}, // not sampled, a random trace id
		{"ratio 0, a sampled caller", false, []string{"traceparent", callerParent}, "00"},
		{"ratio 0, following a sampled caller", true, []string{"traceparent", callerParent}, "01"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rcv := otlptest.Start(t)
			oa, an := startFakes(t)
			cfg := baseConfig(oa, an)
			zero := 0.0
			cfg.Telemetry = config.Telemetry{Traces: config.TracesOTLP, SampleRatio: &zero, FollowCallerSampling: c.follow}
			_, url := startService(t, cfg, Deps{Log: testLogger(t), Environ: otlptest.Env(rcv)})
			if st := post(t, url, "req-sampling", body, c.headers...); st != 200 {
				t.Fatalf("status %d", st)
			}
			sent := upstreamTrace(oa)
			if len(sent) != 1 || !strings.HasPrefix(sent[0], "00-") || !strings.HasSuffix(strings.TrimSpace(sent[0]), "-"+c.flag) {
				t.Fatalf("upstream trace context %q, want one traceparent with flags %s", sent, c.flag)
			}
		})
	}

	t.Run("not exported", func(t *testing.T) {
		oa, an := startFakes(t)
		_, url := startService(t, baseConfig(oa, an), Deps{Log: testLogger(t)})
		if st := post(t, url, "req-pass", body, "traceparent", "00-"+testTraceID+"-"+testSpanID+"-03", "tracestate", "vendor=abc"); st != 200 {
			t.Fatalf("status %d", st)
		}
		if st := post(t, url, "req-bad", body, "traceparent", "00-"+strings.ToUpper(testTraceID)+"-"+testSpanID+"-01", "tracestate", "vendor=abc"); st != 200 {
			t.Fatalf("status %d", st)
		}
		if st := post(t, url, "req-none", body); st != 200 {
			t.Fatalf("status %d", st)
		}
		want := []string{"00-" + testTraceID + "-" + testSpanID + "-03 vendor=abc", " ", " "}
		if got := upstreamTrace(oa); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("upstream trace context %q, want %q (the caller's unchanged, then none for an invalid one and for none)", got, want)
		}
	})
}

// Several tracestate headers go upstream as one list (internal/telemetry
// checks the list); several traceparent headers are not a valid one.
func TestCallerTraceState(t *testing.T) {
	oa, an := startFakes(t)
	_, url := startService(t, baseConfig(oa, an), Deps{Log: testLogger(t)})
	for _, c := range []struct {
		parents []string
		want    string
	}{
		{[]string{"00-" + testTraceID + "-" + testSpanID + "-01"}, "00-" + testTraceID + "-" + testSpanID + "-01 rojo=1,congo=2"},
		{[]string{"00-" + testTraceID + "-" + testSpanID + "-01", "00-" + testTraceID + "-" + testSpanID + "-00"}, " "},
	} {
		oa.ResetCalls()
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"demo-chat","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+clientSecret)
		for _, p := range c.parents {
			req.Header.Add("traceparent", p)
		}
		req.Header.Add("tracestate", "rojo=1")
		req.Header.Add("tracestate", "congo=2")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		calls := oa.Calls()
		if len(calls) != 1 {
			t.Fatalf("%d upstream calls", len(calls))
		}
		if got := calls[0].Header.Get("Traceparent") + " " + strings.Join(calls[0].Header.Values("Tracestate"), ";"); got != c.want {
			t.Errorf("%d traceparent headers: upstream got %q, want %q", len(c.parents), got, c.want)
		}
	}
}
