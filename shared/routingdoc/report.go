package routingdoc

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Instance reports: every process that follows the routing configuration
// says which version it routes with and which it refused, so that an
// activation can tell who applied it. Core NATS, no stream: a report is
// the instance's state now, not history.
const (
	// ReportPrefix starts the subject of each report an instance
	// publishes when it applies or refuses a version:
	// switchyard.instances.report.<service>.<instance>.
	ReportPrefix = "switchyard.instances.report"
	// QuerySubject asks every instance for its report: each answers the
	// request's reply subject (nats req switchyard.instances.query ''
	// --replies 0).
	QuerySubject = "switchyard.instances.query"
)

// Report is what one instance says of the routing configuration.
type Report struct {
	V        int    `json:"v"`
	Instance string `json:"instance"`
	Service  string `json:"service"`
	// Version is the version the instance routes with (0: its file's).
	Version uint64 `json:"routing_version"`
	// Failure is the last version it could not apply (nil when the last
	// version applied).
	Failure *Failure  `json:"routing_error,omitempty"`
	At      time.Time `json:"at"`
}

// Decided reports whether the instance applied or refused version.
func (r Report) Decided(version uint64) bool {
	return r.Version == version || (r.Failure != nil && r.Failure.Version == version)
}

// reportSubject is the subject of an instance's reports; instance ids are
// subject tokens (letters, digits, - and _).
func reportSubject(r Report) string {
	return ReportPrefix + "." + token(r.Service) + "." + token(r.Instance)
}

func token(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', '*', '>', ' ', '\t', '\r', '\n':
			return '_'
		}
		return r
	}, s)
}

// reporter publishes an instance's reports and answers queries.
type reporter struct {
	nc  *nats.Conn
	mu  sync.Mutex
	cur Report
}

func (r *reporter) report() Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := r.cur
	if rep.Failure != nil {
		f := *rep.Failure
		rep.Failure = &f
	}
	return rep
}

// update changes the report and publishes it (best effort).
func (r *reporter) update(fn func(*Report)) {
	r.mu.Lock()
	fn(&r.cur)
	r.cur.At = time.Now().UTC()
	rep := r.cur
	r.mu.Unlock()
	if r.nc != nil {
		_ = r.nc.Publish(reportSubject(rep), mustJSON(rep))
	}
}

// serve answers queries until stop is called.
func (r *reporter) serve() (stop func(), err error) {
	if r.nc == nil {
		return func() {}, nil
	}
	sub, err := r.nc.Subscribe(QuerySubject, func(m *nats.Msg) {
		if m.Reply != "" {
			_ = m.Respond(mustJSON(r.report()))
		}
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// Settle is how long Collect waits after the last instance it had not
// heard from before answered: the fleet's members are listed nowhere, so
// the end of their answers is a quiet interval.
const Settle = 200 * time.Millisecond

// Collector gathers the instances' reports around a write: start it
// before the write (it listens to reports and asks every instance for
// its own), then Wait for the version written.
type Collector struct {
	subs   []*nats.Subscription
	change chan struct{}

	mu     sync.Mutex
	seen   map[string]Report
	newest time.Time // when an instance was first heard from, last
}

// Collect starts a Collector on nc. Close it.
func Collect(nc *nats.Conn) (*Collector, error) {
	if nc == nil {
		return nil, errors.New("routingdoc: collect reports: no NATS connection")
	}
	c := &Collector{seen: map[string]Report{}, change: make(chan struct{}, 1), newest: time.Now()}
	inbox := nc.NewRespInbox()
	for _, subj := range []string{ReportPrefix + ".>", inbox} {
		sub, err := nc.Subscribe(subj, c.handle)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.subs = append(c.subs, sub)
	}
	if err := nc.PublishRequest(QuerySubject, inbox, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// handle takes one report (a query's answer or a published one).
func (c *Collector) handle(m *nats.Msg) {
	var r Report
	if json.Unmarshal(m.Data, &r) != nil || r.Instance == "" {
		return
	}
	c.mu.Lock()
	prev, known := c.seen[r.Instance]
	if !known || !r.At.Before(prev.At) {
		c.seen[r.Instance] = r
	}
	if !known {
		c.newest = time.Now()
	}
	c.mu.Unlock()
	select {
	case c.change <- struct{}{}:
	default:
	}
}

// Wait returns every instance's report once each has applied or refused
// version and no new instance answered for Settle (version 0: once the
// answers settled), or when ctx ends or limit passes; the reports are
// sorted by service and instance.
func (c *Collector) Wait(ctx context.Context, version uint64, limit time.Duration) []Report {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		quiet := time.Since(c.newest)
		decided := true
		for _, r := range c.seen {
			if !r.Decided(version) {
				decided = false
			}
		}
		c.mu.Unlock()
		if decided && quiet >= Settle {
			return c.Reports()
		}
		wait := time.NewTimer(max(Settle-quiet, 10*time.Millisecond))
		select {
		case <-c.change:
		case <-wait.C:
		case <-deadline.C:
			wait.Stop()
			return c.Reports()
		case <-ctx.Done():
			wait.Stop()
			return c.Reports()
		}
		wait.Stop()
	}
}

// Reports is what the collector heard so far, sorted by service and
// instance.
func (c *Collector) Reports() []Report {
	c.mu.Lock()
	out := make([]Report, 0, len(c.seen))
	for _, r := range c.seen {
		out = append(out, r)
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Report) int {
		if n := strings.Compare(a.Service, b.Service); n != 0 {
			return n
		}
		return strings.Compare(a.Instance, b.Instance)
	})
	return out
}

// Close stops listening.
func (c *Collector) Close() {
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
}
