package planlimit

// The Limiter: its options, construction, Bind, and the per-client state it
// creates on first use. Admission is in admit.go, the report loop in
// report.go, the state it counts in state.go.

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
)

// Defaults of Options.
const (
	// DefaultInterval is how often the consumption is reported (the
	// default of metering.limits_interval).
	DefaultInterval = 250 * time.Millisecond
	// DefaultOpTimeout bounds one report, claim or reset.
	DefaultOpTimeout = 2 * time.Second
	// DefaultShutdownTimeout bounds the final report when Run ends.
	DefaultShutdownTimeout = time.Second
)

// Key lifetimes.
const (
	// MinuteTTL is the lifetime of a request or token key after its last
	// write: the sliding window reads the current and the previous minute.
	MinuteTTL = 3 * time.Minute
	// PeriodMargin is how long spend, exhausted and reset keys outlive
	// their period (clocks of the fleet may differ a little).
	PeriodMargin = 10 * time.Minute
	// MinInflightTTL is the shortest lifetime of an in-flight key; it is
	// 8 intervals when that is longer. A key is rewritten while its count
	// is above 0 and half its TTL has passed, so the count of a process
	// that died vanishes within one TTL.
	MinInflightTTL = 2 * time.Second
)

// ErrUnbound is returned by operations that need the bucket before Bind.
var ErrUnbound = errors.New("planlimit: limits bucket not bound (NATS not ready)")

// ErrNotLoaded is returned by ResetBudget until the limiter has loaded the
// fleet's consumption from the bucket (just after start or a long
// disconnection).
var ErrNotLoaded = errors.New("planlimit: the fleet's consumption is not loaded yet")

// Options configure a Limiter.
type Options struct {
	// Instance is this process's id in the fleet (fleet.Member.Instance);
	// bytes outside [A-Za-z0-9_-] become '_' (SanitizeInstance). It must
	// be unique per process run: an instance restarted with the same id
	// continues its predecessor's totals (they are read back at the first
	// load), but two live processes with one id overwrite each other.
	// Required.
	Instance string
	// Conn is the NATS connection of the bucket; nil: the limiter never
	// binds and limits with its own counts only.
	Conn *nats.Conn
	// Interval is how often consumption is reported (metering.limits_interval;
	// default DefaultInterval).
	Interval time.Duration
	// Now is the clock of the windows and periods (default time.Now). Key
	// TTLs are real time.
	Now func() time.Time
	Log *slog.Logger
	// OnExhausted is called by the one instance of the fleet that records
	// a client's budget exhaustion for a period (to publish an event), once
	// its watcher has applied the exhausted key it created; never for a
	// key that a budget reset made stale. It runs on the watcher or the
	// report loop: it must not block for long.
	OnExhausted func(Exhaustion)
	// MarkerTTL is the bucket's LimitMarkerTTL (default bus.LimitMarkerTTL).
	MarkerTTL time.Duration
	// OpTimeout bounds one report, claim or reset (default DefaultOpTimeout).
	OpTimeout time.Duration
	// ShutdownTimeout bounds the final report (default DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
}

// Limiter counts what a process's callers consume against their plans'
// limits and admits requests against the fleet's consumption. Every
// method is safe for concurrent use.
type Limiter struct {
	inst            string
	nc              *nats.Conn
	interval        time.Duration
	now             func() time.Time
	log             *slog.Logger
	onExhausted     func(Exhaustion)
	markerTTL       time.Duration
	opTimeout       time.Duration
	shutdownTimeout time.Duration
	inflightTTL     time.Duration

	per     atomic.Pointer[periods]
	clients atomic.Pointer[map[string]*client] // copy on write
	addMu   sync.Mutex

	b       bus.Binding[binding]
	loaded  atomic.Bool
	running atomic.Bool
	wake    chan struct{}
}

// binding is the bucket a Limiter reports to.
type binding struct {
	kv     jetstream.KeyValue
	pub    jetstream.JetStream // the limiter's own, for async publishes
	prefix string              // $KV.<bucket>.
}

// New returns a Limiter that counts locally until Bind.
func New(o Options) (*Limiter, error) {
	if o.Instance == "" {
		return nil, errors.New("planlimit: no instance id")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MarkerTTL <= 0 {
		o.MarkerTTL = bus.LimitMarkerTTL
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	l := &Limiter{
		inst:            SanitizeInstance(o.Instance),
		nc:              o.Conn,
		interval:        o.Interval,
		now:             o.Now,
		log:             o.Log.With("component", "planlimit"),
		onExhausted:     o.OnExhausted,
		markerTTL:       o.MarkerTTL,
		opTimeout:       o.OpTimeout,
		shutdownTimeout: o.ShutdownTimeout,
		inflightTTL:     ttlOf(max(MinInflightTTL, 8*o.Interval)),
		wake:            make(chan struct{}, 1),
	}
	l.clients.Store(&map[string]*client{})
	return l, nil
}

// Instance is the instance id used in keys.
func (l *Limiter) Instance() string { return l.inst }

// Bind sets the bucket (bus.Resources.Limits, on Options.Conn): Run
// starts reporting and watching once it is set. Only one Bind succeeds.
func (l *Limiter) Bind(kv jetstream.KeyValue) error {
	if kv == nil {
		return errors.New("planlimit: bind: no bucket")
	}
	if l.nc == nil {
		return errors.New("planlimit: bind: no NATS connection in Options.Conn")
	}
	if l.b.Load() != nil {
		return errBound
	}
	pub, err := jetstream.New(l.nc, jetstream.WithPublishAsyncTimeout(l.opTimeout))
	if err != nil {
		return fmt.Errorf("planlimit: bind: JetStream context: %w", err)
	}
	if !l.b.Bind(&binding{kv: kv, pub: pub, prefix: "$KV." + kv.Bucket() + "."}) {
		return errBound // a concurrent Bind won
	}
	return nil
}

var errBound = errors.New("planlimit: bind: already bound")

// Bound is closed once Bind succeeded.
func (l *Limiter) Bound() <-chan struct{} { return l.b.Bound() }

// client returns the state of id, creating it.
func (l *Limiter) client(id string) *client {
	if c := (*l.clients.Load())[id]; c != nil {
		return c
	}
	l.addMu.Lock()
	defer l.addMu.Unlock()
	m := *l.clients.Load()
	if c := m[id]; c != nil {
		return c
	}
	c := newClient(id)
	next := make(map[string]*client, len(m)+1)
	maps.Copy(next, m)
	next[id] = c
	l.clients.Store(&next)
	return c
}
