package metrics

import (
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// NewNATSUp returns switchyard_<service>_nats_up, read at scrape time: 1
// while nc is connected to a NATS server, 0 while it is not (reconnecting,
// closed). The admin service exports its own switchyard_admin_nats_up,
// which also asks that its buckets are bound.
func NewNATSUp(service string, nc *nats.Conn) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_" + service + "_nats_up",
		Help: "1 while this " + service + " is connected to NATS, 0 while it is not.",
	}, func() float64 {
		if nc.IsConnected() {
			return 1
		}
		return 0
	})
}
