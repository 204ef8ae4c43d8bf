package telemetry

// OpenTelemetry export: each request's debug bundle, once finished, becomes
// a trace exported over OTLP/HTTP by the official Go SDK: a server span for
// the request and a client span per upstream attempt, built after the fact
// with the bundle's timestamps, with the GenAI semantic-convention
// attributes and Switchyard's own. Nothing exported holds prompt text, a
// body, a provider error's message or a secret: only what the bundle has,
// and of its provider errors only code and type.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
)

// tracerScope is the instrumentation scope of the spans.
const tracerScope = "switchyard.dev/services/proxy"

// Span attributes. The GenAI conventions are still in development, so the
// Go semconv package does not carry them: the keys are spelled here.
const (
	attrGenAIOperation      = attribute.Key("gen_ai.operation.name")
	attrGenAISystem         = attribute.Key("gen_ai.system")
	attrGenAIProvider       = attribute.Key("gen_ai.provider.name") // the newer name of gen_ai.system
	attrGenAIRequestModel   = attribute.Key("gen_ai.request.model")
	attrGenAIResponseModel  = attribute.Key("gen_ai.response.model")
	attrGenAIInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	attrGenAIOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	attrGenAICacheRead      = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	attrGenAICacheCreation  = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
	attrGenAIFinishReasons  = attribute.Key("gen_ai.response.finish_reasons")
	attrRequestID           = attribute.Key("switchyard.request_id")
	attrEndpoint            = attribute.Key("switchyard.endpoint")
	attrRoute               = attribute.Key("switchyard.route")
	attrRouteKind           = attribute.Key("switchyard.route.kind")
	attrStrategy            = attribute.Key("switchyard.route.strategy")
	attrClient              = attribute.Key("switchyard.client")
	attrPlan                = attribute.Key("switchyard.plan")
	attrAccess              = attribute.Key("switchyard.access")
	attrStream              = attribute.Key("switchyard.stream")
	attrStreamCompleted     = attribute.Key("switchyard.stream_completed")
	attrCancelled           = attribute.Key("switchyard.cancelled")
	attrOutcome             = attribute.Key("switchyard.outcome")
	attrClass               = attribute.Key("switchyard.class")
	attrErrorCode           = attribute.Key("switchyard.error_code")
	attrErrorType           = attribute.Key("switchyard.error_type")
	attrProvider            = attribute.Key("switchyard.provider")
	attrKeyID               = attribute.Key("switchyard.key_id")
	attrAttempts            = attribute.Key("switchyard.attempts")
	attrAttempt             = attribute.Key("switchyard.attempt")
	attrAction              = attribute.Key("switchyard.action")
	attrProbe               = attribute.Key("switchyard.probe")
	attrSoft                = attribute.Key("switchyard.soft")
	attrTTFTMS              = attribute.Key("switchyard.ttft_ms")
	attrBackoffMS           = attribute.Key("switchyard.backoff_ms")
	attrCostUSD             = attribute.Key("switchyard.cost_usd")
	attrReasoningTokens     = attribute.Key("switchyard.usage.reasoning_tokens")
	attrEstimatedTokens     = attribute.Key("switchyard.usage.estimated")
	attrHTTPStatus          = semconv.HTTPResponseStatusCodeKey
	attrErrorTypeConvention = semconv.ErrorTypeKey
)

// genAISystems maps Switchyard provider types to the gen_ai.system values
// the conventions name; the other types are exported as they are.
var genAISystems = map[string]string{
	"azure":   "az.ai.openai",
	"gemini":  "gcp.gemini",
	"mistral": "mistral_ai",
}

// Tracer exports finished requests as traces. A nil *Tracer is tracing
// off: its methods do nothing.
type Tracer struct {
	tp  *sdktrace.TracerProvider
	tr  trace.Tracer
	exp *spanExporter
	// sampler is the provider's: the request path asks it whether a trace
	// it starts will be exported, to tell the upstream.
	sampler sdktrace.Sampler
	// ProviderType maps a provider's name to its type, for gen_ai.system;
	// nil, or "" for a name: gen_ai.system is the provider's name. Set it
	// before the first export; it must be safe for concurrent use.
	ProviderType func(provider string) string
}

