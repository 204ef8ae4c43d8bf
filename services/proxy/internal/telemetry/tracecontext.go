package telemetry

// W3C Trace Context (https://www.w3.org/TR/trace-context/): traceparent
// written and read, the random ids of a trace the gateway starts, and the
// ids its exported spans take (those the upstreams were told).

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
)

// The trace context's headers.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	// maxTraceState bounds the tracestate passed on (the specification's
	// 512 characters; a longer one is dropped).
	maxTraceState = 512
)

var hdrTraceParent = []byte("Traceparent")

// Context is one request's trace context: the caller's, and what its
// upstream requests carry. A request that carries a valid traceparent
// header belongs to the caller's trace: its upstream requests carry that
// trace on, and when the proxy exports traces its spans join it. The
// upstream's traceparent names the gateway's span of that attempt when
// the proxy exports traces (so an instrumented upstream, a self-hosted
// model server say, nests under it), and the caller's own span otherwise
// (the gateway passes the context on unchanged, as a participant that
// records nothing). Without a caller's traceparent, a proxy that exports
// traces starts a trace per request and sends it upstream the same way;
// one that does not sends nothing. The zero Context is a request without
// either.
type Context struct {
	caller  bool             // the caller sent a valid traceparent
	export  bool             // the proxy exports this request's spans
	traceID trace.TraceID    // the caller's trace, or the one the proxy started
	parent  trace.SpanID     // the caller's span
	flags   trace.TraceFlags // the caller's (sampled and random bits); random for a trace id the proxy drew
	sampled bool             // with export: the exporter will export the request's spans
	state   string           // the caller's tracestate when it parsed (a copy)
	span    trace.SpanID     // with export: the span of the attempt in flight
}

// Read reads the caller's trace context from a request's headers and,
// when the request's spans are exported (tr not nil and export), decides
// the request's trace and whether it is sampled.
func (tc *Context) Read(h *fasthttp.RequestHeader, tr *Tracer, export bool) {
	if tp := h.PeekAll(HeaderTraceParent); len(tp) == 1 { // more than one: not valid
		if tid, sid, flags, ok := ParseTraceParent(tp[0]); ok {
			tc.caller, tc.traceID, tc.parent, tc.flags = true, tid, sid, flags
			tc.state = callerTraceState(h.PeekAll(HeaderTraceState))
		}
	}
	if tr == nil || !export {
		return
	}
	tc.export = true
	parent := context.Background()
	if tc.caller {
		parent = trace.ContextWithRemoteSpanContext(parent, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tc.traceID, SpanID: tc.parent, TraceFlags: tc.flags, Remote: true}))
	} else {
		tc.traceID, tc.flags = NewTraceID(), trace.FlagsRandom
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

// NewSpan gives the attempt about to be sent its span id, when the proxy
// exports the request's spans (the zero id otherwise).
func (tc *Context) NewSpan() trace.SpanID {
	if !tc.export {
		return trace.SpanID{}
	}
	tc.span = NewSpanID()
	return tc.span
}

// SetHeaders sets the trace context an upstream request carries.
func (tc *Context) SetHeaders(h *fasthttp.RequestHeader) {
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
	h.SetCanonical(hdrTraceParent, AppendTraceParent(b[:0], tc.traceID, parent, flags))
	if tc.state != "" {
		h.Set(HeaderTraceState, tc.state)
	}
}

// Bundle is what a debug bundle records of the trace context: the
// request's trace id, and the caller's traceparent and tracestate ("" for
// a request the caller sent no valid traceparent with; all "" for one
// without a trace).
func (tc *Context) Bundle() (traceID, callerParent, callerState string) {
	if !tc.caller && !tc.export {
		return "", "", ""
	}
	if tc.caller {
		var b [55]byte
		callerParent, callerState = string(AppendTraceParent(b[:0], tc.traceID, tc.parent, tc.flags)), tc.state
	}
	return tc.traceID.String(), callerParent, callerState
}

// AppendTraceParent appends a version-00 traceparent.
func AppendTraceParent(b []byte, tid trace.TraceID, sid trace.SpanID, flags trace.TraceFlags) []byte {
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, tid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, sid[:])
	b = append(b, '-')
	return hex.AppendEncode(b, []byte{byte(flags)})
}

// ParseTraceParent reads a traceparent header as the W3C specification
// does: four dash-separated fields of lower-case hex, version (not ff),
// trace id and parent span id (neither all zeros), flags; version 00 has
// nothing after its flags and no reserved flag bit set, a later version
// may add fields after a dash. flags keeps the sampled and random bits.
// It agrees with OpenTelemetry's propagator (FuzzParseTraceParent) but for
// one header the propagator lets through: version 00 with a dash after its
// flags.
func ParseTraceParent(h []byte) (tid trace.TraceID, sid trace.SpanID, flags trace.TraceFlags, ok bool) {
	if len(h) < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-' || len(h) > 55 && h[55] != '-' {
		return tid, sid, 0, false
	}
	var ver, f [1]byte
	if !unhex(ver[:], h[0:2]) || ver[0] == 0xff || !unhex(tid[:], h[3:35]) || !unhex(sid[:], h[36:52]) || !unhex(f[:], h[53:55]) {
		return tid, sid, 0, false
	}
	if ver[0] == 0 && (len(h) != 55 || f[0] > 3) || !tid.IsValid() || !sid.IsValid() {
		return tid, sid, 0, false
	}
	return tid, sid, trace.TraceFlags(f[0]) & (trace.FlagsSampled | trace.FlagsRandom), true
}

// unhex decodes lower-case hex src into dst (len(src) == 2*len(dst)).
func unhex(dst, src []byte) bool {
	for i := range dst {
		hi, lo := hexVal(src[2*i]), hexVal(src[2*i+1])
		if hi > 0xf || lo > 0xf {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func hexVal(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 0xff
}

// NewTraceID and NewSpanID are random ids (never all zeros).
func NewTraceID() (id trace.TraceID) {
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64())
		binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

func NewSpanID() (id trace.SpanID) {
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// presetIDs are ids the exporter's spans take instead of random ones: the
// trace a request started (and told its upstreams), the span id an
// attempt's upstream was told.
type presetIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

type presetKey struct{}

func withPresetIDs(ctx context.Context, p presetIDs) context.Context {
	return context.WithValue(ctx, presetKey{}, p)
}

// idGenerator gives a span the ids preset in its start context, random
// ones otherwise.
type idGenerator struct{}

func (g idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	p, _ := ctx.Value(presetKey{}).(presetIDs)
	tid := p.trace
	if !tid.IsValid() {
		tid = NewTraceID()
	}
	return tid, g.NewSpanID(ctx, tid)
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if p, _ := ctx.Value(presetKey{}).(presetIDs); p.span.IsValid() {
		return p.span
	}
	return NewSpanID()
}
