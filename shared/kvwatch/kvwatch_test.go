package kvwatch

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
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/shared/testkit"
)

func TestMain(m *testing.M) { natstest.VerifyTestMain(m) }

// promptly is how soon after a write every watcher must have applied it,
// after a restart or a leader change as in steady state.
const promptly = time.Second

// testLog is quiet unless KVWATCH_TEST_LOG is set.
func testLog() *slog.Logger { return testkit.Log("KVWATCH_TEST_LOG") }

const bucket = "kvwatch_test"

func startServer(tb testing.TB, listen, dir string) *server.Server {
	return natstest.Start(tb, listen, dir)
}

// client is one connection (as the services open it) and its bucket.
type client struct {
	nc *nats.Conn
	js jetstream.JetStream
	kv jetstream.KeyValue
}

func connect(tb testing.TB, url string, replicas int, nopts ...nats.Option) *client {
	tb.Helper()
	nc, err := bus.Connect(context.Background(), config.NATS{URL: url, Timeout: time.Second}, testLog(), nopts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bus.WaitForJetStream(ctx, js); err != nil {
		tb.Fatal(err)
	}
	var kv jetstream.KeyValue
	testkit.CheckFor(tb, 20*time.Second, 20*time.Millisecond, func() error {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: bucket, History: 1, Replicas: replicas, LimitMarkerTTL: time.Hour,
		})
		return err
	})
	return &client{nc: nc, js: js, kv: kv}
}

// recorder keeps what a Run delivered, with when.
type recorder struct {
	mu     sync.Mutex
	events []Event
	at     map[string]time.Time // key=value -> when applied
	vals   map[string]string
	loaded chan struct{}
}

func newRecorder() *recorder {
	return &recorder{at: map[string]time.Time{}, vals: map[string]string{}, loaded: make(chan struct{})}
}

func (r *recorder) apply(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	switch e.Op {
	case OpLoaded:
		close(r.loaded)
	case OpPut:
		r.vals[e.Key] = string(e.Value)
		r.at[e.Key+"="+string(e.Value)] = time.Now()
	case OpDelete:
		delete(r.vals, e.Key)
	}
}

func (r *recorder) appliedAt(key, value string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.at[key+"="+value]
	return t, ok
}

func (r *recorder) value(key string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.vals[key]
	return v, ok
}

func (r *recorder) history() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// has fails until key has value.
func (r *recorder) has(key, value string) error {
	if v, ok := r.value(key); !ok || v != value {
		return fmt.Errorf("%s = %q (present %v), want %q", key, v, ok, value)
	}
	return nil
}

// inOrder checks that revisions only grew and none was applied twice.
func (r *recorder) inOrder() error {
	var last uint64
	for _, e := range r.history() {
		if e.Op == OpLoaded {
			continue
		}
		if e.Revision <= last && !(e.Op == OpDelete && e.Revision == last) {
			return fmt.Errorf("revision %d (%s %s) after %d", e.Revision, e.Op, e.Key, last)
		}
		last = e.Revision
	}
	return nil
}

// watch runs Run into a new recorder until the test ends.
func watch(tb testing.TB, o Options) *recorder {
	tb.Helper()
	if o.Log == nil {
		o.Log = testLog()
	}
	r := newRecorder()
	runWith(tb, o, r.apply)
	return r
}

// runWith runs Run with apply until the test ends.
func runWith(tb testing.TB, o Options, apply func(Event)) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o, apply) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			tb.Error("Run did not return after its context ended")
		}
	})
}

func waitLoaded(tb testing.TB, rs ...*recorder) {
	tb.Helper()
	for i, r := range rs {
		select {
		case <-r.loaded:
		case <-time.After(10 * time.Second):
			tb.Fatalf("watcher %d: initial load not done", i)
		}
	}
}

// put writes key=value, retrying until NATS takes it; it returns when the
// successful attempt started.
func put(tb testing.TB, kv jetstream.KeyValue, key, value string) time.Time {
	tb.Helper()
	var start time.Time
	testkit.CheckFor(tb, 20*time.Second, 5*time.Millisecond, func() error {
		start = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := kv.Put(ctx, key, []byte(value))
		return err
	})
	return start
}

