package bus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Readiness defaults.
const (
	// DefaultReadyInterval is how often Readiness probes JetStream while
	// the last probe passed.
	DefaultReadyInterval = time.Second
	// DefaultReadyRetry is how often it probes while the last probe failed,
	// so that readiness comes back soon after JetStream does.
	DefaultReadyRetry = 250 * time.Millisecond
	// DefaultReadyTimeout bounds one probe.
	DefaultReadyTimeout = 2 * time.Second
)

// The values of ReadyState.NATS and ReadyState.JetStream.
const (
	NATSConnected     = "connected"
	NATSDisconnected  = "disconnected"
	JetStreamOK       = "ok"
	JetStreamDown     = "unavailable"
	jetStreamUnprobed = "unknown"
)

// ReadyState is what a /readyz handler answers: ready when NATS is
// connected and the last probe found the hold bucket's stream answering
// with a leader. Reason says why not, from a closed list of sentences
// (never an error text from the wire, never a URL or a credential).
type ReadyState struct {
	Ready     bool
	NATS      string // NATSConnected or NATSDisconnected
	JetStream string // JetStreamOK or JetStreamDown; "" while NATS is disconnected
	Reason    string // "" when ready
	Checked   time.Time

	reconnects uint64 // the connection's reconnect count at the probe
}

// ReadinessOptions configure a Readiness. Zero values take the defaults.
type ReadinessOptions struct {
	Interval, Retry, Timeout time.Duration
}

// Readiness probes in the background whether JetStream answers for the
// switchyard_holds bucket: a stream info request, which only the stream's
// leader answers (during a leader election, or with JetStream down, it
// fails or times out). State reads the cached result and the connection's
// status: it never waits on NATS, so a /readyz handler stays fast whatever
// NATS does.
type Readiness struct {
	nc    *nats.Conn
	res   func() *Resources
	opts  ReadinessOptions
	state atomic.Pointer[ReadyState]
	kick  chan struct{}
}

// NewReadiness returns a probe of nc and of the hold bucket that res
// returns (nil until the buckets are bound: not ready). nc may be nil:
// never ready. Run it with Run.
func NewReadiness(nc *nats.Conn, res func() *Resources, opts ReadinessOptions) *Readiness {
	if opts.Interval <= 0 {
		opts.Interval = DefaultReadyInterval
	}
	if opts.Retry <= 0 {
		opts.Retry = DefaultReadyRetry
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultReadyTimeout
	}
	r := &Readiness{nc: nc, res: res, opts: opts, kick: make(chan struct{}, 1)}
	r.state.Store(&ReadyState{NATS: NATSDisconnected, JetStream: jetStreamUnprobed, Reason: "JetStream not checked yet"})
	return r
}

// Run probes until ctx ends: every Interval while JetStream answers,
// every Retry while it does not, and at once when State notices a
// reconnect.
func (r *Readiness) Run(ctx context.Context) {
	if r.nc == nil {
		<-ctx.Done()
		return
	}
	for {
		st := r.probe(ctx)
		r.state.Store(&st)
		wait := r.opts.Interval
		if !st.Ready {
			wait = r.opts.Retry
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-r.kick:
			t.Stop()
		}
	}
}

// Check asks Run for a probe now (it does not wait for it).
func (r *Readiness) Check() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// State is the readiness now: the connection's status, read live, and the
// last probe's result.
func (r *Readiness) State() ReadyState {
	if r.nc == nil || !r.nc.IsConnected() {
		return ReadyState{NATS: NATSDisconnected, Reason: "not connected to NATS"}
	}
	st := *r.state.Load()
	st.NATS = NATSConnected
	switch {
	case st.Checked.IsZero():
		st.JetStream = jetStreamUnprobed
	case st.JetStream == "" || r.nc.Stats().Reconnects != st.reconnects:
		// the last probe ran before the connection came back: it says
		// nothing of the server there now
		r.Check()
		st = ReadyState{NATS: NATSConnected, JetStream: jetStreamUnprobed, Reason: "JetStream not checked since NATS reconnected", Checked: st.Checked}
	case time.Since(st.Checked) > 2*r.opts.Interval+r.opts.Timeout:
		st = ReadyState{NATS: NATSConnected, JetStream: jetStreamUnprobed, Reason: "JetStream not checked recently", Checked: st.Checked}
	}
	return st
}

func (r *Readiness) probe(ctx context.Context) ReadyState {
	st := r.check(ctx)
	st.Checked = time.Now()
	return st
}

func (r *Readiness) check(ctx context.Context) ReadyState {
	reconnects := r.nc.Stats().Reconnects
	if !r.nc.IsConnected() {
		return ReadyState{NATS: NATSDisconnected, Reason: "not connected to NATS"}
	}
	down := func(reason string) ReadyState {
		return ReadyState{NATS: NATSConnected, JetStream: JetStreamDown, Reason: reason, reconnects: reconnects}
	}
	res := r.res()
	if res == nil || res.Holds == nil {
		return down("the NATS buckets are not set up yet")
	}
	pctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	st, err := res.Holds.Status(pctx)
	if err != nil {
		return down(probeReason(err, r.opts.Timeout))
	}
	if kst, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		if info := kst.StreamInfo(); info != nil && info.Cluster != nil && info.Cluster.Leader == "" {
			return down(fmt.Sprintf("the %s bucket's stream has no leader", BucketHolds))
		}
	}
	return ReadyState{Ready: true, NATS: NATSConnected, JetStream: JetStreamOK, reconnects: reconnects}
}

// probeReason turns a probe's error into a sentence of the closed list.
func probeReason(err error, timeout time.Duration) string {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return fmt.Sprintf("JetStream did not answer within %s", timeout)
	case errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse):
		return "JetStream does not answer (no responders)"
	case errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound):
		return fmt.Sprintf("the %s bucket does not exist", BucketHolds)
	case errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected):
		return "not connected to NATS"
	case errors.As(err, &apiErr):
		return fmt.Sprintf("JetStream answered error %d", apiErr.ErrorCode)
	}
	return "JetStream unavailable"
}

// Answer is the /readyz answer for st that every service sends: 200
// {"status":"ok","nats":"connected","jetstream":"ok"}, or 503
// {"status":"not ready","nats":...,"jetstream":...,"reason":...}
// ("jetstream" left out while NATS is disconnected).
func (st ReadyState) Answer() (status int, body map[string]string) {
	if st.Ready {
		return http.StatusOK, map[string]string{"status": "ok", "nats": st.NATS, "jetstream": st.JetStream}
	}
	body = map[string]string{"status": "not ready", "nats": st.NATS, "reason": st.Reason}
	if st.JetStream != "" {
		body["jetstream"] = st.JetStream
	}
	return http.StatusServiceUnavailable, body
}
