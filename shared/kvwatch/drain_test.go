package kvwatch

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// stuckWatcher is a KeyWatcher whose Updates never close: what the client
// leaves when its connection closes while an ordered consumer's
// subscription is being replaced.
type stuckWatcher struct{ ch chan jetstream.KeyValueEntry }

func (s stuckWatcher) Updates() <-chan jetstream.KeyValueEntry { return s.ch }
func (s stuckWatcher) Stop() error                             { return nil }

// TestDiscardEndsWhenTheConnectionClosed: the drain of a discarded watcher
// ends once its connection is closed for good, so that Run's shutdown,
// which waits for it, returns (a proxy stopping after NATS closed its
// connection hung there).
func TestDiscardEndsWhenTheConnectionClosed(t *testing.T) {
	ns := startServer(t, "127.0.0.1:0", t.TempDir())
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{o: Options{Conn: nc}}
	_, cancel := context.WithCancel(context.Background())
	w.discard(stuckWatcher{make(chan jetstream.KeyValueEntry)}, cancel)
	done := make(chan struct{})
	go func() { w.bg.Wait(); close(done) }()
	select {
	case <-done:
		t.Fatal("the drain ended while the connection was open and the watcher delivering")
	case <-time.After(3 * drainCheck):
	}
	nc.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the drain of a discarded watcher outlived its closed connection")
	}
}
