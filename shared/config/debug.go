package config

import "time"

// Debug configures request debug bundles: one per request the proxy keeps
// (every failure, a share of successes, and any request that asks with
// X-Switchyard-Debug: true), published to the SWITCHYARD_DEBUG stream.
type Debug struct {
	// Enabled writes bundles; on by default.
	Enabled *bool `koanf:"enabled"`
	// Retention is how long the stream keeps a bundle.
	Retention time.Duration `koanf:"retention"`
	// MaxBytes bounds the stream (the oldest bundles go first).
	MaxBytes int64 `koanf:"max_bytes"`
	// SampleSuccesses is the share (0 to 1) of successful requests whose
	// bundle is kept; failures are always kept.
	SampleSuccesses *float64 `koanf:"sample_successes"`
	// Buffer is how many bundles a proxy queues for publishing; beyond it
	// new ones are dropped (and counted).
	Buffer int `koanf:"buffer"`
}

// Debug defaults.
const (
	DefaultDebugSampleSuccesses = 0.05
	DefaultDebugBuffer          = 10_000
)

// IsEnabled reports whether bundles are written.
func (d Debug) IsEnabled() bool { return d.Enabled == nil || *d.Enabled }

// SuccessShare is sample_successes with its default.
func (d Debug) SuccessShare() float64 {
	if d.SampleSuccesses == nil {
		return DefaultDebugSampleSuccesses
	}
	return *d.SampleSuccesses
}

func (v *validator) debug() {
	d := v.cfg.Debug
	if d.Retention < time.Minute {
		v.add("debug.retention", "must be at least 1m, got %s", d.Retention)
	}
	if d.MaxBytes < 1<<20 {
		v.add("debug.max_bytes", "must be at least 1048576 (1 MiB), got %d", d.MaxBytes)
	}
	if s := d.SampleSuccesses; s != nil && (*s < 0 || *s > 1) {
		v.add("debug.sample_successes", "must be from 0 to 1, got %g", *s)
	}
	if d.Buffer < 1 {
		v.add("debug.buffer", "must be > 0, got %d", d.Buffer)
	}
}
