package planlimit

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/shared/testkit"
)

func TestMain(m *testing.M) { natstest.VerifyTestMain(m) }

// testLog is quiet unless QUOTA_TEST_LOG is set.
func testLog() *slog.Logger { return testkit.Log("QUOTA_TEST_LOG") }

// clock is a settable clock shared by the limiters of a test.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.Set(t)
	return c
}

func (c *clock) Now() time.Time       { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Set(t time.Time)      { c.ns.Store(t.UnixNano()) }
func (c *clock) Add(d time.Duration)  { c.ns.Add(int64(d)) }
func (c *clock) Minute() int64        { m, _ := minuteOf(c.Now()); return m }
func (c *clock) periods() *periods    { return periodsOn(c.Now()) }
func (c *clock) dayToken() string     { return periodToken(kindDay, c.periods().ids[0]) }
func (c *clock) dayEnds() time.Time   { return c.periods().ends[0] }
func (c *clock) untilDayEnd() float64 { return c.dayEnds().Sub(c.Now()).Seconds() }

// start is a fixed moment used by the tests: 30 s into a minute, noon UTC
// on a Wednesday.
var start = time.Date(2025, 1, 15, 12, 0, 30, 0, time.UTC)

func startServer(tb testing.TB) *server.Server {
	return natstest.Start(tb, "127.0.0.1:0", "")
}

// bucket connects to url and sets up the Switchyard resources as a service
// does; it returns the connection's JetStream context and the limits bucket.
func bucket(tb testing.TB, url string) (jetstream.JetStream, jetstream.KeyValue) {
	tb.Helper()
	_, js := testkit.ConnectNATS(tb, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := bus.Setup(ctx, js, bus.SetupOptions{})
	if err != nil {
		tb.Fatalf("bus.Setup: %v", err)
	}
	return js, res.Limits
}

// member is one proxy's limiter on its own connection.
type member struct {
	*Limiter
	kv   jetstream.KeyValue
	stop func() // cancels Run and waits for it
}

type memberOpts struct {
	interval    time.Duration
	onExhausted func(Exhaustion)
}

// startMember starts a bound, running limiter and waits until its watcher
// loaded the bucket.
func startMember(tb testing.TB, url, instance string, clk *clock, mo memberOpts) *member {
	tb.Helper()
	js, kv := bucket(tb, url)
	if mo.interval == 0 {
		mo.interval = 50 * time.Millisecond
	}
	l, err := New(Options{Instance: instance, Conn: js.Conn(), Interval: mo.interval, Now: clk.Now,
		Log: testLog().With("instance", instance), OnExhausted: mo.onExhausted})
	if err != nil {
		tb.Fatal(err)
	}
	if err := l.Bind(kv); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var stopped atomic.Bool
	stop := func() {
		if stopped.CompareAndSwap(false, true) {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("Run: %v", err)
			}
		}
	}
	tb.Cleanup(stop)
	testkit.WaitFor(tb, 10*time.Second, l.loaded.Load)
	return &member{Limiter: l, kv: kv, stop: stop}
}

// probe asks l to admit client as a request would and hands an admitted
// ticket straight back, so a poll that is admitted leaves nothing in flight.
func probe(l *Limiter, client string, lim *Limits) *Refusal {
	tk, r := l.Admit(client, lim, 0)
	if r == nil {
		l.Done(tk, 0, 0, false)
	}
	return r
}