// delays waits until every recorder applied key=value and returns how long
// after written each did.
func delays(tb testing.TB, written time.Time, key, value string, rs ...*recorder) []time.Duration {
	tb.Helper()
	out := make([]time.Duration, len(rs))
	for i, r := range rs {
		var at time.Time
		testkit.CheckFor(tb, 20*time.Second, time.Millisecond, func() error {
			var ok bool
			if at, ok = r.appliedAt(key, value); !ok {
				return fmt.Errorf("watcher %d has not applied %s=%s", i, key, value)
			}
			return nil
		})
		out[i] = at.Sub(written)
	}
	return out
}

func TestRunValidates(t *testing.T) {
	if err := Run(context.Background(), Options{}, func(Event) {}); err == nil {
		t.Error("Run without a bucket succeeded")
	}
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	c := connect(t, s.ClientURL(), 1)
	if err := Run(context.Background(), Options{KV: c.kv}, nil); err == nil {
		t.Error("Run without apply succeeded")
	}
}

// TestInitialLoadAndChanges: the values present are delivered as Initial
// (the markers of keys deleted before are not), then OpLoaded once, then
// every change with its revision, deletes included.
func TestInitialLoadAndChanges(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	c := connect(t, s.ClientURL(), 1)
	ctx := context.Background()
	for i := range 20 {
		put(t, c.kv, fmt.Sprintf("k%d", i), "v0")
	}
	put(t, c.kv, "gone", "x")
	if err := c.kv.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}

	r := watch(t, Options{KV: c.kv, Conn: c.nc})
	waitLoaded(t, r)
	h := r.history()
	if len(h) != 21 || h[20].Op != OpLoaded {
		t.Fatalf("initial load: %d events, last %+v", len(h), h[len(h)-1])
	}
	for _, e := range h[:20] {
		if e.Op != OpPut || !e.Initial || e.Revision == 0 || string(e.Value) != "v0" {
			t.Fatalf("initial event %+v", e)
		}
	}

	rev, err := c.kv.Put(ctx, "k1", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error { return r.has("k1", "v1") })
	if err := c.kv.Delete(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if err := c.kv.Purge(ctx, "k2"); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		for _, k := range []string{"k1", "k2"} {
			if _, ok := r.value(k); ok {
				return fmt.Errorf("%s still there", k)
			}
		}
		return nil
	})
	h = r.history()
	tail := h[len(h)-3:]
	if tail[0].Op != OpPut || tail[0].Revision != rev || tail[0].Initial ||
		tail[1].Op != OpDelete || tail[1].Key != "k1" || tail[2].Op != OpDelete || tail[2].Key != "k2" {
		t.Fatalf("changes delivered as %+v", tail)
	}
	if err := r.inOrder(); err != nil {
		t.Fatal(err)
	}
}

// TestFilter: only the keys matching the filter are delivered.
func TestFilter(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	c := connect(t, s.ClientURL(), 1)
	put(t, c.kv, "a.1", "x")
	put(t, c.kv, "b.1", "x")
	r := watch(t, Options{KV: c.kv, Conn: c.nc, Keys: []string{"a.>"}})
	waitLoaded(t, r)
	put(t, c.kv, "b.2", "x")
	put(t, c.kv, "a.2", "x")
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error { return r.has("a.2", "x") })
	for _, e := range r.history() {
		if e.Op != OpLoaded && e.Key != "a.1" && e.Key != "a.2" {
			t.Fatalf("delivered %+v outside the filter", e)
		}
	}
}

