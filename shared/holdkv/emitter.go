package holdkv

import (
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/redact"
)

// DefaultEmitterQueue is how many events an Emitter buffers before it
// drops new ones.
const DefaultEmitterQueue = 4096

// Emitter is a hold.Emitter publishing JSON events on
// bus.EventSubject(kind, provider, key id) with core NATS publishes; the
// SWITCHYARD_EVENTS stream captures them. It is also the hold.TallySink
// of the engine's circuit breakers (tallies on bus.BreakerSubject, no
// stream). Emit and SendTally only queue: a goroutine owned by the Emitter
// (from Start to Close) publishes, and when the queue is full messages are
// dropped and counted (Dropped), so a request never waits on NATS.
type Emitter struct {
	nc    *nats.Conn
	log   *slog.Logger
	queue chan message
	now   func() time.Time

	dropped   atomic.Uint64
	published atomic.Uint64
	failed    atomic.Uint64

	startOnce sync.Once
	closeOnce sync.Once
	mu        sync.RWMutex // guards closed and started against Emit racing Close
	started   bool
	closed    bool
	done      chan struct{}
}

var (
	_ hold.Emitter   = (*Emitter)(nil)
	_ hold.TallySink = (*Emitter)(nil)
)

// message is one queued event, or one tally when tally is set.
type message struct {
	ev    hold.Event
	tally *hold.Tally
}

// NewEmitter returns an Emitter on nc. It queues events at once and
// publishes them from Start on; Close stops it. No goroutine runs before
// Start, so an Emitter that is never started leaves nothing behind.
func NewEmitter(nc *nats.Conn, log *slog.Logger) *Emitter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Emitter{
		nc:    nc,
		log:   log.With("component", "events"),
		queue: make(chan message, DefaultEmitterQueue),
		now:   time.Now,
		done:  make(chan struct{}),
	}
}

// Start starts publishing (once; a closed Emitter stays closed).
func (e *Emitter) Start() {
	e.startOnce.Do(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.closed {
			return
		}
		e.started = true
		go e.loop()
	})
}

// Emit queues ev for publishing and returns at once. It fills in the
// schema version and the time when they are zero, the hold id of hold,
// release, trip and probe events from their scope, and masks anything in
// Reason that looks like a credential.
func (e *Emitter) Emit(ev hold.Event) {
	if ev.Version == 0 {
		ev.Version = hold.EventSchemaVersion
	}
	if ev.At.IsZero() {
		ev.At = e.now().UTC()
	}
	if ev.HoldID == "" && ev.Scope.Provider != "" && ev.Kind != hold.EventHealth && ev.Kind != hold.EventCredential && ev.Kind != hold.EventBudget && ev.Kind != hold.EventGuardrail {
		ev.HoldID = ev.Scope.ID() // hold, release, trip and probe events concern a hold
	}
	e.enqueue(message{ev: ev})
}

// SendTally queues a breaker tally for the fleet and returns at once.
func (e *Emitter) SendTally(t hold.Tally) {
	e.enqueue(message{tally: &t})
}

func (e *Emitter) enqueue(m message) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		e.dropped.Add(1)
		return
	}
	select {
	case e.queue <- m:
	default:
		if e.dropped.Add(1) == 1 {
			e.log.Warn("event queue full: dropping events and breaker tallies", "queue", cap(e.queue))
		}
	}
}

// Dropped is the number of events dropped because the queue was full or
// the Emitter closed.
func (e *Emitter) Dropped() uint64 { return e.dropped.Load() }

// Published is the number of events handed to the NATS connection.
func (e *Emitter) Published() uint64 { return e.published.Load() }

// Close publishes what is queued, flushes the connection (bounded by its
// own timeout) and stops the Emitter. Later Emits are dropped, and so is
// what an Emitter that was never started queued.
func (e *Emitter) Close() {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		started := e.started
		close(e.queue)
		e.mu.Unlock()
		if !started {
			e.dropped.Add(uint64(len(e.queue)))
			return
		}
		<-e.done
		if e.nc.IsConnected() {
			_ = e.nc.FlushTimeout(time.Second)
		}
	})
}

func (e *Emitter) loop() {
	defer close(e.done)
	for m := range e.queue {
		if m.tally != nil {
			e.publishTally(m.tally)
		} else {
			e.publish(m.ev)
		}
	}
}

func (e *Emitter) publish(ev hold.Event) {
	ev.Reason = redact.String(ev.Reason)
	data, err := json.Marshal(ev)
	if err != nil {
		e.log.Error("encode event", "kind", ev.Kind, "err", err)
		return
	}
	subject := bus.EventSubject(string(ev.Kind), ev.Scope.Provider, ev.Scope.Key)
	if ev.Kind == hold.EventBudget || ev.Kind == hold.EventGuardrail {
		subject = bus.EventSubject(string(ev.Kind), ev.Client, "")
	}
	e.send(subject, data)
}

func (e *Emitter) publishTally(t *hold.Tally) {
	data, err := json.Marshal(t)
	if err != nil {
		e.log.Error("encode breaker tally", "err", err)
		return
	}
	token := ""
	if t.Model != "" {
		token = hold.EncodeToken(t.Model)
	}
	e.send(bus.BreakerSubject(t.Provider, token), data)
}

func (e *Emitter) send(subject string, data []byte) {
	if err := e.nc.Publish(subject, data); err != nil {
		if e.failed.Add(1) == 1 || e.failed.Load()%1000 == 0 {
			e.log.Warn("publish event", "subject", subject, "err", err, "failed", e.failed.Load())
		}
		return
	}
	e.published.Add(1)
}
