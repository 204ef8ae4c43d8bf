package holdkv

import (
	"encoding/json"
	"log/slog"

	"github.com/nats-io/nats.go"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/hold"
)

// SubscribeTallies delivers every breaker tally published on
// bus.BreakerSubjects to apply (hold.Engine.ApplyTally), on the
// subscription's own goroutine, until the subscription is drained or the
// connection closes. A message that is not a tally is logged once per
// thousand and skipped. The subscription survives reconnects (nats.go
// subscribes again); tallies published while NATS was away are lost, which
// costs the breaker at most a count it would have reached anyway.
func SubscribeTallies(nc *nats.Conn, apply func(hold.Tally), log *slog.Logger) (*nats.Subscription, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var bad uint64
	return nc.Subscribe(bus.BreakerSubjects, func(m *nats.Msg) {
		var t hold.Tally
		if err := json.Unmarshal(m.Data, &t); err != nil || t.Version != hold.TallySchemaVersion {
			if bad++; bad%1000 == 1 {
				log.Warn("breaker tally skipped: not a tally of this schema", "subject", m.Subject, "err", err, "skipped", bad)
			}
			return
		}
		apply(t)
	})
}