// TestRestart: NATS stops and a new server starts on the same port and
// store dir. Values survive, and a change written right after the restart
// reaches every watcher within promptly of the write, each once.
func TestRestart(t *testing.T) {
	addr, dir := testkit.FreeAddr(t), t.TempDir()
	s := startServer(t, addr, dir)
	url := s.ClientURL()
	writer := connect(t, url, 1)
	var rs []*recorder
	for range 2 {
		c := connect(t, url, 1)
		rs = append(rs, watch(t, Options{KV: c.kv, Conn: c.nc}))
	}
	waitLoaded(t, rs...)
	put(t, writer.kv, "before", "1")
	delays(t, time.Now(), "before", "1", rs...)

	natsembed.Stop(s)
	startServer(t, addr, dir)
	ready := time.Now()
	written := put(t, writer.kv, "after", "1")
	for i, d := range delays(t, written, "after", "1", rs...) {
		t.Logf("watcher %d applied the write %s after it (written %s after the server was ready)",
			i, d.Round(time.Millisecond), written.Sub(ready).Round(time.Millisecond))
		if d > promptly {
			t.Errorf("watcher %d applied a write %s after it, want within %s", i, d, promptly)
		}
	}
	for i, r := range rs {
		if err := r.has("before", "1"); err != nil {
			t.Errorf("watcher %d: %v", i, err)
		}
		if err := r.inOrder(); err != nil {
			t.Errorf("watcher %d: %v", i, err)
		}
	}
}

// TestReloadAfterLongAbsence: a watcher out of touch for longer than half
// the marker TTL reloads the bucket instead of resuming and reports as
// deleted the keys that vanished without a trace meanwhile.
func TestReloadAfterLongAbsence(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	writer := connect(t, s.ClientURL(), 1)
	c := connect(t, s.ClientURL(), 1)
	r := watch(t, Options{KV: c.kv, Conn: c.nc, MarkerTTL: time.Nanosecond}) // every restart is a long absence
	waitLoaded(t, r)
	keepAndVanish(t, writer, r)
	// "gone" was removed without a marker (a stream purge); cut the
	// watcher's connection: it reconnects and reloads.
	cid, err := c.nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if _, ok := r.value("gone"); ok {
			return errors.New("gone still there")
		}
		return nil
	})
	if err := r.has("keep", "1"); err != nil {
		t.Fatal(err)
	}
	puts := map[uint64]int{}
	for _, e := range r.history() {
		if e.Op == OpPut {
			puts[e.Revision]++
		}
	}
	for rev, n := range puts {
		if n > 1 {
			t.Fatalf("revision %d applied %d times", rev, n)
		}
	}
}

// TestReloadAfterRealAbsence: a watcher whose server was away for longer
// than half the marker TTL reloads the bucket when it reconnects (the
// markers of what was removed meanwhile may have expired), although its
// watcher object outlived the outage.
func TestReloadAfterRealAbsence(t *testing.T) {
	addr, dir := testkit.FreeAddr(t), t.TempDir()
	s := startServer(t, addr, dir)
	writer := connect(t, s.ClientURL(), 1)
	c := connect(t, s.ClientURL(), 1)
	const markerTTL = time.Second
	r := watch(t, Options{KV: c.kv, Conn: c.nc, MarkerTTL: markerTTL})
	waitLoaded(t, r)
	keepAndVanish(t, writer, r)
	natsembed.Stop(s)
	// The absence itself is the condition: longer than half the TTL.
	time.Sleep(markerTTL/2 + 100*time.Millisecond)
	startServer(t, addr, dir)
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if _, ok := r.value("gone"); ok {
			return errors.New("gone still there")
		}
		return nil
	})
	if err := r.has("keep", "1"); err != nil {
		t.Fatal(err)
	}
}

// TestBucketCreatedAgain: a bucket deleted and created again (its storage
// lost, a memory-stored bucket after a full NATS restart) starts its
// revisions at 1 again. The watcher notices the revisions went back,
// loads it whole, applies its new values and reports the keys that are
// gone as deleted.
func TestBucketCreatedAgain(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	writer := connect(t, s.ClientURL(), 1)
	c := connect(t, s.ClientURL(), 1)
	r := watch(t, Options{KV: c.kv, Conn: c.nc, StallCheck: 50 * time.Millisecond})
	waitLoaded(t, r)
	put(t, writer.kv, "old", "1")
	for i := range 20 {
		put(t, writer.kv, "k", fmt.Sprint(i))
	}
	delays(t, time.Now(), "k", "19", r)
	ctx := context.Background()
	if err := writer.js.DeleteKeyValue(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	kv, err := writer.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, LimitMarkerTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	put(t, kv, "k", "after")
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if err := r.has("k", "after"); err != nil {
			return err
		}
		if _, ok := r.value("old"); ok {
			return errors.New("old still there")
		}
		return nil
	})
}

