// Package fleet wires a process into the Switchyard fleet: the hold engine
// on the shared NATS KV bucket, with events published on NATS subjects and
// circuit-breaker counts shared over switchyard.breaker.>.
//
// A process starts serving before NATS answers: until the buckets are bound
// the engine's store (a holdkv.Store made unbound) reports
// hold.ErrUnavailable, so holds apply locally and are written once NATS is
// reachable (the engine reconciles them). Bound is closed when the buckets
// are set up, for whatever else follows them (health and credential
// watchers). With no NATS connection at all, the engine keeps its holds in
// memory.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/holdkv"
)

// Member is one process's place in the fleet.
type Member struct {
	Engine *hold.Engine
	// Instance is this process's id in records and events.
	Instance string

	nc      *nats.Conn
	opts    bus.SetupOptions
	log     *slog.Logger
	store   *holdkv.Store   // nil without NATS
	emitter *holdkv.Emitter // nil without NATS
	res     atomic.Pointer[bus.Resources]
	bound   chan struct{}
	bindMu  sync.Mutex // one bind at a time (a second Run binds nothing new)
}

// Options configure a Member.
type Options struct {
	// Service names the process kind in its instance id (proxy, prober...).
	Service string
	// NATS is the connection to the fleet; nil keeps holds in memory.
	NATS *nats.Conn
	Log  *slog.Logger
	// Clock for the engine (nil: the wall clock).
	Clock hold.Clock
	// Fingerprint gives a key's current secret fingerprint for hold
	// records; nil: the fingerprints of the configuration's secrets.
	Fingerprint func(provider, keyID string) string
	// OnApply is hold.EngineOptions.OnApply: every record another instance
	// wrote, as this member applies it.
	OnApply func(rec hold.Record)
}

// New builds a member from a validated configuration. Call Run to bind the
// buckets and start the engine.
func New(cfg *config.Config, o Options) (*Member, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pol, err := hold.PolicyFromConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("fleet: hold policy: %w", err)
	}
	m := &Member{Instance: InstanceID(o.Service), nc: o.NATS, opts: bus.SetupOptionsFrom(cfg), log: log,
		bound: make(chan struct{})}
	var store hold.Store = hold.NewMemStore()
	var emitter hold.Emitter
	var tallies hold.TallySink
	if o.NATS != nil {
		m.store = holdkv.NewUnbound(o.NATS, log)
		m.emitter = holdkv.NewEmitter(o.NATS, log)
		store, emitter, tallies = m.store, m.emitter, m.emitter
	}
	fp := o.Fingerprint
	if fp == nil {
		fps := fingerprints(cfg)
		fp = func(provider, keyID string) string { return fps[provider+"/"+keyID] }
	}
	m.Engine = hold.NewEngine(hold.EngineOptions{
		Store:       store,
		Emitter:     emitter,
		Tallies:     tallies,
		Instance:    m.Instance,
		Clock:       o.Clock,
		Log:         log.With("component", "hold"),
		Policy:      pol,
		Fingerprint: fp,
		OnApply:     o.OnApply,
		Source:      sourceFor(o.Service),
	})
	return m, nil
}

// Run binds the NATS buckets (retrying until NATS answers) and runs the
// engine until ctx ends.
func (m *Member) Run(ctx context.Context) error {
	if m.store == nil {
		return m.Engine.Run(ctx)
	}
	// The emitter's goroutine starts here, not in New, so that a member
	// built but never run leaves nothing behind. It closes after the
	// engine, which may emit until its Run returns.
	m.emitter.Start()
	defer m.emitter.Close()
	// The breakers count the fleet's failures: every member applies the
	// others' tallies (core NATS; subscribed at once, even before NATS
	// answers, since nats.go subscribes again on connect).
	sub, err := holdkv.SubscribeTallies(m.nc, m.Engine.ApplyTally, m.log.With("component", "breaker"))
	if err != nil {
		m.log.Warn("fleet: breaker tallies not subscribed; breakers count this process's failures only", "err", err)
	} else {
		defer func() { _ = sub.Unsubscribe() }()
	}
	var wg sync.WaitGroup
	wg.Go(func() { m.bind(ctx) })
	wg.Go(func() { m.setupAgain(ctx) })
	err = m.Engine.Run(ctx)
	wg.Wait()
	return err
}

