package sse

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
)

func TestReader(t *testing.T) {
	in := ": comment\n\n" +
		"data: {\"a\":1}\n\n" +
		"event: message_start\r\ndata: {\"type\":\"message_start\"}\r\n\r\n" +
		"data: line1\ndata: line2\n\n" +
		"data:nospace\n\n" +
		"data: [DONE]\n\n"
	r := NewReader(strings.NewReader(in))
	want := []struct{ name, data string }{
		{"", ""}, // the comment-only event
		{"", `{"a":1}`},
		{"message_start", `{"type":"message_start"}`},
		{"", "line1\nline2"},
		{"", "nospace"},
		{"", "[DONE]"},
	}
	for i, w := range want {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if string(ev.Name) != w.name || string(ev.Data) != w.data {
			t.Errorf("event %d = %q/%q, want %q/%q", i, ev.Name, ev.Data, w.name, w.data)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("end: %v, want EOF", err)
	}
}

func TestReaderRawIsForwardable(t *testing.T) {
	frame := "event: content_block_delta\ndata: {\"x\":\"y\"}\n\n"
	r := NewReader(strings.NewReader(frame + frame))
	for i := 0; i < 2; i++ {
		ev, err := r.Next()
		if err != nil || string(ev.Raw) != frame {
			t.Fatalf("raw %q, %v", ev.Raw, err)
		}
	}
}

func TestReaderCutEvent(t *testing.T) {
	r := NewReader(strings.NewReader("data: whole\n\ndata: cut"))
	if ev, err := r.Next(); err != nil || string(ev.Data) != "whole" {
		t.Fatalf("first: %q %v", ev.Data, err)
	}
	ev, err := r.Next()
	if !errors.Is(err, io.ErrUnexpectedEOF) || string(ev.Data) != "cut" {
		t.Errorf("cut event: %q %v, want data and ErrUnexpectedEOF", ev.Data, err)
	}
}

func TestReaderLongLine(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	r := NewReader(strings.NewReader("data: " + long + "\n\n"))
	ev, err := r.Next()
	if err != nil || string(ev.Data) != long {
		t.Fatalf("long line: %d bytes, %v", len(ev.Data), err)
	}
}

func BenchmarkReader(b *testing.B) {
	frame := "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello\"}}]}\n\n"
	in := strings.Repeat(frame, 64)
	sr := strings.NewReader(in)
	r := NewReader(sr)
	b.ReportAllocs()
	for b.Loop() {
		sr.Reset(in)
		r.Reset(sr)
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
}

// Events read without copying (a whole "data:" event in the buffer) are
// the events the line-by-line path reads: the same input read one byte at
// a time (never a whole event buffered) gives the same events and error.
func FuzzNextWholeVsByByte(f *testing.F) {
	f.Add("data: a\n\ndata: b\n\n")
	f.Add("event: x\ndata: a\n\ndata:b\r\n\r\ndata: c\n\n")
	f.Add(": ping\n\ndata: {\"a\":1}\n\ndata: [DONE]\n\n")
	f.Add("data: a\ndata: b\n\ndata: cut")
	f.Add("\n\ndata:\n\ndata:  two spaces\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		read := func(rd *Reader) []string {
			var out []string
			for {
				ev, err := rd.Next()
				out = append(out, fmt.Sprintf("%q %v|%s|%s", ev.Name, ev.Name == nil, ev.Data, ev.Raw))
				if err != nil {
					return append(out, err.Error())
				}
			}
		}
		whole := read(NewReader(strings.NewReader(in)))
		byByte := read(NewReader(iotest.OneByteReader(strings.NewReader(in))))
		if strings.Join(whole, "\x00") != strings.Join(byByte, "\x00") {
			t.Fatalf("%q:\nwhole   %q\nby byte %q", in, whole, byByte)
		}
	})
}

// onceErrReader returns its data, then err once, then io.EOF (a reset
// connection reads end-of-file afterwards).
type onceErrReader struct {
	data string
	err  error
	n    int
}

func (r *onceErrReader) Read(p []byte) (int, error) {
	if r.data != "" {
		n := copy(p, r.data)
		r.data = r.data[n:]
		return n, nil
	}
	r.n++
	if r.n == 1 {
		return 0, r.err
	}
	return 0, io.EOF
}

// A read error between events is the error Next returns, not the clean
// end of stream a second read would report.
func TestReadErrorOnceIsKept(t *testing.T) {
	rd := NewReader(&onceErrReader{data: "data: a\n\n", err: syscall.ECONNRESET})
	if ev, err := rd.Next(); err != nil || string(ev.Data) != "a" {
		t.Fatalf("%q %v", ev.Data, err)
	}
	if _, err := rd.Next(); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("err %v, want the reset", err)
	}
}
