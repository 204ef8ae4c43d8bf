// Package sse reads Server-Sent Events one event at a time, keeping each
// event's raw bytes so a relay can forward it unchanged and flush.
package sse

import (
	"bufio"
	"bytes"
	"io"
	"sync"
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

// bufSize is the read buffer of a Reader. LLM stream events are well under
// it; a longer line is collected whole.
const bufSize = 4 << 10

// maxKeep bounds the scratch buffers a pooled Reader keeps: one huge event
// does not pin its memory in the pool.
const maxKeep = 64 << 10

// Reader reads events from a stream. The slices of an Event are valid until
// the next call to Next.
type Reader struct {
	br   *bufio.Reader
	raw  []byte
	data []byte
	name []byte
	long []byte // a line longer than the buffer
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, bufSize)}
}

var pool = sync.Pool{New: func() any { return NewReader(nil) }}

// Get returns a pooled Reader over r. Put it back when the stream is done.
func Get(r io.Reader) *Reader {
	rd := pool.Get().(*Reader)
	rd.Reset(r)
	return rd
}

// Put returns a Reader to the pool. It must not be used afterwards, nor
// the slices of the events it returned.
func Put(r *Reader) {
	r.Reset(nil)
	if cap(r.raw) > maxKeep || cap(r.data) > maxKeep || cap(r.long) > maxKeep {
		r.raw, r.data, r.long = nil, nil, nil
	}
	pool.Put(r)
}

// Reset makes the reader read from r, keeping its buffers.
func (r *Reader) Reset(src io.Reader) {
	r.br.Reset(src)
	r.raw, r.data, r.name, r.long = r.raw[:0], r.data[:0], r.name[:0], r.long[:0]
}

// Buffered is the number of bytes read from the stream and not yet
// returned as events.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// Ready reports whether a complete event is buffered, so that Next returns
// without reading from the stream. A relay flushes what it wrote when
// Ready is false: the next event may be a while.
func (r *Reader) Ready() bool {
	n := r.br.Buffered()
	if n == 0 {
		return false
	}
	b, _ := r.br.Peek(n)
	b = bytes.TrimLeft(b, "\r\n") // blank lines before an event are skipped
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n"))
}

// Next returns the next event. At the end of the stream it returns io.EOF;
// a final event not terminated by a blank line is returned with
// io.ErrUnexpectedEOF (its Raw holds what arrived). Any other read error
// (a deadline, a reset) is returned as is, with what arrived of the event.
func (r *Reader) Next() (Event, error) {
	if r.br.Buffered() == 0 {
		// Between events: wait for bytes here, so that next1 can look
		// at them. A read error is returned as it is (bufio hands it out
		// once: reading again could report a clean end instead).
		if _, err := r.br.Peek(1); err != nil {
			return Event{}, err
		}
	}
	if ev, ok := r.next1(); ok {
		return ev, nil
	}
	r.raw, r.data, r.name = r.raw[:0], r.data[:0], r.name[:0]
	hasData := false
	for {
		line, err := r.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// Long line: collect it whole.
			r.long = append(r.long[:0], line...)
			for err == bufio.ErrBufferFull {
				line, err = r.br.ReadSlice('\n')
				r.long = append(r.long, line...)
			}
			line = r.long
		}
		r.raw = append(r.raw, line...)
		if err != nil {
			if len(bytes.TrimSpace(r.raw)) == 0 {
				return Event{}, err
			}
			r.field(line, &hasData)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return r.event(), err
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

// next1 returns the next event without copying it when it is buffered
// whole and is one "data:" line ended by "\n\n", the shape of nearly
// every event a provider sends: its slices point into the read buffer,
// which keeps them until the next read (the next call to Next). Any other
// shape is left to Next's line-by-line path.
func (r *Reader) next1() (Event, bool) {
	buf, _ := r.br.Peek(r.br.Buffered())
	if !bytes.HasPrefix(buf, dataField) {
		return Event{}, false
	}
	i := bytes.IndexByte(buf, '\n')
	if i < 0 || i+1 >= len(buf) || buf[i+1] != '\n' || buf[i-1] == '\r' {
		return Event{}, false
	}
	value := buf[len(dataField):i]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	ev := Event{Data: value[:len(value):len(value)], Raw: buf[: i+2 : i+2]} // capped: an append cannot overwrite the next event
	_, _ = r.br.Discard(i + 2)                                              // the bytes stay in the buffer until the next read
	return ev, true
}

var dataField = []byte("data:")

func (r *Reader) event() Event {
	name := r.name
	if len(name) == 0 {
		name = nil // as next1 gives it
	}
	return Event{Name: name, Data: r.data, Raw: r.raw}
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
