package holdkv

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/testkit"
)

// TestNatsCLI: what the README's NATS contracts show operators is what the nats CLI
// prints against a running Switchyard.
func TestNatsCLI(t *testing.T) {
	bin := testkit.NatsCLI(t)
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	n := setup(t, s.ClientURL(), bus.SetupOptions{})
	url := s.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	rec := record("openai-eu", "k1", "gpt-4.1")
	rec.Class = failure.CredentialRejected
	if _, err := n.store.Create(ctx, rec, 0); err != nil {
		t.Fatal(err)
	}
	id := rec.Scope.ID()

	t.Run("kv ls", func(t *testing.T) {
		out, err := testkit.NatsCLICommand(ctx, t, bin, url, "kv", "ls", "--names").CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, b := range []string{bus.BucketHolds, bus.BucketHealth, bus.BucketLeases, bus.BucketCredentials, bus.BucketLimits} {
			if !strings.Contains(string(out), b) {
				t.Errorf("nats kv ls does not list %s:\n%s", b, out)
			}
		}
		out, err = testkit.NatsCLICommand(ctx, t, bin, url, "kv", "ls", bus.BucketHolds).CombinedOutput()
		if err != nil || !strings.Contains(string(out), id) {
			t.Errorf("nats kv ls %s does not list %s: %v\n%s", bus.BucketHolds, id, err, out)
		}
		t.Logf("nats kv ls %s:\n%s", bus.BucketHolds, out)
	})

	t.Run("kv get", func(t *testing.T) {
		out, err := testkit.NatsCLICommand(ctx, t, bin, url, "kv", "get", bus.BucketHolds, id, "--raw").Output()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		var got hold.Record
		if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
			t.Fatalf("nats kv get --raw printed no hold JSON: %v\n%s", err, out)
		}
		if got.ID != id || got.Scope != rec.Scope || got.Class != failure.CredentialRejected || got.Version != hold.SchemaVersion {
			t.Fatalf("nats kv get: %s", out)
		}
		t.Logf("nats kv get %s %s --raw:\n%s", bus.BucketHolds, id, out)
	})

	em := NewEmitter(n.nc, testLog())
	em.Start()
	defer em.Close()

	t.Run("sub", func(t *testing.T) {
		ev := hold.Event{Kind: hold.EventHold, Scope: rec.Scope, Class: rec.Class, Rung: 0, Until: rec.Until,
			Reason: rec.Reason, Code: rec.Code, Source: "proxy", RecordedBy: "proxy-a"}
		got := subOne(ctx, t, bin, url, bus.EventsSubjects, func() { em.Emit(ev) })
		for _, want := range []string{"switchyard.events.hold.openai-eu.k1", `"kind":"hold"`, `"hold_id":"` + id + `"`, `"class":"credential_rejected"`} {
			if !strings.Contains(got, want) {
				t.Errorf("nats sub output lacks %s:\n%s", want, got)
			}
		}
	})

	t.Run("sub breaker", func(t *testing.T) {
		tally := hold.Tally{Version: hold.TallySchemaVersion, Provider: "openai-eu", Outcome: hold.TallyFailure,
			Consecutive: 3, Instance: "proxy-a", At: time.Now()}
		got := subOne(ctx, t, bin, url, bus.BreakerSubjects, func() { em.SendTally(tally) })
		for _, want := range []string{`"switchyard.breaker.openai-eu"`, `"outcome":"failure"`, `"consecutive":3`, `"instance":"proxy-a"`} {
			if !strings.Contains(got, want) {
				t.Errorf("nats sub output lacks %s:\n%s", want, got)
			}
		}
	})
}

// subOne runs `nats sub <subject> --count 1` and calls publish until the
// CLI has received one message and exited (it subscribes at some point
// after it starts); it returns what the CLI printed.
func subOne(ctx context.Context, t *testing.T, bin, url, subject string, publish func()) string {
	t.Helper()
	cmd := testkit.NatsCLICommand(ctx, t, bin, url, "sub", subject, "--count", "1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("nats sub: %v\n%s", err, out.String())
			}
			t.Logf("nats sub %s --count 1:\n%s", subject, out.String())
			return out.String()
		case <-tick.C:
			publish()
		case <-ctx.Done():
			t.Fatalf("nats sub %s saw nothing:\n%s", subject, out.String())
		}
	}
}
