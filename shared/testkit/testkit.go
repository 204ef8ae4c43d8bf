// Package testkit holds the small helpers Switchyard's tests share:
// polling for a condition (never sleeping for synchronisation), a
// goroutine-safe log sink, a free loopback address, a NATS client
// connection and skipping for want of an external tool. It imports nothing
// of the project, so every package's tests may use it.
package testkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Log is a test's logger: quiet unless the environment variable env is set
// (PACKAGE_TEST_LOG, say), then debug level on stderr.
func Log(env string) *slog.Logger {
	if os.Getenv(env) != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

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

// Retry calls f every poll until it returns nil and returns when the call
// that succeeded began: a write retried while NATS comes back, the moment
// from which its propagation delay counts. After total it fails the test
// with f's last error.
func Retry(tb testing.TB, total, poll time.Duration, f func() error) time.Time {
	tb.Helper()
	var began time.Time
	CheckFor(tb, total, poll, func() error {
		began = time.Now()
		return f()
	})
	return began
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

// ConnectNATS connects a client to the NATS server at url, closes it when
// the test ends and returns it with its JetStream context. The client
// outlives a restart of the server: it reconnects for ever, every 20 ms;
// opts add to these options or override them.
func ConnectNATS(tb testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return nc, js
}

// MissingTool skips the test for want of an external tool, or fails it
// under CI=true: CI installs every tool, so there a missing one is a broken
// CI machine, not a reason to pass without running.
func MissingTool(tb testing.TB, msg string) {
	tb.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		tb.Fatal("CI=true: " + msg)
	}
	tb.Skip(msg)
}

// StrictJSON decodes b as one JSON value the way strict parsers do: it
// fails on a duplicate key in any object and on trailing data. Tests use
// it to check that what the gateway forwards reads the same to every
// parser.
func StrictJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key, _ := k.(string)
				if seen[key] {
					return errors.New("duplicate key " + key)
				}
				seen[key] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	if err := walk(); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
