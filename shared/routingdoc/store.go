package routingdoc

// The Store: its options, construction (bound or bound later) and how its
// bucket errors are wrapped. Reads are in read.go, writes in write.go.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
)

// DefaultOpTimeout bounds each bucket operation (a Get, a write, one scan
// of the version keys); the caller's context may end it sooner.
const DefaultOpTimeout = 5 * time.Second

// maxNumberTries bounds how many version numbers one write tries when
// others take the numbers it picked.
const maxNumberTries = 32

// Store keeps the fleet's routing configuration in the switchyard_config
// bucket (bus.Resources.Config): the versions, the active pointer, and the
// writes that move it. Every method is safe for concurrent use, within a
// process and across the fleet: the pointer only moves by compare-and-set.
//
// A Store made by NewUnbound has no bucket yet: until Bind, every
// operation fails with ErrUnavailable and Watch waits.
type Store struct {
	nc        *nats.Conn
	log       *slog.Logger
	b         bus.Binding[binding]
	validate  func(doc []byte, name string) error
	now       func() time.Time
	opTimeout time.Duration
	onSkip    func(error)
}

type binding struct{ kv jetstream.KeyValue }

// Option tunes a Store.
type Option func(*Store)

// WithValidate sets the validation every write runs before it writes
// anything (Import, Activate, Rollback, Edit): the services pass a closure
// over config.LoadDocument, so that a document that does not load never
// becomes active. name is "config version <N>", for messages. Without it
// only well-formedness is checked.
func WithValidate(f func(doc []byte, name string) error) Option {
	return func(s *Store) { s.validate = f }
}

// WithClock sets the clock of the at fields (default time.Now).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithOpTimeout bounds each bucket operation (default DefaultOpTimeout).
func WithOpTimeout(d time.Duration) Option { return func(s *Store) { s.opTimeout = d } }

// WithOnSkip is called (on the Watch goroutine) for each active pointer
// Watch skips because its version cannot be read; the error names the
// version. Skips are logged at error level either way.
func WithOnSkip(f func(error)) Option { return func(s *Store) { s.onSkip = f } }

// New returns a Store bound to kv (bus.Resources.Config). nc is kv's
// connection: its reconnects restart Watch at once, and every successful
// write publishes an Event on it. nc may be nil (no events; Watch then
// relies on its own checks). log may be nil.
func New(nc *nats.Conn, kv jetstream.KeyValue, log *slog.Logger, opts ...Option) *Store {
	s := NewUnbound(nc, log, opts...)
	s.Bind(kv)
	return s
}

// NewUnbound returns a Store on nc whose bucket is bound later (Bind).
func NewUnbound(nc *nats.Conn, log *slog.Logger, opts ...Option) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		nc:        nc,
		log:       log.With("component", "routingdoc"),
		now:       time.Now,
		opTimeout: DefaultOpTimeout,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Bind sets the bucket (bus.Resources.Config); only the first Bind counts
// (bus.Binding).
func (s *Store) Bind(kv jetstream.KeyValue) { s.b.Bind(&binding{kv: kv}) }

// Bound is closed once the Store has its bucket.
func (s *Store) Bound() <-chan struct{} { return s.b.Bound() }

// ready returns the bucket, failing fast when there is none yet or the
// connection is down.
func (s *Store) ready(op string) (jetstream.KeyValue, error) {
	b := s.b.Load()
	if b == nil {
		return nil, fmt.Errorf("%w: %s: bucket not bound yet", ErrUnavailable, op)
	}
	if s.nc != nil && !s.nc.IsConnected() {
		return nil, fmt.Errorf("%w: %s: NATS %s", ErrUnavailable, op, s.nc.Status())
	}
	return b.kv, nil
}

// fail wraps an error that is not an answer about the configuration.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("routingdoc: %s: %w", op, ctx.Err())
	}
	if bus.Unavailable(err) {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	return fmt.Errorf("routingdoc: %s: %w", op, err)
}
