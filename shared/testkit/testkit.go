// Package testkit holds the small helpers Switchyard's tests share:
// polling for a condition (never sleeping for synchronisation), a
// goroutine-safe log sink, and a free loopback address. It imports nothing
// of the project, so every package's tests may use it.
package testkit

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
)

// CheckFor polls f every poll until it returns nil; after total it fails
// the test with f's last error.
func CheckFor(tb testing.TB, total, poll time.Duration, f func() error) {
	tb.Helper()
	deadline := time.Now().Add(total)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met after %s: %v", total, err)
		}
		time.Sleep(poll)
	}
}

// WaitFor polls cond every 2 ms until it holds; after total it fails the
// test.
func WaitFor(tb testing.TB, total time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(total)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met after %s", total)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers: a
// log sink a test reads while the code under test writes.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// FreeAddr returns a loopback address whose port was free a moment ago,
// for a server that must be told its port before it starts (a cluster
// route, a restart on the same port). Prefer port 0 wherever the OS may
// choose.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