// New returns nil (tracing off) unless enabled; environ is the process environment (KEY=VALUE list, like os.Environ()).
//
// Precedence: OTEL_SDK_DISABLED=true turns tracing off; otherwise
// telemetry.traces decides when set (otlp or none); otherwise
// OTEL_TRACES_EXPORTER=otlp turns it on. The exporter is configured from
// the standard OTEL_EXPORTER_OTLP_* variables of environ (the SDK would
// read the process environment; environ is read here and passed as
// options, so that they win).
func New(cfg config.Telemetry, environ []string, instance string, log *slog.Logger) (*Tracer, error) {
	env := envMap(environ)
	on, err := tracingEnabled(cfg, env, log)
	if err != nil || !on {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts, err := otlpOptions(env)
	if err != nil {
		return nil, err
	}
	bspOpts, err := batchOptions(env)
	if err != nil {
		return nil, err
	}
	res, err := traceResource(cfg, env, instance)
	if err != nil {
		return nil, err
	}
	client, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	exp := newSpanExporter(client, log)
	ratio := sdktrace.TraceIDRatioBased(cfg.Ratio())
	sampler := sdktrace.ParentBased(ratio) // a caller's sampled flag decides
	if !cfg.FollowCallerSampling {         // the ratio decides, by trace id, for callers' traces too
		sampler = sdktrace.ParentBased(ratio, sdktrace.WithRemoteParentSampled(ratio), sdktrace.WithRemoteParentNotSampled(ratio))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler),
		sdktrace.WithIDGenerator(idGenerator{}),
		sdktrace.WithBatcher(exp, bspOpts...),
	)
	log.Info("exporting traces over OTLP", "service", serviceName(res), "sample_ratio", cfg.Ratio())
	return &Tracer{tp: tp, tr: tp.Tracer(tracerScope), exp: exp, sampler: sampler}, nil
}

// export queues b's spans; the batch processor sends them. It does not
// block: when the queue is full the spans are dropped.
func (t *Tracer) Export(b *debug.Bundle) {
	if t == nil || b == nil {
		return
	}
	start := b.At
	if start.IsZero() {
		start = time.Now().Add(-msDuration(b.LatencyMS))
	}
	op := genAIOperation(b.Endpoint)
	parent := context.Background()
	if b.TraceParent != "" { // the caller's trace: the request's spans join it
		parent = traceContext.Extract(parent, propagation.MapCarrier{HeaderTraceParent: b.TraceParent, HeaderTraceState: b.TraceState})
	}
	if tid, err := trace.TraceIDFromHex(b.TraceID); err == nil { // the trace its upstreams were told
		parent = withPresetIDs(parent, presetIDs{trace: tid})
	}
	ctx, root := t.tr.Start(parent, spanName(op, b.ModelLabel),
		trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer))
	if !root.IsRecording() { // not sampled
		root.End(trace.WithTimestamp(start))
		return
	}
	root.SetAttributes(t.requestAttributes(b, op)...)
	if b.Outcome != debug.OutcomeOK && (b.Status < 400 || b.Status >= 500) {
		// A server span's 4xx is the caller's error, not the server's
		// (the HTTP conventions leave its status unset); its error type says
		// what it was.
		root.SetStatus(codes.Error, firstOf(b.ErrorCode, b.Class, b.Outcome))
	}
	for i := range b.Attempts {
		a := &b.Attempts[i]
		at := start.Add(msDuration(a.StartMS))
		actx := ctx
		if sid, err := trace.SpanIDFromHex(a.SpanID); err == nil { // the span its upstream was told
			actx = withPresetIDs(ctx, presetIDs{span: sid})
		}
		_, s := t.tr.Start(actx, spanName(op, attemptModelName(b, a)),
			trace.WithTimestamp(at), trace.WithSpanKind(trace.SpanKindClient))
		s.SetAttributes(t.attemptAttributes(b, a, op)...)
		if attemptFailed(a) {
			desc := a.Class
			if a.Error != nil && a.Error.Code != "" {
				desc = a.Error.Code
			}
			s.SetStatus(codes.Error, firstOf(desc, "status "+strconv.Itoa(a.Status)))
		}
		s.End(trace.WithTimestamp(at.Add(msDuration(a.DurationMS))))
	}
	root.End(trace.WithTimestamp(start.Add(msDuration(b.LatencyMS))))
}

