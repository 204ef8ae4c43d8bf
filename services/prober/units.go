package prober

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"switchyard.dev/shared/lease"
)

// unitID names a check unit: a provider, or one of its keys with
// health_check.per_key. It is the unit's identity across routing
// configurations and names its lease, check.<provider>[.<key id>].
type unitID struct{ provider, keyID string }

func (id unitID) leaseKey() string {
	if id.keyID == "" {
		return "check." + id.provider
	}
	return "check." + id.provider + "." + id.keyID
}

// unitSet runs one goroutine per check unit of the routing in use: started
// once the fleet's tables have loaded, and reconciled with every routing
// applied after that. A unit the new routing still has keeps running (it
// reads its target from the routing at each wake); a unit it no longer has
// is stopped; a new one is started.
type unitSet struct {
	s        *Service
	mu       sync.Mutex
	ctx      context.Context // nil until start
	started  bool            // the first units have started
	closed   bool            // no unit starts any more
	js       jetstream.JetStream
	kv       jetstream.KeyValue // switchyard_leases
	running  map[unitID]*unitRun
	stopping map[unitID]<-chan struct{} // closed once the stopped unit has cleaned up
	wg       sync.WaitGroup
}

type unitRun struct {
	cancel context.CancelFunc
	done   <-chan struct{}
}

func newUnitSet(s *Service) *unitSet {
	return &unitSet{s: s, running: map[unitID]*unitRun{}, stopping: map[unitID]<-chan struct{}{}}
}

// start runs the units of the routing in use until ctx ends.
func (us *unitSet) start(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) {
	us.mu.Lock()
	defer us.mu.Unlock()
	us.ctx, us.js, us.kv = ctx, js, kv
	us.reconcileLocked()
	us.started = true
}

// wait waits until ctx of start is done, then for every unit to end; no
// unit starts after that.
func (us *unitSet) wait() {
	<-us.ctx.Done()
	us.mu.Lock()
	us.closed = true
	us.mu.Unlock()
	us.wg.Wait()
}

// reconcile brings the running units in line with the routing in use
// (nothing before start).
func (us *unitSet) reconcile() {
	us.mu.Lock()
	defer us.mu.Unlock()
	if us.ctx == nil || us.closed || us.ctx.Err() != nil {
		return
	}
	us.reconcileLocked()
}

func (us *unitSet) reconcileLocked() {
	want := map[unitID]bool{}
	for _, id := range us.s.routing().unitIDs() {
		want[id] = true
		if us.running[id] != nil {
			continue
		}
		prev := us.stopping[id] // the same unit stopped by an earlier routing, still cleaning up
		delete(us.stopping, id)
		ctx, cancel := context.WithCancel(us.ctx)
		done := make(chan struct{})
		us.running[id] = &unitRun{cancel: cancel, done: done}
		if us.started {
			us.s.log.Info("check unit started: new in the routing configuration", "lease", id.leaseKey())
		}
		u := &unit{id: id, lease: &lease.Lease{JS: us.js, KV: us.kv, Key: id.leaseKey(), Owner: us.s.inst, TTL: us.s.cfg.LeaseTTL}}
		us.wg.Go(func() {
			defer close(done)
			defer cancel()
			if prev != nil {
				select {
				case <-prev:
				case <-ctx.Done():
					return
				}
			}
			us.s.runUnit(ctx, u)
		})
	}
	for id, r := range us.running {
		if want[id] {
			continue
		}
		r.cancel()
		delete(us.running, id)
		us.stopping[id] = r.done
		us.s.log.Info("check unit stopped: not in the routing configuration", "lease", id.leaseKey())
	}
	for id, done := range us.stopping {
		select {
		case <-done:
			delete(us.stopping, id)
		default:
		}
	}
}
