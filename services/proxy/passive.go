package proxy

// Passive reports: the proxy's attempts are counted per target
// (internal/passive) on the routing that served them, and published every
// proxy.passive_report_interval, the counts of replaced routings too.

import (
	"context"
	"time"
)

// flushPassive publishes the passive counts of the routing in use and of
// the routings it replaced (of their last requests), over the interval
// since the last report.
func (s *Service) flushPassive(now time.Time, since time.Duration) {
	nc := s.member.Conn()
	sent, dropped := s.rt.Load().passive.Flush(nc, s.member.Instance, now, since)
	s.passive.mu.Lock()
	keep := s.passive.retired[:0]
	for _, old := range s.passive.retired {
		idle := old.active.Load() == 0 // before the flush: nothing counts after it
		n, d := old.passive.Flush(nc, s.member.Instance, now, since)
		sent, dropped = sent+n, dropped+d
		if !idle {
			keep = append(keep, old)
		}
	}
	clear(s.passive.retired[len(keep):])
	s.passive.retired = keep
	s.passive.mu.Unlock()
	s.metrics.passiveReports(sent, dropped)
	if dropped > 0 {
		s.log.Debug("passive reports dropped", "count", dropped, "nats_connected", nc.IsConnected())
	}
}

// runPassive publishes the passive counters every
// proxy.passive_report_interval until ctx ends, then once more for the
// last requests. Serve runs it beside the fleet member when the proxy has
// a NATS connection and the reports are on.
func (s *Service) runPassive(ctx context.Context) {
	every := s.cfg.Proxy.PassiveReportInterval
	last := time.Now()
	flush := func(now time.Time) {
		s.flushPassive(now, now.Sub(last))
		last = now
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			flush(time.Now())
			return
		case now := <-t.C:
			flush(now)
		}
	}
}
