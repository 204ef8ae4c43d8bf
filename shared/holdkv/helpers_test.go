package holdkv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/failure"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/shared/testkit"
)

func TestMain(m *testing.M) { natstest.VerifyTestMain(m) }

// testLog is quiet unless HOLDKV_TEST_LOG is set.
func testLog() *slog.Logger { return testkit.Log("HOLDKV_TEST_LOG") }

func startServer(tb testing.TB, listen, dir string) *server.Server {
	return natstest.Start(tb, listen, dir)
}

// node is one client of the bucket: its own connection, JetStream context
// and Store.
type node struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	res   *bus.Resources
	store *Store
}

func connect(tb testing.TB, url string, nopts ...nats.Option) *node {
	tb.Helper()
	nc, err := bus.Connect(context.Background(), config.NATS{URL: url, Timeout: time.Second}, testLog(), nopts...)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return &node{nc: nc, js: js}
}

// setup connects and runs bus.Setup with opts.
func setup(tb testing.TB, url string, sopts bus.SetupOptions, opts ...Option) *node {
	tb.Helper()
	return setupWith(tb, url, sopts, nil, opts...)
}

// setupWith is setup with nats options (nats.DontRandomize, say).
func setupWith(tb testing.TB, url string, sopts bus.SetupOptions, nopts []nats.Option, opts ...Option) *node {
	tb.Helper()
	n := connect(tb, url, nopts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bus.WaitForJetStream(ctx, n.js); err != nil {
		tb.Fatal(err)
	}
	res, err := bus.Setup(ctx, n.js, sopts)
	if err != nil {
		tb.Fatalf("Setup: %v", err)
	}
	n.res = res
	n.store = NewStore(n.js, res.Holds, testLog(), opts...)
	return n
}

// table is a test's local hold table fed by Store.Watch.
type table struct {
	mu      sync.Mutex
	recs    map[string]hold.Record
	changes []hold.Change
	at      map[uint64]time.Time // revision -> when applied
	notify  func(hold.Change)
}

func newTable() *table { return &table{recs: map[string]hold.Record{}, at: map[uint64]time.Time{}} }

func (t *table) apply(c hold.Change) {
	t.mu.Lock()
	if c.Deleted {
		delete(t.recs, c.ID)
	} else {
		t.recs[c.ID] = c.Record
	}
	t.changes = append(t.changes, c)
	t.at[c.Revision] = time.Now()
	notify := t.notify
	t.mu.Unlock()
	if notify != nil {
		notify(c)
	}
}

func (t *table) get(id string) (hold.Record, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.recs[id]
	return r, ok
}

func (t *table) history() []hold.Change {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]hold.Change(nil), t.changes...)
}

// has polls until the table holds id at revision >= rev (rev 0: any).
func (t *table) has(id string, rev uint64) error {
	r, ok := t.get(id)
	switch {
	case !ok:
		return fmt.Errorf("%s not in table", id)
	case r.Revision < rev:
		return fmt.Errorf("%s at revision %d, want %d", id, r.Revision, rev)
	}
	return nil
}

// appliedAt is when the change at revision rev was applied.
func (t *table) appliedAt(rev uint64) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.at[rev]
	return at, ok
}

// delay waits until the table applied revision rev and returns how long
// after written it did.
func (t *table) delay(tb testing.TB, rev uint64, written time.Time) time.Duration {
	tb.Helper()
	var at time.Time
	testkit.CheckFor(tb, 20*time.Second, time.Millisecond, func() error {
		var ok bool
		if at, ok = t.appliedAt(rev); !ok {
			return fmt.Errorf("revision %d not applied", rev)
		}
		return nil
	})
	return at.Sub(written)
}

// promptly is how soon after a write every watcher must have applied it,
// after a NATS restart or a leader change as in steady state.
const promptly = time.Second

func (t *table) lacks(id string) error {
	if _, ok := t.get(id); ok {
		return fmt.Errorf("%s still in table", id)
	}
	return nil
}

// watchInto runs store.Watch into a new table until the test ends.
func watchInto(tb testing.TB, store *Store) *table {
	tb.Helper()
	t := newTable()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- store.Watch(ctx, t.apply) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Watch: %v", err)
		}
	})
	return t
}

func record(provider, key, model string) hold.Record {
	kind := hold.ScopeKey
	switch {
	case key == "" && model == "":
		kind = hold.ScopeProvider
	case key == "":
		kind = hold.ScopeProviderModel
	case model != "":
		kind = hold.ScopeKeyModel
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	return hold.Record{
		Scope:      hold.Scope{Kind: kind, Provider: provider, Key: key, Model: model},
		State:      hold.StateHeld,
		Class:      failure.CredentialRejected,
		Rung:       0,
		Since:      now,
		Until:      now.Add(5 * time.Minute),
		Reason:     "invalid api key",
		Code:       "invalid_api_key",
		Source:     "proxy",
		RecordedBy: "test",
		RecordedAt: now,
	}
}

func isUnavailable(err error) error {
	if !errors.Is(err, hold.ErrUnavailable) {
		return fmt.Errorf("want ErrUnavailable, got %v", err)
	}
	return nil
}
