package telemetry

// W3C Trace Context (https://www.w3.org/TR/trace-context/): traceparent
// written and read, the random ids of a trace the gateway starts, and the
// ids its exported spans take (those the upstreams were told).

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
)

// The trace context's headers.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

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