// Emit publishes an event of this member (budget events, say) through its
// emitter, without blocking; without NATS it is dropped.
func (m *Member) Emit(ev hold.Event) {
	if m.emitter != nil {
		if ev.RecordedBy == "" {
			ev.RecordedBy = m.Instance
		}
		m.emitter.Emit(ev)
	}
}

// Conn is the member's NATS connection (nil when it runs without NATS).
func (m *Member) Conn() *nats.Conn { return m.nc }

// Resources are the bound buckets and stream, nil until NATS answered
// (until Bound is closed).
func (m *Member) Resources() *bus.Resources { return m.res.Load() }

// Bound is closed once the buckets and stream are set up; Resources is
// valid from then on. It is never closed for a member without NATS, nor
// before Run binds them.
func (m *Member) Bound() <-chan struct{} { return m.bound }

// Synced is closed once the engine's table holds the records of the holds
// bucket (the hold watcher delivered its initial load, after Bound); at
// once for a member without NATS, whose table is its own memory. Work that
// reads the table to decide (which keys are held) waits for it.
func (m *Member) Synced() <-chan struct{} {
	if m.store == nil {
		return closed
	}
	return m.store.Synced()
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// bind sets up the buckets and stream, retrying with backoff.
func (m *Member) bind(ctx context.Context) {
	m.bindMu.Lock()
	defer m.bindMu.Unlock()
	if m.res.Load() != nil {
		return
	}
	js, err := jetstream.New(m.nc)
	if err != nil {
		m.log.Error("fleet: JetStream context", "err", err)
		return
	}
	res := m.setupRetrying(ctx, js, 5*time.Second, func(err error, wait time.Duration, _ int) {
		m.log.Warn("fleet: NATS not ready; holds stay local until it is", "err", err, "retry_in", wait)
	})
	if res == nil {
		return
	}
	m.res.Store(res)
	m.store.Bind(js, res.Holds)
	close(m.bound)
	m.log.Info("fleet: hold bucket bound", "bucket", bus.BucketHolds, "instance", m.Instance)
}

// setupRetrying runs bus.Setup until it works, waiting between tries from
// 100 ms, doubling up to maxWait; failed is told of each failure. nil when
// ctx ended first.
func (m *Member) setupRetrying(ctx context.Context, js jetstream.JetStream, maxWait time.Duration,
	failed func(err error, wait time.Duration, failures int)) *bus.Resources {
	for wait, failures := 100*time.Millisecond, 1; ; wait, failures = min(wait*2, maxWait), failures+1 {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := bus.Setup(sctx, js, m.opts)
		cancel()
		if err == nil {
			return res
		}
		failed(err, wait, failures)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// setupAgain sets the buckets and streams up again after each reconnect,
// retrying until it works: NATS restarted whole with memory storage (or a
// cluster that lost its volumes) comes back without them, and nothing else
// would create them again before a service restarts (the watchers notice
// a bucket created again and reload it). Setup is idempotent: on servers
// that kept them it changes nothing.
func (m *Member) setupAgain(ctx context.Context) {
	ch := m.nc.StatusChanged(nats.CONNECTED)
	defer m.nc.RemoveStatusListener(ch)
	select {
	case <-m.bound:
	case <-ctx.Done():
		return
	}
	js, err := jetstream.New(m.nc)
	if err != nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
		}
		if m.setupRetrying(ctx, js, time.Minute, func(err error, wait time.Duration, failures int) {
			level := slog.LevelDebug // a failure that lasts warns once
			if failures == 1 {
				level = slog.LevelWarn
			}
			m.log.Log(ctx, level, "fleet: buckets and streams not set up again after a reconnect; retrying",
				"err", err, "retry_in", wait, "failures", failures)
		}) == nil {
			return
		}
	}
}

// InstanceID is a process id unique in the fleet: service, host and a
// random suffix.
func InstanceID(service string) string {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	if service == "" {
		service = "switchyard"
	}
	return service + "-" + host + "-" + hex.EncodeToString(b[:])
}

func fingerprints(cfg *config.Config) map[string]string {
	fps := map[string]string{}
	for _, p := range cfg.Providers {
		for _, k := range p.Keys {
			fps[p.Name+"/"+k.ID] = k.Value.Fingerprint()
		}
	}
	return fps
}

// sourceFor is the hold source of a service's reported failures.
func sourceFor(service string) string {
	if service == "prober" {
		return hold.SourceProber
	}
	return hold.SourceProxy
}
