package usagepub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/shared/usage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPublishesEveryRecordOnce: records added before the stream exists
// wait, then go out batched by subject (provider and client), each record
// once, and the counters say so.
func TestPublishesEveryRecordOnce(t *testing.T) {
	ns := natstest.Start(t, "127.0.0.1:0", t.TempDir())
	nc, js := testkit.ConnectNATS(t, ns.ClientURL())
	p := New(nc, 100, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	const n = 40
	for i := range n {
		p.Add(&usage.Record{V: usage.SchemaVersion, RequestID: fmt.Sprintf("req-%d", i), At: time.Now().UTC(),
			Provider: []string{"openai", "anthropic"}[i%2], ClientID: "team-a", Status: 200})
	}
	bound := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx, bound) }()
	defer func() { cancel(); <-done }()

	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	if _, err := bus.Setup(sctx, js, bus.SetupOptionsFrom(config.Defaults())); err != nil {
		t.Fatal(err)
	}
	close(bound)
	testkit.WaitFor(t, 10*time.Second, func() bool { return p.Published() == n })

	c, err := js.OrderedConsumer(sctx, bus.StreamUsage, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for len(seen) < n {
		msg, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %d records: %v", len(seen), err)
		}
		for line := range bytes.Lines(msg.Data()) {
			var rec usage.Record
			if err := json.Unmarshal(line, &rec); err != nil {
				t.Fatal(err)
			}
			if want := usage.Subject(rec.Provider, rec.ClientID); msg.Subject() != want {
				t.Errorf("record of %s on %s, want %s", rec.Provider, msg.Subject(), want)
			}
			seen[rec.RequestID]++
		}
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s published %d times", id, k)
		}
	}
}

// TestFullQueueDrops: Add never blocks; past the buffer a record is
// dropped and counted.
func TestFullQueueDrops(t *testing.T) {
	ns := natstest.Start(t, "127.0.0.1:0", t.TempDir())
	nc, _ := testkit.ConnectNATS(t, ns.ClientURL())
	p := New(nc, 2, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	for range 5 {
		p.Add(&usage.Record{RequestID: "r"})
	}
	if got := value(p.dropped); got != 3 {
		t.Fatalf("dropped %v, want 3", got)
	}
	if len(p.queue) != 2 {
		t.Fatalf("queued %d, want 2", len(p.queue))
	}
}
