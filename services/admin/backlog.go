package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/usage/rollup"
)

// The usage backlog: the records SWITCHYARD_USAGE holds that the recorder
// has not folded into the rollups yet (after its checkpoint). The stream
// discards its oldest records at metering.max_bytes or metering.retention
// whatever the recorder did with them, so a recorder that is down or
// slower than the traffic loses records: the backlog watch says so before
// it happens. Every admin instance measures it (the recorder may be the
// one that is down), from the stream's state and the checkpoint: no
// consumer, nothing read.

// Bounds of the backlog watch.
const (
	// backlogEvery is how often the backlog is measured.
	backlogEvery = 5 * time.Second
	// BacklogAlertShare is the share of the stream's bounds (max_bytes,
	// or the age of its oldest unfolded record against max_age) at which
	// the backlog alerts: a usage_backlog event, /readyz degraded.
	BacklogAlertShare = 0.8
	// backlogClearShare ends the alert (below it, with a margin, so that
	// a backlog hovering at the limit does not flap).
	backlogClearShare = 0.7
)

// backlogSubject is the subject of the usage backlog events:
// switchyard.events.usage.backlog (outcome backlog or cleared).
const backlogSubject = bus.EventsPrefix + ".usage.backlog"

// backlogState is one measurement.
type backlogState struct {
	// Messages and Bytes are what the stream holds after the checkpoint
	// (Bytes estimated from the stream's mean message size).
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
	// MaxBytes and MaxAge are the stream's bounds (0: none).
	MaxBytes int64         `json:"max_bytes"`
	MaxAge   time.Duration `json:"-"`
	// OldestAt is when the stream stored the oldest record not folded
	// (zero: none).
	OldestAt time.Time `json:"oldest_at,omitzero"`
	// Share is the larger of Bytes/MaxBytes and the oldest record's age
	// over MaxAge.
	Share float64 `json:"share"`
	// Alert is true from BacklogAlertShare until the share falls below
	// backlogClearShare.
	Alert bool      `json:"alert"`
	At    time.Time `json:"at"`
}

// reason is the /readyz line of an alerting backlog.
func (b *backlogState) reason() string {
	return fmt.Sprintf("usage backlog at %.0f%% of the usage stream's bounds (%d records, ~%d bytes not folded into the rollups): "+
		"records will be discarded before the recorder reads them unless it catches up (is an admin instance recording?)",
		b.Share*100, b.Messages, b.Bytes)
}

// backlogEvent is the JSON of a usage backlog event.
type backlogEvent struct {
	V        int       `json:"v"`
	Kind     string    `json:"kind"`    // "usage", the subject's kind token
	Outcome  string    `json:"outcome"` // backlog or cleared
	Messages uint64    `json:"messages"`
	Bytes    uint64    `json:"bytes"`
	MaxBytes int64     `json:"max_bytes"`
	Share    float64   `json:"share"`
	OldestAt time.Time `json:"oldest_at,omitzero"`
	Instance string    `json:"instance"`
	At       time.Time `json:"at"`
}

// backlogWatch measures the backlog every backlogEvery.
type backlogWatch struct {
	s     *Service
	every time.Duration
	state atomic.Pointer[backlogState]
}