// TestSilentStall: the server forgets the watcher's consumer and nothing
// tells the client (no reconnect, no election). The stall check notices the
// bucket ahead of the watcher and a new watcher delivers the change.
func TestSilentStall(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	writer := connect(t, s.ClientURL(), 1)
	c := connect(t, s.ClientURL(), 1)
	const check = 100 * time.Millisecond
	r := watch(t, Options{KV: c.kv, Conn: c.nc, StallCheck: check})
	waitLoaded(t, r)
	put(t, writer.kv, "k", "1")
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error { return r.has("k", "1") })

	ctx := context.Background()
	stream, err := writer.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	names := stream.ConsumerNames(ctx)
	n := 0
	for name := range names.Name() {
		if err := stream.DeleteConsumer(ctx, name); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if names.Err() != nil || n == 0 {
		t.Fatalf("consumers: %d deleted, %v", n, names.Err())
	}
	written := put(t, writer.kv, "k", "2")
	d := delays(t, written, "k", "2", r)[0]
	t.Logf("change applied %s after it was written to a stalled watcher (stall check every %s)", d.Round(time.Millisecond), check)
	if limit := check + stallGrace + promptly; d > limit {
		t.Errorf("stalled watcher applied the change after %s, want within %s", d, limit)
	}
	if err := r.inOrder(); err != nil {
		t.Fatal(err)
	}
}

// hangingStatus is a bucket whose Status never answers.
type hangingStatus struct {
	jetstream.KeyValue
	calls chan struct{}
}

func (h *hangingStatus) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	select {
	case h.calls <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestStallCheckDoesNotBlock: a stall check that hangs (a stream without a
// leader) holds up neither changes nor the end of Run.
func TestStallCheckDoesNotBlock(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	c := connect(t, s.ClientURL(), 1)
	kv := &hangingStatus{KeyValue: c.kv, calls: make(chan struct{}, 1)}
	r := watch(t, Options{KV: kv, Conn: c.nc, StallCheck: 10 * time.Millisecond, OpTimeout: time.Hour})
	waitLoaded(t, r)
	select {
	case <-kv.calls:
	case <-time.After(5 * time.Second):
		t.Fatal("no stall check")
	}
	for i := range 5 {
		v := fmt.Sprint(i)
		written := put(t, c.kv, "k", v)
		if d := delays(t, written, "k", v, r)[0]; d > promptly {
			t.Fatalf("change applied %s after the write while a stall check hangs", d)
		}
	}
	// The cleanup checks that Run returns at once although the check
	// still hangs (its context ends with Run's).
}

// TestLeaderLoss: on a 3-node cluster with an R3 bucket, the node leading
// the bucket's stream shuts down. Once the bucket has a new leader, a change
// reaches every watcher within promptly of its write: those connected to
// the surviving nodes (whose consumers may have lived on the lost node) and
// those that were connected to the lost node and reconnected elsewhere.
func TestLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	c := natstest.StartCluster(t, natsembed.ClusterOptions{Size: 3, Name: "kvwatch-test", ServerName: "kw"})
	clients := make([]*client, 3)
	var rs []*recorder
	for i := range clients {
		clients[i] = connect(t, c.URLsFrom(i), 3, nats.DontRandomize())
		if got := clients[i].nc.ConnectedServerName(); got != c.Servers[i].Name() {
			t.Fatalf("client %d connected to %s", i, got)
		}
		for range 2 { // two watchers per connection: more consumers to place
			rs = append(rs, watch(t, Options{KV: clients[i].kv, Conn: clients[i].nc}))
		}
	}
	waitLoaded(t, rs...)
	written := put(t, clients[0].kv, "before", "1")
	for i, d := range delays(t, written, "before", "1", rs...) {
		if d > promptly {
			t.Errorf("watcher %d: steady state delay %s", i, d)
		}
	}

	ctx := context.Background()
	info := streamInfo(t, clients[0].js)
	leader := c.Index(info.Cluster.Leader)
	if leader < 0 {
		t.Fatalf("stream leader %q unknown", info.Cluster.Leader)
	}
	survivor := clients[(leader+1)%3]
	t.Logf("shutting down %s, leader of KV_%s", info.Cluster.Leader, bucket)
	down := time.Now()
	natsembed.Stop(c.Servers[leader])
	testkit.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := survivor.kv.Status(sctx)
		if err != nil {
			return err
		}
		l := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Cluster.Leader
		if l == "" || l == info.Cluster.Leader {
			return fmt.Errorf("stream leader %q", l)
		}
		for i, s := range c.Servers {
			if i != leader && s.JetStreamIsLeader() {
				return nil
			}
		}
		return errors.New("no JetStream meta leader")
	})
	elected := time.Since(down)
	written = put(t, survivor.kv, "after", "1")
	for i, d := range delays(t, written, "after", "1", rs...) {
		t.Logf("watcher %d (connected to %s at first) applied the write %s after it (new leader %s after the shutdown)",
			i, c.Servers[i/2].Name(), d.Round(time.Millisecond), elected.Round(time.Millisecond))
		if d > promptly {
			t.Errorf("watcher %d applied the write %s after it, want within %s", i, d, promptly)
		}
	}
	for i, r := range rs {
		if err := r.inOrder(); err != nil {
			t.Errorf("watcher %d: %v", i, err)
		}
	}
}

