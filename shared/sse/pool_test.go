package sse

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
)

func TestPooledReaderNext(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string // data of each event
		wantErr error
	}{
		{"two events", "data: a\n\nevent: x\ndata: b\ndata: c\n\n", []string{"a", "b\nc"}, io.EOF},
		{"crlf and comments", ": ping\r\n\r\ndata: a\r\n\r\n", []string{"", "a"}, io.EOF},
		{"leading blank lines", "\n\n\ndata: a\n\n", []string{"a"}, io.EOF},
		{"cut inside an event", "data: a\n\ndata: b", []string{"a", "b"}, io.ErrUnexpectedEOF},
		{"long line", "data: " + strings.Repeat("x", 3*bufSize) + "\n\n", []string{strings.Repeat("x", 3*bufSize)}, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rd := Get(strings.NewReader(tt.in))
			defer Put(rd)
			var got []string
			var err error
			for {
				var ev Event
				ev, err = rd.Next()
				if err != nil {
					if len(ev.Raw) > 0 {
						got = append(got, string(ev.Data))
					}
					break
				}
				got = append(got, string(ev.Data))
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err %v, want %v", err, tt.wantErr)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("events %q, want %q", got, tt.want)
			}
		})
	}
}

// errReader returns its data, then err.
type errReader struct {
	data string
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if r.data == "" {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReadErrorIsNotEOF(t *testing.T) {
	rd := NewReader(&errReader{data: "data: a\n\n", err: os.ErrDeadlineExceeded})
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Next(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("err %v, want the deadline error (not io.EOF)", err)
	}
}

func TestReady(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{"complete event buffered", "data: a\n\ndata: b\n\n", true},
		{"partial event only", "data: a\n\ndata: b\n", false},
		{"crlf event", "data: a\r\n\r\ndata: b\r\n\r\n", true},
		{"blank lines only", "data: a\n\n\n\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rd := NewReader(strings.NewReader(tt.in))
			if _, err := rd.Next(); err != nil { // fills the buffer
				t.Fatal(err)
			}
			if got := rd.Ready(); got != tt.want {
				t.Errorf("Ready() = %v, want %v (buffered %q)", got, tt.want, tt.in)
			}
		})
	}
}
