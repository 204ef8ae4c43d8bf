package routingdoc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"switchyard.dev/shared/config"
)

// FollowOptions configure Follow.
type FollowOptions struct {
	// Base is the process's configuration (its file and environment); a
	// version applies over it (config.LoadOverlay). Required.
	Base *config.Config
	// Environ resolves the documents' env: secrets (nil: os.Environ()).
	Environ []string
	// Instance names the process as the importer of the first version
	// and in its reports (Tracker.Follow); Service is its kind (proxy,
	// prober, admin).
	Instance string
	Service  string
	// Apply switches the process to cfg, the routing configuration of
	// version. An error keeps the routing in use (and is reported through
	// Failed).
	Apply func(cfg *config.Config, version uint64) error
	// Loaded is called once, when the process knows the fleet's routing
	// configuration: the active version applied (or failed), or none
	// active (the file's is in use).
	Loaded func()
	// Failed is called for a version the process could not load or apply
	// (a document a newer release wrote, a secret this host lacks); nil
	// when a later version applied.
	Failed func(version uint64, err error)
	Log    *slog.Logger
}

// Follow keeps a process on the fleet's active routing configuration
// until ctx ends: once the store is bound it imports the routing part of
// the process's file as version 1 when the fleet has none (the first
// process of a fleet to start wins; the others use it), then applies the
// active version and every version activated after it. A version that
// does not load or apply is reported (Failed) and the routing in use
// stays.
func Follow(ctx context.Context, s *Store, o FollowOptions) error {
	if o.Base == nil || o.Apply == nil {
		return errors.New("routingdoc: follow: Base and Apply are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Environ == nil {
		o.Environ = os.Environ()
	}
	var once sync.Once
	loaded := func() {
		once.Do(func() {
			if o.Loaded != nil {
				o.Loaded()
			}
		})
	}
	select {
	case <-s.Bound():
	case <-ctx.Done():
		return nil
	}
	if o.Base.File != "" {
		if err := importFile(ctx, s, o); err != nil {
			o.Log.Warn("routing configuration not imported", "file", o.Base.File, "err", err)
		}
	}
	if _, err := s.Active(ctx); errors.Is(err, ErrNoActive) {
		o.Log.Info("no routing configuration in the fleet yet: routing from the file")
		loaded()
	}
	applied := uint64(0)
	// A version that cannot even be read (a newer schema during a rolling
	// upgrade, a damaged value) is a version not applied like one that does
	// not load: reported, and the process knows where the fleet stands.
	skipped := func(version uint64, err error) {
		if s.onSkip != nil {
			s.onSkip(err)
		}
		if o.Failed != nil {
			o.Failed(version, err)
		}
		loaded()
	}
	return s.watch(ctx, func(v Version) {
		defer loaded()
		if v.Version == applied {
			return
		}
		name := fmt.Sprintf("config version %d", v.Version)
		cfg, err := config.LoadOverlay(o.Base, o.Environ, []byte(v.Document), name)
		if err == nil {
			err = o.Apply(cfg, v.Version)
		}
		if err != nil {
			o.Log.Error("routing configuration not applied: keeping the one in use", "version", v.Version, "err", err)
			if o.Failed != nil {
				o.Failed(v.Version, err)
			}
			return
		}
		applied = v.Version
		for _, w := range cfg.Warnings {
			o.Log.Warn(w, "version", v.Version)
		}
		if o.Failed != nil {
			o.Failed(v.Version, nil)
		}
	}, skipped)
}

// importFile imports the routing part of the process's file as the first
// version when the fleet has none.
func importFile(ctx context.Context, s *Store, o FollowOptions) error {
	if _, err := s.Active(ctx); !errors.Is(err, ErrNoActive) {
		return nil // a version is active (or the store does not answer: Watch waits)
	}
	doc, err := config.ExtractDocument(o.Base.File)
	if err != nil {
		return err
	}
	// Only what the process routes with: a configuration changed after it
	// was read from its file (in code, say) is not its file's.
	if cfg, err := config.LoadOverlay(o.Base, o.Environ, doc, "the file's routing"); err != nil {
		return err
	} else if !config.SameRouting(cfg, o.Base) {
		return errors.New("the configuration in use is not the file's (changed after loading): not imported")
	}
	by := o.Instance
	if by == "" {
		by = "import"
	}
	v, err := s.Import(ctx, doc, Meta{By: by, Comment: "imported from the file " + filepath.Base(o.Base.File)})
	switch {
	case errors.Is(err, ErrExists):
		return nil
	case err != nil:
		return err
	}
	o.Log.Info("routing configuration imported from the file", "version", v.Version, "file", o.Base.File)
	return nil
}

// Tracker is what a service reports about the fleet's routing
// configuration (its /readyz): whether the active version is known yet,
// and a version it could not apply.
type Tracker struct {
	loaded chan struct{}
	once   sync.Once
	failed atomic.Pointer[Failure]
}

// Failure is a version a process could not apply.
type Failure struct {
	Version uint64 `json:"version"`
	Error   string `json:"error"`
}

// NewTracker returns a Tracker whose Loaded is open until Follow knows the
// fleet's version.
func NewTracker() *Tracker { return &Tracker{loaded: make(chan struct{})} }

// Loaded is closed once the fleet's active version is known (applied,
// refused, or none), or Follow ended.
func (t *Tracker) Loaded() <-chan struct{} { return t.loaded }

// Failure is the last version the process could not apply, nil when the
// last version applied.
func (t *Tracker) Failure() *Failure { return t.failed.Load() }

// Stop closes Loaded for a process that will not follow (it stopped
// before NATS answered).
func (t *Tracker) Stop() { t.once.Do(func() { close(t.loaded) }) }

// Follow runs Follow with the Tracker's hooks (o's Loaded and Failed are
// replaced) and closes Loaded when it returns. On the store's connection
// it reports the instance's state (Report) each time a version applies or
// is refused, and answers QuerySubject with it.
func (t *Tracker) Follow(ctx context.Context, s *Store, o FollowOptions) error {
	defer t.Stop()
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	rep := &reporter{nc: s.nc, cur: Report{V: SchemaVersion, Instance: o.Instance, Service: o.Service, At: time.Now().UTC()}}
	stop, err := rep.serve()
	if err != nil {
		o.Log.Warn("routingdoc: instance reports not served", "err", err)
	} else {
		defer stop()
	}
	apply := o.Apply
	o.Apply = func(cfg *config.Config, v uint64) error {
		if err := apply(cfg, v); err != nil {
			return err
		}
		rep.update(func(r *Report) { r.Version, r.Failure = v, nil })
		return nil
	}
	o.Loaded = t.Stop
	o.Failed = func(v uint64, err error) {
		if err == nil {
			t.failed.Store(nil) // and the report said so as it applied
			return
		}
		f := &Failure{Version: v, Error: err.Error()}
		t.failed.Store(f)
		rep.update(func(r *Report) { r.Failure = &Failure{Version: f.Version, Error: f.Error} })
	}
	return Follow(ctx, s, o)
}