func streamInfo(tb testing.TB, js jetstream.JetStream) *jetstream.StreamInfo {
	tb.Helper()
	var info *jetstream.StreamInfo
	testkit.CheckFor(tb, 20*time.Second, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "KV_"+bucket)
		if err != nil {
			return err
		}
		if info, err = s.Info(ctx); err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			return fmt.Errorf("stream cluster %+v", info.Cluster)
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current {
				return fmt.Errorf("replica %s not current", r.Name)
			}
		}
		return nil
	})
	return info
}

// TestBusyBucketIsNotTakenForCreatedAgain: revisions applied while a
// check's answer travels are newer than the bucket's last revision in it;
// that is no sign of a bucket created again (which reloads everything).
func TestBusyBucketIsNotTakenForCreatedAgain(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", t.TempDir())
	writer := connect(t, s.ClientURL(), 1)
	c := connect(t, s.ClientURL(), 1)
	r := watch(t, Options{KV: c.kv, Conn: c.nc, StallCheck: 2 * time.Millisecond})
	waitLoaded(t, r)
	ctx := context.Background()
	var last string
	for i, start := 0, time.Now(); time.Since(start) < 2*time.Second; i++ { // a write every ~100 µs for 2 s
		last = fmt.Sprint(i)
		if _, err := writer.kv.Put(ctx, "k", []byte(last)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error { return r.has("k", last) })
	puts := map[uint64]int{}
	for _, e := range r.history() {
		if e.Op == OpPut {
			puts[e.Revision]++
		}
		if e.Op == OpDelete {
			t.Fatalf("a key reported deleted: %+v", e)
		}
	}
	for rev, n := range puts {
		if n > 1 {
			t.Fatalf("revision %d applied %d times: the bucket was reloaded", rev, n)
		}
	}
}

// keepAndVanish writes "keep" and "gone", waits until r has "gone", then
// removes "gone" without a marker (a stream purge): only a reload shows it
// is gone.
func keepAndVanish(t *testing.T, writer *client, r *recorder) {
	t.Helper()
	put(t, writer.kv, "keep", "1")
	put(t, writer.kv, "gone", "1")
	testkit.CheckFor(t, 5*time.Second, time.Millisecond, func() error { return r.has("gone", "1") })
	ctx := context.Background()
	stream, err := writer.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+bucket+".gone")); err != nil {
		t.Fatal(err)
	}
}
