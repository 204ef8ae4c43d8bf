package logging

import (
	"context"
	"log/slog"
)

// RequestIDKey is the attribute key under which the request id is logged.
const RequestIDKey = "request_id"

type requestIDKey struct{}

// WithRequestID returns a copy of ctx carrying the request id. An empty id
// leaves ctx unchanged.
func WithRequestID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id carried by ctx, or "".
func RequestID(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// RequestIDHandler adds a request_id attribute to every record whose
// context carries a request id. Under a logger.WithGroup the attribute is
// nested in the group, like any other attribute of the record.
type RequestIDHandler struct {
	next slog.Handler
}

var _ slog.Handler = (*RequestIDHandler)(nil)

// NewRequestIDHandler wraps next. Wrapping a RequestIDHandler again returns
// it unchanged.
func NewRequestIDHandler(next slog.Handler) *RequestIDHandler {
	if h, ok := next.(*RequestIDHandler); ok {
		return h
	}
	return &RequestIDHandler{next: next}
}

// Enabled reports whether the wrapped handler handles level.
func (h *RequestIDHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle adds request_id when ctx carries one and passes the record on.
func (h *RequestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r = r.Clone()
		r.AddAttrs(slog.String(RequestIDKey, id))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a RequestIDHandler around next.WithAttrs(attrs).
func (h *RequestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &RequestIDHandler{next: h.next.WithAttrs(attrs)}
}

// WithGroup returns a RequestIDHandler around next.WithGroup(name).
func (h *RequestIDHandler) WithGroup(name string) slog.Handler {
	return &RequestIDHandler{next: h.next.WithGroup(name)}
}