// requestAttributes are the root span's attributes.
func (t *Tracer) requestAttributes(b *debug.Bundle, op string) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 32)
	attrs = append(attrs,
		attrGenAIOperation.String(op),
		attrRequestID.String(b.RequestID),
		attrEndpoint.String(b.Endpoint),
		attrStream.Bool(b.Stream),
		attrOutcome.String(b.Outcome),
		attrAttempts.Int(len(b.Attempts)),
	)
	provider := b.Provider
	if provider == "" && len(b.Attempts) > 0 { // not served: the last tried
		provider = b.Attempts[len(b.Attempts)-1].Provider
	}
	if provider != "" {
		sys := t.system(provider)
		attrs = append(attrs, attrGenAISystem.String(sys), attrGenAIProvider.String(sys))
	}
	attrs = appendString(attrs, attrProvider, b.Provider)
	attrs = appendString(attrs, attrGenAIRequestModel, clip(b.Model, maxModelAttr))
	attrs = appendString(attrs, attrGenAIResponseModel, clip(b.ServedModel, maxModelAttr))
	attrs = appendString(attrs, attrKeyID, b.KeyID)
	if tk := b.Tokens; tk != nil {
		attrs = append(attrs, attrGenAIInputTokens.Int64(tk.Input), attrGenAIOutputTokens.Int64(tk.Output))
		if tk.CachedInput > 0 {
			attrs = append(attrs, attrGenAICacheRead.Int64(tk.CachedInput))
		}
		if tk.CacheWrite > 0 {
			attrs = append(attrs, attrGenAICacheCreation.Int64(tk.CacheWrite))
		}
		if tk.Reasoning > 0 {
			attrs = append(attrs, attrReasoningTokens.Int64(tk.Reasoning))
		}
		if tk.Estimated {
			attrs = append(attrs, attrEstimatedTokens.Bool(true))
		}
	}
	if reasons := finishReasons(b); len(reasons) > 0 {
		attrs = append(attrs, attrGenAIFinishReasons.StringSlice(reasons))
	}
	if r := b.Route; r != nil {
		attrs = appendString(attrs, attrRoute, r.Name)
		attrs = appendString(attrs, attrRouteKind, r.Kind)
		attrs = appendString(attrs, attrStrategy, r.Strategy)
	}
	attrs = appendString(attrs, attrClient, b.Client)
	attrs = appendString(attrs, attrPlan, b.Plan)
	attrs = appendString(attrs, attrAccess, b.Access)
	if b.Status != 0 {
		attrs = append(attrs, attrHTTPStatus.Int(b.Status))
	}
	attrs = appendString(attrs, attrClass, b.Class)
	attrs = appendString(attrs, attrErrorCode, b.ErrorCode)
	if b.Outcome != debug.OutcomeOK {
		attrs = append(attrs, attrErrorTypeConvention.String(firstOf(b.ErrorCode, b.Class, strconv.Itoa(b.Status))))
	}
	if b.TTFTMS > 0 {
		attrs = append(attrs, attrTTFTMS.Float64(b.TTFTMS))
	}
	if b.Stream {
		attrs = append(attrs, attrStreamCompleted.Bool(b.StreamCompleted))
	}
	if b.Cancelled {
		attrs = append(attrs, attrCancelled.Bool(true))
	}
	if b.CostUSD != nil {
		attrs = append(attrs, attrCostUSD.Float64(*b.CostUSD))
	}
	return attrs
}

// attemptAttributes are an attempt span's attributes: never the provider
// error's message (masked, but it may quote the request).
func (t *Tracer) attemptAttributes(b *debug.Bundle, a *debug.Attempt, op string) []attribute.KeyValue {
	sys := t.system(a.Provider)
	attrs := make([]attribute.KeyValue, 0, 18)
	attrs = append(attrs,
		attrGenAIOperation.String(op),
		attrGenAISystem.String(sys),
		attrGenAIProvider.String(sys),
		attrGenAIRequestModel.String(clip(a.Model, maxModelAttr)),
		attrRequestID.String(b.RequestID),
		attrProvider.String(a.Provider),
		attrKeyID.String(a.KeyID),
		attrAttempt.Int(a.N),
		attrAction.String(a.Action),
	)
	if a.Action == "served" {
		attrs = appendString(attrs, attrGenAIResponseModel, clip(b.ServedModel, maxModelAttr))
	}
	if a.Status != 0 {
		attrs = append(attrs, attrHTTPStatus.Int(a.Status))
	}
	attrs = appendString(attrs, attrClass, a.Class)
	if e := a.Error; e != nil {
		attrs = appendString(attrs, attrErrorCode, e.Code)
		attrs = appendString(attrs, attrErrorType, e.Type)
	}
	if attemptFailed(a) {
		attrs = append(attrs, attrErrorTypeConvention.String(firstOf(attemptErrorCode(a), a.Class, strconv.Itoa(a.Status))))
	}
	if a.Probe {
		attrs = append(attrs, attrProbe.Bool(true))
	}
	if a.Soft {
		attrs = append(attrs, attrSoft.Bool(true))
	}
	if a.TTFTMS > 0 {
		attrs = append(attrs, attrTTFTMS.Float64(a.TTFTMS))
	}
	if a.BackoffMS > 0 {
		attrs = append(attrs, attrBackoffMS.Float64(a.BackoffMS))
	}
	if b.Stream {
		attrs = append(attrs, attrStreamCompleted.Bool(a.StreamCompleted))
	}
	return attrs
}

// finishReasons are the bundle's finish reasons; a Bundle v1 does not
// record them, so none: gen_ai.response.finish_reasons is left out.
func finishReasons(*debug.Bundle) []string { return nil }

