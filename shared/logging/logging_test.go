package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
)

func TestNewFormats(t *testing.T) {
	tests := []struct {
		name     string
		format   string
		wantJSON bool
	}{
		{name: "empty is auto, not a terminal", format: "", wantJSON: true},
		{name: "auto, not a terminal", format: "auto", wantJSON: true},
		{name: "json", format: "json", wantJSON: true},
		{name: "json upper case", format: "JSON", wantJSON: true},
		{name: "text", format: "text", wantJSON: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := New(&buf, "info", tt.format)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			log.Info("hello", "k", "v")
			out := buf.String()
			var m map[string]any
			isJSON := json.Unmarshal([]byte(out), &m) == nil
			if isJSON != tt.wantJSON {
				t.Fatalf("JSON output = %v, want %v: %q", isJSON, tt.wantJSON, out)
			}
			if !strings.Contains(out, "hello") || !strings.Contains(out, "k=v") && !strings.Contains(out, `"k":"v"`) {
				t.Fatalf("output misses the message or attribute: %q", out)
			}
			if strings.Contains(out, "\x1b[") {
				t.Fatalf("output has ANSI colour codes: %q", out)
			}
		})
	}
}

func TestNewLevels(t *testing.T) {
	tests := []struct {
		name      string
		level     string
		wantDebug bool
		wantInfo  bool
	}{
		{name: "empty is info", level: "", wantDebug: false, wantInfo: true},
		{name: "debug", level: "debug", wantDebug: true, wantInfo: true},
		{name: "info", level: "INFO", wantDebug: false, wantInfo: true},
		{name: "warn", level: "warn", wantDebug: false, wantInfo: false},
		{name: "error", level: "error", wantDebug: false, wantInfo: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := New(&buf, tt.level, "json")
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			ctx := context.Background()
			if got := log.Enabled(ctx, slog.LevelDebug); got != tt.wantDebug {
				t.Errorf("debug enabled = %v, want %v", got, tt.wantDebug)
			}
			if got := log.Enabled(ctx, slog.LevelInfo); got != tt.wantInfo {
				t.Errorf("info enabled = %v, want %v", got, tt.wantInfo)
			}
		})
	}
}

func TestNewRejectsUnknown(t *testing.T) {
	tests := []struct {
		name, level, format, want string
	}{
		{name: "bad level", level: "loud", format: "json", want: "log.level"},
		{name: "bad format", level: "info", format: "xml", want: "log.format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(&bytes.Buffer{}, tt.level, tt.format)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func TestIsTerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Error("a regular file is reported as a terminal")
	}
	if IsTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is reported as a terminal")
	}
	var nilFile *os.File
	if IsTerminal(nilFile) {
		t.Error("a nil *os.File is reported as a terminal")
	}
}

func TestRequestIDContext(t *testing.T) {
	ctx := context.Background()
	if got := RequestID(ctx); got != "" {
		t.Fatalf("RequestID(empty ctx) = %q", got)
	}
	if got := WithRequestID(ctx, ""); got != ctx {
		t.Fatal("WithRequestID with an empty id changed the context")
	}
	ctx = WithRequestID(ctx, "req-1")
	if got := RequestID(ctx); got != "req-1" {
		t.Fatalf("RequestID = %q, want req-1", got)
	}
}

func TestRequestIDAttribute(t *testing.T) {
	tests := []struct {
		name   string
		log    func(l *slog.Logger, ctx context.Context)
		ctxID  string
		want   map[string]any // expected top-level keys and values
		absent []string
	}{
		{
			name:  "InfoContext with id",
			log:   func(l *slog.Logger, ctx context.Context) { l.InfoContext(ctx, "m") },
			ctxID: "abc",
			want:  map[string]any{"request_id": "abc"},
		},
		{
			name:   "InfoContext without id",
			log:    func(l *slog.Logger, ctx context.Context) { l.InfoContext(ctx, "m") },
			absent: []string{"request_id"},
		},
		{
			name:   "Info ignores the context",
			log:    func(l *slog.Logger, ctx context.Context) { l.Info("m") },
			ctxID:  "abc",
			absent: []string{"request_id"},
		},
		{
			name:  "With keeps the wrapper",
			log:   func(l *slog.Logger, ctx context.Context) { l.With("svc", "proxy").InfoContext(ctx, "m") },
			ctxID: "abc",
			want:  map[string]any{"request_id": "abc", "svc": "proxy"},
		},
		{
			name: "WithGroup nests the id",
			log: func(l *slog.Logger, ctx context.Context) {
				l.WithGroup("g").InfoContext(ctx, "m", "k", "v")
			},
			ctxID:  "abc",
			want:   map[string]any{"g": map[string]any{"k": "v", "request_id": "abc"}},
			absent: []string{"request_id"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l, err := New(&buf, "info", "json")
			if err != nil {
				t.Fatal(err)
			}
			tt.log(l, WithRequestID(context.Background(), tt.ctxID))
			var m map[string]any
			if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
				t.Fatalf("decode %q: %v", buf.String(), err)
			}
			for k, v := range tt.want {
				if got, _ := json.Marshal(m[k]); string(got) != mustJSON(t, v) {
					t.Errorf("%s = %s, want %s", k, got, mustJSON(t, v))
				}
			}
			for _, k := range tt.absent {
				if _, ok := m[k]; ok {
					t.Errorf("unexpected top-level %s in %s", k, buf.String())
				}
			}
		})
	}
}

func TestRequestIDTextFormat(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "info", "text")
	if err != nil {
		t.Fatal(err)
	}
	l.InfoContext(WithRequestID(context.Background(), "r-9"), "served")
	if !strings.Contains(buf.String(), "request_id=r-9") {
		t.Fatalf("text output misses request_id: %q", buf.String())
	}
}

func TestRequestIDRecordNotShared(t *testing.T) {
	// Two handlers see the same record: adding the id for one must not
	// leak into what the other receives.
	var withID, plain bytes.Buffer
	h := slog.NewMultiHandler(
		NewRequestIDHandler(slog.NewJSONHandler(&withID, nil)),
		slog.NewJSONHandler(&plain, nil),
	)
	l := slog.New(h)
	ctx := WithRequestID(context.Background(), "x")
	l.InfoContext(ctx, "m", "a", 1, "b", 2, "c", 3, "d", 4, "e", 5, "f", 6)
	if !strings.Contains(withID.String(), `"request_id":"x"`) {
		t.Errorf("wrapped handler misses request_id: %s", withID.String())
	}
	if strings.Contains(plain.String(), "request_id") {
		t.Errorf("request_id leaked to another handler: %s", plain.String())
	}
}

func TestNewRequestIDHandlerIdempotent(t *testing.T) {
	h := NewRequestIDHandler(slog.DiscardHandler)
	if NewRequestIDHandler(h) != h {
		t.Fatal("wrapping twice built a second wrapper")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
