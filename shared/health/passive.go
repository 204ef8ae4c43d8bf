package health

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Passive reports: every proxy counts, per target it tried, the attempts
// that succeeded and the attempts that failed for a reason that says
// something about the target, and publishes the deltas every
// proxy.passive_report_interval on a core NATS subject (not captured by
// any stream: a report nobody receives is lost). The prober sums them over
// a sliding window into the passive_success and passive_failure of its
// health records.
const (
	// PassivePrefix is the first two tokens of every passive report subject.
	PassivePrefix = "switchyard.passive"
	// PassiveSubjects is the wildcard the prober subscribes to.
	PassiveSubjects = PassivePrefix + ".>"
	// PassiveVersion is the version of the PassiveReport JSON.
	PassiveVersion = 1
)

// PassiveSubject is the subject of a provider's passive reports:
// switchyard.passive.<provider> (provider names are restricted to
// [A-Za-z0-9_-] by config validation).
func PassiveSubject(provider string) string { return PassivePrefix + "." + provider }

// PassiveCounts are caller attempts at one target.
type PassiveCounts struct {
	Success uint64 `json:"success"`
	Failure uint64 `json:"failure"`
	// LatencyMSSum sums the latency (ms) of the successful attempts: the
	// time from sending to the upstream's response headers (a stream's
	// first byte). LatencyMSSum / Success is their average.
	LatencyMSSum float64 `json:"latency_ms_sum,omitempty"`
}

// AvgLatencyMS is the average latency of the successful attempts (0 when
// none).
func (c PassiveCounts) AvgLatencyMS() float64 {
	if c.Success == 0 {
		return 0
	}
	return c.LatencyMSSum / float64(c.Success)
}

// Add adds o to c.
func (c *PassiveCounts) Add(o PassiveCounts) {
	c.Success += o.Success
	c.Failure += o.Failure
	c.LatencyMSSum += o.LatencyMSSum
}

// IsZero reports whether no attempt is counted.
func (c PassiveCounts) IsZero() bool { return c.Success == 0 && c.Failure == 0 }

// PassiveReport is one proxy's passive report for one provider: the
// attempts per key id since its previous report.
type PassiveReport struct {
	Version  int    `json:"v"`
	Provider string `json:"provider"`
	// Instance is the proxy's instance id.
	Instance string `json:"instance"`
	// At is when the report was made; IntervalMS the time its deltas
	// were counted over (since the proxy's previous report tick).
	At         time.Time `json:"at"`
	IntervalMS int64     `json:"interval_ms"`
	// Keys are the deltas by key id ("none" for a keyless provider). Keys
	// without attempts in the interval are left out.
	Keys map[string]PassiveCounts `json:"keys"`
	// Models are the same attempts by model (the configuration's model
	// name), across the provider's keys; models without attempts are left
	// out. Proxies fold them into their latency averages (least_latency
	// routing), the prober into its records' passive_latency_by_model.
	Models map[string]PassiveCounts `json:"models,omitempty"`
}

// ErrPassiveReport marks a passive report that cannot be used.
var ErrPassiveReport = errors.New("health: bad passive report")

// ParsePassiveReport decodes and checks a report.
func ParsePassiveReport(data []byte) (PassiveReport, error) {
	var r PassiveReport
	if err := json.Unmarshal(data, &r); err != nil {
		return PassiveReport{}, fmt.Errorf("%w: %w", ErrPassiveReport, err)
	}
	switch {
	case r.Version != PassiveVersion:
		return PassiveReport{}, fmt.Errorf("%w: version %d, want %d", ErrPassiveReport, r.Version, PassiveVersion)
	case r.Provider == "":
		return PassiveReport{}, fmt.Errorf("%w: no provider", ErrPassiveReport)
	}
	return r, nil
}