// system is gen_ai.system for a provider.
func (t *Tracer) system(provider string) string {
	if t.ProviderType == nil {
		return provider
	}
	typ := t.ProviderType(provider)
	if typ == "" {
		return provider
	}
	if s, ok := genAISystems[typ]; ok {
		return s
	}
	return typ
}

// attemptFailed: an attempt that did not serve the request.
func attemptFailed(a *debug.Attempt) bool {
	return a.Status == 0 || a.Status >= 400 || (a.Action != "" && a.Action != "served")
}

func attemptErrorCode(a *debug.Attempt) string {
	if a.Error == nil {
		return ""
	}
	return a.Error.Code
}

// genAIOperation is gen_ai.operation.name for an endpoint (its path or its
// name).
func genAIOperation(endpoint string) string {
	switch {
	case strings.Contains(endpoint, "embeddings"):
		return "embeddings"
	case strings.HasSuffix(endpoint, "/completions") && !strings.HasSuffix(endpoint, "/chat/completions"):
		return "text_completion"
	case strings.HasSuffix(endpoint, "/chat/completions"), strings.HasSuffix(endpoint, "/messages"), strings.HasSuffix(endpoint, "/responses"):
		return "chat"
	case strings.HasPrefix(endpoint, "/:provider"):
		return "passthrough"
	}
	// Images, audio, moderations, passthrough: no GenAI operation name of
	// their own; the endpoint's last segment says what it was.
	return endpoint[strings.LastIndexByte(endpoint, '/')+1:]
}

// maxModelAttr bounds a model name in an attribute: callers name models
// (the 10 MiB body limit is the only other bound).
const maxModelAttr = 256

// clip cuts s to at most n bytes, at a UTF-8 boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// attemptModelName is the model an attempt's span is named after: the
// step's configured model, unless the caller named it (an unlisted model
// of a provider, or a passthrough: the request's label then, bounded).
func attemptModelName(b *debug.Bundle, a *debug.Attempt) string {
	if strings.HasSuffix(b.ModelLabel, "/*") || b.ModelLabel == debug.ModelUnknown {
		return b.ModelLabel
	}
	return a.Model
}

// spanName is "<operation> <model>" (the GenAI conventions' span name).
func spanName(op, model string) string {
	if model == "" {
		return op
	}
	return op + " " + model
}

func appendString(attrs []attribute.KeyValue, k attribute.Key, v string) []attribute.KeyValue {
	if v == "" {
		return attrs
	}
	return append(attrs, k.String(v))
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func msDuration(ms float64) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// shutdown flushes the queued spans and stops the exporter, within ctx:
// when ctx ends first, exports still running are abandoned.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	err := t.tp.Shutdown(ctx)
	t.exp.abort()
	return err
}

// spanExporter wraps the OTLP exporter: its errors are logged here (at
// most once a minute, with how many exports failed since) instead of by
// the SDK's global handler, and abort ends exports still running after a
// shutdown ran out of time.
type spanExporter struct {
	sdktrace.SpanExporter
	log    *slog.Logger
	ctx    context.Context // cancelled by abort
	abort  context.CancelFunc
	mu     sync.Mutex
	failed int       // exports failed since the last log line
	logged time.Time // when the last failure was logged
}

const exportErrorEvery = time.Minute

func newSpanExporter(e sdktrace.SpanExporter, log *slog.Logger) *spanExporter {
	ctx, cancel := context.WithCancel(context.Background())
	return &spanExporter{SpanExporter: e, log: log, ctx: ctx, abort: cancel}
}

func (e *spanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(e.ctx, cancel)
	defer stop()
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil || errors.Is(e.ctx.Err(), context.Canceled) {
		return nil
	}
	e.mu.Lock()
	e.failed++
	now := time.Now()
	if e.logged.IsZero() || now.Sub(e.logged) >= exportErrorEvery {
		e.log.Warn("OTLP trace export failed; spans dropped", "err", err, "failed_exports", e.failed, "spans", len(spans))
		e.logged, e.failed = now, 0
	}
	e.mu.Unlock()
	return nil
}

func serviceName(r *resource.Resource) string {
	v, _ := r.Set().Value(semconv.ServiceNameKey)
	return v.AsString()
}

// Sampled reports whether a trace the proxy starts (or joins: parent
// carries the caller's remote span) will be exported: the exporter's
// sampler decides from the trace id and the caller's span, and the request
// path asks it before the first attempt, so that the upstream hears the
// decision the exported trace will have.
func (t *Tracer) Sampled(parent context.Context, tid trace.TraceID) bool {
	res := t.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: parent, TraceID: tid, Kind: trace.SpanKindServer})
	return res.Decision == sdktrace.RecordAndSample
}
