// Package otlptest is an in-process OTLP/HTTP trace receiver for tests: it
// decodes each export request and keeps it, with its raw body and headers.
package otlptest

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Receiver is an in-process OTLP/HTTP trace receiver: it decodes each
// ExportTraceServiceRequest and keeps it, its raw body and its headers.
type Receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests []*coltracepb.ExportTraceServiceRequest
	raw      [][]byte
	headers  []http.Header
	paths    []string
	got      chan struct{} // a value per request received (Got)
}

// Start starts a receiver on 127.0.0.1, closed when the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{got: make(chan struct{}, 1024)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve)) // 127.0.0.1:0
	t.Cleanup(r.srv.Close)
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a POST of application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.requests = append(r.requests, &msg)
	r.raw = append(r.raw, b)
	r.headers = append(r.headers, req.Header.Clone())
	r.paths = append(r.paths, req.URL.Path)
	r.mu.Unlock()
	resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
	select {
	case r.got <- struct{}{}:
	default:
	}
}

// Span is a received span with its resource's attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]*commonpb.AnyValue
}

// Spans are the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, req := range r.requests {
		for _, rs := range req.ResourceSpans {
			res := AttrMap(rs.GetResource().GetAttributes())
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out = append(out, Span{s, res})
				}
			}
		}
	}
	return out
}

// AttrMap is attributes by key.
func AttrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// Env is the OTEL_* environment of an exporter sending to r (a short
// batch delay), with extra.
func Env(r *Receiver, extra ...string) []string {
	return append([]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.srv.URL,
		"OTEL_BSP_SCHEDULE_DELAY=20",
	}, extra...)
}

// Request is one export request as received.
type Request struct {
	Path   string
	Header http.Header
	Raw    []byte
}

// Received are the export requests received so far.
func (r *Receiver) Received() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Request, len(r.raw))
	for i := range r.raw {
		out[i] = Request{Path: r.paths[i], Header: r.headers[i], Raw: r.raw[i]}
	}
	return out
}

// Got has a value per request received (at most 1024 unread).
func (r *Receiver) Got() <-chan struct{} { return r.got }

// URL is the receiver's base URL.
func (r *Receiver) URL() string { return r.srv.URL }

// Names are the spans' names.
func Names(spans []Span) []string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name)
	}
	return n
}