// run measures until ctx ends.
func (w *backlogWatch) run(ctx context.Context) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		if err := w.measure(ctx); err != nil && ctx.Err() == nil {
			w.s.log.Debug("admin: usage backlog not measured", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// measure takes one measurement, and publishes an event when the alert
// starts or ends.
func (w *backlogWatch) measure(ctx context.Context) error {
	res := w.s.member.Resources()
	if res == nil || res.Usage == nil || res.UsageRollups == nil {
		return nil // not bound yet
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	info, err := res.Usage.Info(ctx)
	if err != nil {
		return err
	}
	ck, _, err := rollup.NewStore(nil, res.UsageRollups, nil).Checkpoint(ctx) // a read: no JetStream context
	if err != nil {
		return err
	}
	st := &backlogState{MaxBytes: info.Config.MaxBytes, MaxAge: info.Config.MaxAge, At: time.Now().UTC()}
	from := max(ck.Seq+1, info.State.FirstSeq) // the first record not folded the stream still holds
	if info.State.Msgs > 0 && info.State.LastSeq >= from {
		st.Messages = info.State.LastSeq - from + 1
		st.Bytes = uint64(float64(info.State.Bytes) * float64(st.Messages) / float64(info.State.Msgs))
		if m, err := res.Usage.GetMsg(ctx, from); err == nil {
			st.OldestAt = m.Time
		}
	}
	if st.MaxBytes > 0 {
		st.Share = float64(st.Bytes) / float64(st.MaxBytes)
	}
	if st.MaxAge > 0 && !st.OldestAt.IsZero() {
		st.Share = max(st.Share, float64(st.At.Sub(st.OldestAt))/float64(st.MaxAge))
	}
	prev := w.state.Load()
	wasAlert := prev != nil && prev.Alert
	st.Alert = st.Share >= BacklogAlertShare || (wasAlert && st.Share >= backlogClearShare)
	w.state.Store(st)
	if st.Alert != wasAlert {
		w.publish(st, ck.Seq)
	}
	return nil
}

// publish sends the event of an alert's start or end. Every admin
// instance measures the same backlog: the events stream keeps one event
// per transition (its message id is the transition and the checkpoint,
// the same on every instance), and subscribers may see one per instance.
func (w *backlogWatch) publish(st *backlogState, checkpoint uint64) {
	outcome := "backlog"
	if !st.Alert {
		outcome = "cleared"
	}
	ev := backlogEvent{V: 1, Kind: "usage", Outcome: outcome, Messages: st.Messages, Bytes: st.Bytes,
		MaxBytes: st.MaxBytes, Share: st.Share, OldestAt: st.OldestAt, Instance: w.s.member.Instance, At: st.At}
	b, _ := json.Marshal(ev)
	msg := nats.NewMsg(backlogSubject)
	msg.Data = b
	msg.Header.Set(jetstream.MsgIDHeader, "usage-backlog-"+outcome+"-"+strconv.FormatUint(checkpoint, 10))
	if err := w.s.nc.PublishMsg(msg); err != nil {
		w.s.log.Warn("admin: publish the usage backlog event", "err", err)
	}
	if st.Alert {
		w.s.log.Warn("admin: "+st.reason(), "share", st.Share)
	} else {
		w.s.log.Info("admin: usage backlog cleared", "share", st.Share, "messages", st.Messages)
	}
}

// backlogCollector exports the last measurement, and the recorder's
// state on this instance (rec nil: it never records).
type backlogCollector struct {
	w   *backlogWatch
	rec *recorder
}

var (
	descBacklogBytes = prometheus.NewDesc("switchyard_usage_backlog_bytes",
		"Bytes of usage records SWITCHYARD_USAGE holds that the recorder has not folded into the rollups (estimated from the mean record size).", nil, nil)
	descBacklogMessages = prometheus.NewDesc("switchyard_usage_backlog_messages",
		"Usage messages SWITCHYARD_USAGE holds after the recorder's checkpoint.", nil, nil)
	descRecorderActive = prometheus.NewDesc("switchyard_usage_recorder_active",
		"1 while this admin instance holds the usage recorder's lease and folds the usage stream.", nil, nil)
	descRecorderCheckpoint = prometheus.NewDesc("switchyard_usage_recorder_checkpoint",
		"The stream sequence of the last usage message this instance's recorder folded and checkpointed.", nil, nil)
	descRecorderFlushFailures = prometheus.NewDesc("switchyard_usage_recorder_flush_failures_total",
		"Failed attempts of this instance's recorder to write the rollups or the usage store (PostgreSQL); each is retried.", nil, nil)
	descBacklogShare = prometheus.NewDesc("switchyard_usage_backlog_share",
		"The backlog against the usage stream's bounds (bytes over max_bytes, or the oldest unfolded record's age over max_age, the larger): at 1 records are discarded unread.", nil, nil)
)

func (c backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBacklogBytes
	ch <- descBacklogMessages
	ch <- descBacklogShare
	ch <- descRecorderActive
	ch <- descRecorderCheckpoint
	ch <- descRecorderFlushFailures
}

func (c backlogCollector) Collect(ch chan<- prometheus.Metric) {
	if r := c.rec; r != nil {
		active := 0.0
		if r.active.Load() {
			active = 1
		}
		ch <- prometheus.MustNewConstMetric(descRecorderActive, prometheus.GaugeValue, active)
		ch <- prometheus.MustNewConstMetric(descRecorderCheckpoint, prometheus.GaugeValue, float64(r.checkpoint.Load()))
		ch <- prometheus.MustNewConstMetric(descRecorderFlushFailures, prometheus.CounterValue, float64(r.flushFailures.Load()))
	}
	st := c.w.state.Load()
	if st == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descBacklogBytes, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(descBacklogMessages, prometheus.GaugeValue, float64(st.Messages))
	ch <- prometheus.MustNewConstMetric(descBacklogShare, prometheus.GaugeValue, st.Share)
}
