package config

// Telemetry configures OpenTelemetry: a trace per request exported over
// OTLP, off by default.
type Telemetry struct{}

func (v *validator) telemetry() {}
