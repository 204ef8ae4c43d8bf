package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard.dev/shared/headroom"
)

// HeadroomName is the series of HeadroomCollector (a documented contract,
// as the hold collector's names are).
const HeadroomName = "switchyard_key_headroom_ratio"

// HeadroomLabels are its label names, in order.
var HeadroomLabels = []string{"provider", "key", "kind"}

// HeadroomSource is what the headroom collector reads: *headroom.Book.
type HeadroomSource interface {
	Entries() []headroom.Entry
}

var _ HeadroomSource = (*headroom.Book)(nil)

// HeadroomCollector exports, at scrape time, the share of each key's
// rate-limit windows left as its provider last stated them (less this
// process's requests in flight), by kind (requests, tokens, input_tokens,
// output_tokens):
//
//	switchyard_key_headroom_ratio{provider,key,kind}  0 spent ... 1 whole
//
// Where the provider scopes windows by model (OpenAI, Anthropic), a key's
// series is its tightest model's. A window whose reset has passed counts
// as whole; one stated without a limit is not exported. Labels are
// provider names, key ids and kinds: never a secret.
type HeadroomCollector struct {
	src  HeadroomSource
	now  func() time.Time
	desc *prometheus.Desc
}

var _ prometheus.Collector = (*HeadroomCollector)(nil)

// NewHeadroomCollector returns a collector over src.
func NewHeadroomCollector(src HeadroomSource) *HeadroomCollector {
	return &HeadroomCollector{src: src, now: time.Now, desc: prometheus.NewDesc(HeadroomName,
		"Share of a key's rate-limit window left as its provider last stated it, less this process's requests in flight (per model where the provider scopes limits by model: the tightest model's).",
		HeadroomLabels, nil)}
}

// Describe implements prometheus.Collector.
func (c *HeadroomCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *HeadroomCollector) Collect(ch chan<- prometheus.Metric) {
	type series struct {
		provider, key string
		kind          headroom.Kind
	}
	now := c.now().UnixNano()
	least := map[series]float64{}
	for _, e := range c.src.Entries() {
		for _, w := range e.Windows {
			ratio, ok := w.Ratio(now)
			if !ok {
				continue
			}
			s := series{e.Provider, e.Key, w.Kind}
			if old, ok := least[s]; !ok || ratio < old {
				least[s] = ratio
			}
		}
	}
	for s, ratio := range least {
		if m, err := prometheus.NewConstMetric(c.desc, prometheus.GaugeValue, ratio, s.provider, s.key, s.kind.String()); err == nil {
			ch <- m
		}
	}
}
