package routingdoc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/shared/testkit"
)

func TestMain(m *testing.M) { natstest.VerifyTestMain(m) }

// testLog is quiet unless CONFIGSTORE_TEST_LOG is set.
func testLog() *slog.Logger { return testkit.Log("CONFIGSTORE_TEST_LOG") }

func startServer(tb testing.TB) *server.Server {
	return natstest.Start(tb, "127.0.0.1:0", "")
}

// node is one instance: its own connection, buckets and Store.
type node struct {
	nc    *nats.Conn
	kv    jetstream.KeyValue
	store *Store
}

// join connects to url, runs bus.Setup and returns a Store on the config
// bucket with opts (and a refusing validator, see refuse).
func join(tb testing.TB, url string, opts ...Option) *node {
	tb.Helper()
	nc, js := testkit.ConnectNATS(tb, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bus.WaitForJetStream(ctx, js); err != nil {
		tb.Fatal(err)
	}
	res, err := bus.Setup(ctx, js, bus.SetupOptions{})
	if err != nil {
		tb.Fatalf("Setup: %v", err)
	}
	opts = append([]Option{WithValidate(refuse)}, opts...)
	return &node{nc: nc, kv: res.Config, store: New(nc, res.Config, testLog(), opts...)}
}

// refuse is the tests' validator: it refuses documents that say INVALID.
func refuse(doc []byte, name string) error {
	if strings.Contains(string(doc), "INVALID") {
		return fmt.Errorf("%s: providers[0].type: unknown type \"INVALID\"", name)
	}
	return nil
}

// doc returns a small routing document; weight tells documents apart.
func doc(weight int) []byte {
	return fmt.Appendf(nil, `providers:
  - name: openai
    type: openai
    keys:
      - id: k1
        secret: env:OPENAI_API_KEY
        weight: %d
    models: [{name: gpt-4o-mini}]
chains:
  default:
    steps:
      - target: openai/gpt-4o-mini
`, weight)
}

func ctxFor(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// lastSeq is the bucket's last revision: unchanged means nothing written.
func lastSeq(tb testing.TB, kv jetstream.KeyValue) uint64 {
	tb.Helper()
	st, err := kv.Status(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
}

// numbers lists the versions List returns.
func numbers(tb testing.TB, s *Store) []uint64 {
	tb.Helper()
	vs, err := s.List(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	var out []uint64
	for _, v := range vs {
		out = append(out, v.Version)
	}
	return out
}

// applied collects what a Watch applies.
type applied struct {
	mu sync.Mutex
	vs []Version
}

func (a *applied) apply(v Version) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.vs = append(a.vs, v)
}

func (a *applied) versions() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []uint64
	for _, v := range a.vs {
		out = append(out, v.Version)
	}
	return out
}

func (a *applied) last() Version {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.vs) == 0 {
		return Version{}
	}
	return a.vs[len(a.vs)-1]
}

// waitFor polls until a has applied want (in this order, nothing else).
func (a *applied) waitFor(tb testing.TB, want ...uint64) {
	tb.Helper()
	testkit.CheckFor(tb, 10*time.Second, 2*time.Millisecond, func() error {
		if got := a.versions(); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("applied %v, want %v", got, want)
		}
		return nil
	})
}

// watch runs s.Watch into a new applied until the test ends.
func watch(tb testing.TB, s *Store) *applied {
	tb.Helper()
	a := &applied{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, a.apply) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Watch: %v", err)
		}
	})
	return a
}

func wantErr(tb testing.TB, err, target error) {
	tb.Helper()
	if !errors.Is(err, target) {
		tb.Fatalf("err = %v, want %v", err, target)
	}
}
