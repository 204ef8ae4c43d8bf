package holdkv

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
)

func TestEmitter(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	n := setup(t, s.ClientURL(), bus.SetupOptions{})
	sub, err := n.nc.SubscribeSync(bus.EventsSubjects)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	em := NewEmitter(n.nc, testLog())
	em.Start()
	until := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		ev      hold.Event
		subject string
	}{
		{
			name: "key hold",
			ev: hold.Event{Kind: hold.EventHold, Scope: hold.Scope{Kind: hold.ScopeKeyModel, Provider: "openai-eu", Key: "k1", Model: "gpt-4.1"},
				Class: failure.ModelNotAccessible, Rung: 1, Until: until, Code: "model_not_found", Fingerprint: "fp:1a2b3c",
				Reason: "Incorrect API key provided: sk-proj-abcdefgh12345678", Source: "proxy", RecordedBy: "proxy-a"},
			subject: "switchyard.events.hold.openai-eu.k1",
		},
		{
			name:    "provider trip",
			ev:      hold.Event{Kind: hold.EventTrip, Scope: hold.Scope{Kind: hold.ScopeProvider, Provider: "anthropic"}, Class: failure.Transient, RecordedBy: "proxy-b"},
			subject: "switchyard.events.trip.anthropic",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			em.Emit(tt.ev)
			if took := time.Since(start); took > 10*time.Millisecond {
				t.Errorf("Emit took %s", took)
			}
			msg, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Subject != tt.subject {
				t.Errorf("subject %q, want %q", msg.Subject, tt.subject)
			}
			var raw map[string]any
			if err := json.Unmarshal(msg.Data, &raw); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"v", "kind", "hold_id", "scope", "class", "rung", "recorded_by", "at"} {
				if _, ok := raw[k]; !ok {
					t.Errorf("event lacks %q: %s", k, msg.Data)
				}
			}
			var got hold.Event
			if err := json.Unmarshal(msg.Data, &got); err != nil {
				t.Fatal(err)
			}
			if got.Version != hold.EventSchemaVersion || got.Kind != tt.ev.Kind || got.HoldID != tt.ev.Scope.ID() ||
				got.Scope != tt.ev.Scope || got.Class != tt.ev.Class || !got.Until.Equal(tt.ev.Until) || got.At.IsZero() {
				t.Errorf("event %s", msg.Data)
			}
			if strings.Contains(string(msg.Data), "abcdefgh12345678") {
				t.Errorf("a secret was published: %s", msg.Data)
			}
		})
	}
	em.Close()
	em.Close()
	em.Emit(tests[0].ev) // after Close: dropped, no panic
	if em.Dropped() != 1 || em.Published() != 2 {
		t.Errorf("dropped %d published %d", em.Dropped(), em.Published())
	}
	// The stream keeps them for replay.
	testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		info, err := n.res.Events.Info(context.Background())
		if err != nil {
			return err
		}
		if info.State.Msgs != 2 {
			return fmt.Errorf("stream has %d events, want 2", info.State.Msgs)
		}
		return nil
	})
}

// TestEmitterNeverBlocks: a full queue drops, it does not wait.
func TestEmitterNeverBlocks(t *testing.T) {
	nc, err := nats.Connect("nats://127.0.0.1:1", nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	em := NewEmitter(nc, testLog())
	em.queue = make(chan message, 2) // not started: the queue fills
	start := time.Now()
	for i := range 1000 {
		if i%2 == 0 {
			em.Emit(hold.Event{Kind: hold.EventHealth, Scope: hold.Scope{Provider: "p"}})
		} else {
			em.SendTally(hold.Tally{Provider: "p", Outcome: hold.TallyFailure})
		}
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Fatalf("1000 Emits took %s", took)
	}
	if em.Dropped() != 998 {
		t.Fatalf("dropped %d, want 998", em.Dropped())
	}
	em.Start()
	em.Close() // publishes into the reconnect buffer, returns
}

// TestEmitterNotStarted: an Emitter never started leaves no goroutine
// behind, and Close drops what it queued.
func TestEmitterNotStarted(t *testing.T) {
	nc, err := nats.Connect("nats://127.0.0.1:1", nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	em := NewEmitter(nc, testLog())
	em.Emit(hold.Event{Kind: hold.EventHealth, Scope: hold.Scope{Provider: "p"}})
	em.Close()
	em.Start() // closed stays closed
	em.Emit(hold.Event{Kind: hold.EventHealth, Scope: hold.Scope{Provider: "p"}})
	if em.Dropped() != 2 || em.Published() != 0 {
		t.Fatalf("dropped %d published %d, want 2 and 0", em.Dropped(), em.Published())
	}
}
