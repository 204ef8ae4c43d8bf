// Package logging builds Switchyard's *slog.Logger: tint (human-readable,
// coloured) on a terminal, JSON otherwise, with the request id of the
// context added to every record logged with a context.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"
)

// Formats accepted by New.
const (
	FormatAuto = "auto" // tint on a terminal, JSON otherwise
	FormatJSON = "json"
	FormatText = "text" // tint without colour
)

// New returns a logger writing to w at level (debug, info, warn, error;
// "" means info) in format (auto, json, text; "" means auto).
//
// The handler is wrapped so that records logged with a context carrying a
// request id (see WithRequestID) get a request_id attribute.
func New(w io.Writer, level, format string) (*slog.Logger, error) {
	h, err := NewHandler(w, level, format)
	if err != nil {
		return nil, err
	}
	return slog.New(h), nil
}

// NewHandler is New without the *slog.Logger around the handler.
func NewHandler(w io.Writer, level, format string) (slog.Handler, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	var h slog.Handler
	switch f := strings.ToLower(strings.TrimSpace(format)); f {
	case "", FormatAuto:
		if IsTerminal(w) {
			h = newTint(w, lvl, false)
		} else {
			h = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})
		}
	case FormatJSON:
		h = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})
	case FormatText:
		h = newTint(w, lvl, true)
	default:
		return nil, fmt.Errorf("logging: unknown log.format %q (want auto, json or text)", format)
	}
	return NewRequestIDHandler(h), nil
}

// ParseLevel parses debug, info, warn or error (case-insensitive, with
// slog's "+N"/"-N" offsets); "" is info.
func ParseLevel(s string) (slog.Level, error) {
	var lvl slog.Level
	if strings.TrimSpace(s) == "" {
		return slog.LevelInfo, nil
	}
	if err := lvl.UnmarshalText([]byte(strings.TrimSpace(s))); err != nil {
		return 0, fmt.Errorf("logging: unknown log.level %q (want debug, info, warn or error)", s)
	}
	return lvl, nil
}

// IsTerminal reports whether w is an *os.File attached to a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	fd := f.Fd()
	return isatty.IsTerminal(fd) || isatty.IsCygwinTerminal(fd)
}

func newTint(w io.Writer, lvl slog.Level, noColor bool) slog.Handler {
	return tint.NewTextHandler(w, &tint.Options{
		Level:      lvl,
		TimeFormat: time.TimeOnly + ".000",
		NoColor:    noColor,
	})
}
