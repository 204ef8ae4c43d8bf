// Package sse reads Server-Sent Events one event at a time, keeping each
// event's raw bytes so a relay can forward it unchanged and flush.
package sse

import (
	"bufio"
	"bytes"
	"io"
)

// Event is one server-sent event.
type Event struct {
	// Name is the "event:" field ("" when absent).
	Name []byte
	// Data is the "data:" fields joined by "\n".
	Data []byte
	// Raw is the event as received, including the terminating blank line.
	Raw []byte
}

// Reader reads events from a stream. The slices of an Event are valid until
// the next call to Next.
type Reader struct {
	br   *bufio.Reader
	raw  []byte
	data []byte
	name []byte
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 32<<10)}
}

// Reset makes the reader read from r, keeping its buffers.
func (r *Reader) Reset(src io.Reader) {
	r.br.Reset(src)
	r.raw, r.data, r.name = r.raw[:0], r.data[:0], r.name[:0]
}

// Next returns the next event. At the end of the stream it returns io.EOF;
// a final event not terminated by a blank line is returned with
// io.ErrUnexpectedEOF (its Raw holds what arrived).
func (r *Reader) Next() (Event, error) {
	r.raw, r.data, r.name = r.raw[:0], r.data[:0], r.name[:0]
	hasData := false
	for {
		line, err := r.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// Long line: collect it whole.
			buf := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				line, err = r.br.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line = buf
		}
		r.raw = append(r.raw, line...)
		if err != nil {
			if len(bytes.TrimSpace(r.raw)) == 0 {
				return Event{}, io.EOF
			}
			r.field(line, &hasData)
			return r.event(), io.ErrUnexpectedEOF
		}
		trimmed := bytes.TrimRight(line, "\r\n")
		if len(trimmed) == 0 {
			if len(r.raw) == len(line) {
				// Blank line before any field: skip it.
				r.raw = r.raw[:0]
				continue
			}
			return r.event(), nil
		}
		r.field(trimmed, &hasData)
	}
}

func (r *Reader) event() Event {
	return Event{Name: r.name, Data: r.data, Raw: r.raw}
}

func (r *Reader) field(line []byte, hasData *bool) {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 || line[0] == ':' {
		return
	}
	name, value, _ := bytes.Cut(line, []byte(":"))
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	switch string(name) {
	case "data":
		if *hasData {
			r.data = append(r.data, '\n')
		}
		r.data = append(r.data, value...)
		*hasData = true
	case "event":
		r.name = append(r.name[:0], value...)
	}
}
