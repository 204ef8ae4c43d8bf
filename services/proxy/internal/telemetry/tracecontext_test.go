package telemetry

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The W3C specification's example ids.
const (
	testTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	testSpanID  = "00f067aa0ba902b7"
)

// A traceparent is read as the W3C specification says; a valid one comes
// back in version-00 form.
func TestParseTraceParent(t *testing.T) {
	tid, sid := testTraceID, testSpanID
	for _, c := range []struct {
		name, in, want string // want "": not valid
	}{
		{"sampled", "00-" + tid + "-" + sid + "-01", "00-" + tid + "-" + sid + "-01"},
		{"not sampled", "00-" + tid + "-" + sid + "-00", "00-" + tid + "-" + sid + "-00"},
		{"random bit kept", "00-" + tid + "-" + sid + "-03", "00-" + tid + "-" + sid + "-03"},
		{"reserved bit in version 00", "00-" + tid + "-" + sid + "-09", ""},
		{"a later version's extra field", "01-" + tid + "-" + sid + "-01-what-comes-next", "00-" + tid + "-" + sid + "-01"},
		{"a later version's reserved bits dropped", "cc-" + tid + "-" + sid + "-09", "00-" + tid + "-" + sid + "-01"},
		{"a later version, no dash after the flags", "01-" + tid + "-" + sid + "-01x", ""},
		{"version ff", "ff-" + tid + "-" + sid + "-01", ""},
		{"upper-case hex", "00-" + strings.ToUpper(tid) + "-" + sid + "-01", ""},
		{"zero trace id", "00-00000000000000000000000000000000-" + sid + "-01", ""},
		{"zero span id", "00-" + tid + "-0000000000000000-01", ""},
		{"version 00 too long", "00-" + tid + "-" + sid + "-01-x", ""},
		{"short", "00-" + tid[:31] + "-" + sid + "-01", ""},
		{"not one", "hello", ""},
		{"none", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			gotT, gotS, flags, ok := ParseTraceParent([]byte(c.in))
			got := ""
			if ok {
				got = string(AppendTraceParent(nil, gotT, gotS, flags))
			}
			if got != c.want {
				t.Errorf("ParseTraceParent(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// FuzzParseTraceParent: the request path's parser agrees with
// OpenTelemetry's propagator (which the exporter uses) on any header.
func FuzzParseTraceParent(f *testing.F) {
	for _, s := range []string{"00-" + testTraceID + "-" + testSpanID + "-01", "01-" + testTraceID + "-" + testSpanID + "-03-x",
		"ff-" + testTraceID + "-" + testSpanID + "-01", "00-" + testTraceID + "-" + testSpanID + "-04", "", "00--",
		"00-" + testTraceID + "-" + testSpanID + "-01-", "fe-" + testTraceID + "-" + testSpanID + "-ff-"} {
		f.Add(s)
	}
	var prop propagation.TraceContext
	f.Fuzz(func(t *testing.T, h string) {
		tid, sid, flags, ok := ParseTraceParent([]byte(h))
		sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier{"traceparent": h}))
		if !ok && sc.IsValid() && len(h) == 56 && strings.HasPrefix(h, "00-") && h[55] == '-' {
			return // version 00 with a dash after its flags: the propagator's leniency, not the specification's
		}
		if ok != sc.IsValid() {
			t.Fatalf("%q: ours %v, propagator's %v", h, ok, sc.IsValid())
		}
		if ok && (tid != sc.TraceID() || sid != sc.SpanID() || flags != sc.TraceFlags()) {
			t.Fatalf("%q: ours %s %s %02x, propagator's %s %s %02x", h, tid, sid, flags, sc.TraceID(), sc.SpanID(), sc.TraceFlags())
		}
	})
}

// Several tracestate headers are one list; one that does not parse, or a
// list over 512 bytes, is dropped.
func TestCallerTraceState(t *testing.T) {
	var five []string // 5 members of 98 bytes: 494 with their commas
	for i := range 5 {
		five = append(five, fmt.Sprintf("k%d=%s", i, strings.Repeat("a", 95)))
	}
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"rojo=1"}, "rojo=1"},
		{[]string{"rojo=1", "congo=2"}, "rojo=1,congo=2"},
		{[]string{"rojo=1", "not a member"}, ""},
		{append(five[:5:5], "z="+strings.Repeat("b", 15)), strings.Join(five, ",") + ",z=" + strings.Repeat("b", 15)}, // 512
		{append(five[:5:5], "z="+strings.Repeat("b", 16)), ""},                                                        // 513
	} {
		var hs [][]byte
		for _, v := range c.in {
			hs = append(hs, []byte(v))
		}
		if got := callerTraceState(hs); got != c.want {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}
