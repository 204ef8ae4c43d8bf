package proxy

import (
	"context"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"switchyard.dev/services/proxy/internal/telemetry"
)

// W3C Trace Context (https://www.w3.org/TR/trace-context/). A request that
// carries a valid traceparent header belongs to the caller's trace: its
// upstream requests carry that trace on, and when the proxy exports
// traces its spans join it. The upstream's traceparent names the
// gateway's span of that attempt when the proxy exports traces (so an
// instrumented upstream, a self-hosted model server say, nests under it),
// and the caller's own span otherwise (the gateway passes the context on
// unchanged, as a participant that records nothing). Without a caller's
// traceparent, a proxy that exports traces starts a trace per request and
// sends it upstream the same way; one that does not sends nothing.
const (
	headerTraceParent = telemetry.HeaderTraceParent
	headerTraceState  = telemetry.HeaderTraceState
	// maxTraceState bounds the tracestate passed on (the specification's
	// 512 characters; a longer one is dropped).
	maxTraceState = 512
)

var (
	hdrTraceParent = []byte("Traceparent")
	hdrTraceState  = []byte("Tracestate")
)

// traceCtx is a request's trace context: the caller's, and what its
// upstream requests carry.
type traceCtx struct {
	caller  bool             // the caller sent a valid traceparent
	export  bool             // the proxy exports this request's spans
	traceID trace.TraceID    // the caller's trace, or the one the proxy started
	parent  trace.SpanID     // the caller's span
	flags   trace.TraceFlags // the caller's (sampled and random bits); random for a trace id the proxy drew
	sampled bool             // with export: the exporter will export the request's spans
	state   string           // the caller's tracestate when it parsed (a copy)
	span    trace.SpanID     // with export: the span of the attempt in flight
}

// readTraceContext reads the caller's trace context and, when the proxy
// exports traces, decides the request's trace and whether it is sampled.
func (r *request) readTraceContext(c *fiber.Ctx) {
	tc := &r.tc
	h := &c.Request().Header
	if tp := h.PeekAll(headerTraceParent); len(tp) == 1 { // more than one: not valid
		if tid, sid, flags, ok := telemetry.ParseTraceParent(tp[0]); ok {
			tc.caller, tc.traceID, tc.parent, tc.flags = true, tid, sid, flags
			tc.state = callerTraceState(h.PeekAll(headerTraceState))
		}
	}
	tr := r.s.tracer
	if tr == nil || !r.trace.on {
		return
	}
	tc.export = true
	parent := context.Background()
	if tc.caller {
		parent = trace.ContextWithRemoteSpanContext(parent, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tc.traceID, SpanID: tc.parent, TraceFlags: tc.flags, Remote: true}))
	} else {
		tc.traceID, tc.flags = telemetry.NewTraceID(), trace.FlagsRandom
	}
	// The exporter's sampler decides from the trace id and the caller's
	// span: ask it now, so that the upstream hears the decision the
	// exported trace will have.
	tc.sampled = tr.Sampled(parent, tc.traceID)
}

// callerTraceState is the caller's tracestate, its headers joined as one
// list, when it parses and is at most maxTraceState long ("" otherwise).
func callerTraceState(hs [][]byte) string {
	n := 0
	for _, v := range hs {
		n += len(v) + 1
	}
	if len(hs) == 0 || n-1 > maxTraceState {
		return ""
	}
	b := make([]byte, 0, n)
	for i, v := range hs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, v...)
	}
	st, err := trace.ParseTraceState(string(b))
	if err != nil {
		return ""
	}
	return st.String()
}

// newAttemptSpan gives the attempt about to be sent its span id, when the
// proxy exports traces (the zero id otherwise).
func (r *request) newAttemptSpan() trace.SpanID {
	if !r.tc.export {
		return trace.SpanID{}
	}
	r.tc.span = telemetry.NewSpanID()
	return r.tc.span
}

// setTraceHeaders sets the trace context an upstream request carries.
func (r *request) setTraceHeaders(h *fasthttp.RequestHeader) {
	tc := &r.tc
	if !tc.caller && !tc.export {
		return
	}
	parent, flags := tc.parent, tc.flags
	if tc.export {
		// The exporter's decision, and the trace id's random flag.
		parent, flags = tc.span, tc.flags&trace.FlagsRandom
		if tc.sampled {
			flags |= trace.FlagsSampled
		}
	}
	var b [55]byte
	h.SetCanonical(hdrTraceParent, telemetry.AppendTraceParent(b[:0], tc.traceID, parent, flags))
	if tc.state != "" {
		h.SetCanonical(hdrTraceState, bytesOf(tc.state))
	}
}
