package proxy

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard.dev/services/proxy/internal/route"
	"switchyard.dev/shared/health"
)

// Latency averages (least_latency, health_aware and key selection by
// latency) are fed three ways: this proxy's own attempts as they end
// (request.observeLatency), the other proxies' passive reports (every
// proxy_passive_report_interval, on switchyard.passive.<provider>), and,
// for a proxy that has not measured a target yet, the prober's health
// records (passive_latency_by_model), so that a fresh proxy starts from
// what the fleet saw.

// runLatency folds the other proxies' passive reports into the latency
// averages until ctx ends.
func (s *Service) runLatency(ctx context.Context) {
	nc := s.member.Conn()
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(health.PassiveSubjects, ch)
	if err != nil {
		s.log.Warn("latency reports not received", "err", err)
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-ch:
			rep, err := health.ParsePassiveReport(m.Data)
			if err != nil || rep.Instance == s.member.Instance {
				continue // this proxy's own attempts are in already
			}
			s.foldReport(rep, time.Now().UnixNano())
		}
	}
}

// foldReport folds one passive report's successful attempts into the
// averages of the targets and keys this proxy knows.
func (s *Service) foldReport(rep health.PassiveReport, now int64) {
	alpha := s.rt.Load().latencyAlpha
	for model, c := range rep.Models {
		if c.Success > 0 {
			s.latency.Lookup(rep.Provider, model).Fold(c.AvgLatencyMS(), c.Success, alpha, now)
		}
	}
	for key, c := range rep.Keys {
		if c.Success > 0 {
			s.latency.LookupKey(rep.Provider, key).Fold(c.AvgLatencyMS(), c.Success, alpha, now)
		}
	}
}

// seedLatency gives targets this proxy has not measured yet the latency
// the health records report.
func seedLatency(book *route.LatencyBook, snap *health.Snapshot) {
	for _, rec := range snap.Records() {
		at := rec.UpdatedAt.UnixNano()
		if rec.Key == "" {
			for model, ms := range rec.PassiveLatencyByModel {
				book.Lookup(rec.Provider, model).Seed(ms, at)
			}
		} else if rec.PassiveLatencyMS > 0 {
			book.LookupKey(rec.Provider, rec.Key).Seed(rec.PassiveLatencyMS, at)
		}
	}
}
