package config

import (
	"math"
	"strings"
)

// Telemetry configures OpenTelemetry: a trace per request exported over
// OTLP, off by default.
//
// Whether traces are exported: OTEL_SDK_DISABLED=true turns them off
// whatever else is set; otherwise Traces decides when set ("otlp" or
// "none"); otherwise OTEL_TRACES_EXPORTER=otlp turns them on. The exporter
// itself (endpoint, headers, timeout, TLS, compression) is configured by the
// standard OTEL_EXPORTER_OTLP_* variables.
type Telemetry struct {
	// Traces is "otlp" (export), "none" (never export, whatever
	// OTEL_TRACES_EXPORTER says) or "" (OTEL_TRACES_EXPORTER decides; off
	// when it is unset).
	Traces string `koanf:"traces"`
	// ServiceName is the service.name of the traces' resource;
	// OTEL_SERVICE_NAME (then a service.name in OTEL_RESOURCE_ATTRIBUTES)
	// overrides it. Default: DefaultTelemetryServiceName.
	ServiceName string `koanf:"service_name"`
	// SampleRatio is the share (0 to 1) of requests traced; default 1.
	SampleRatio *float64 `koanf:"sample_ratio"`
	// FollowCallerSampling: a request that carries a W3C traceparent is
	// exported when its caller's sampled flag says so (a caller can ask
	// for export past SampleRatio, or withhold it). Off by default:
	// SampleRatio decides by trace id for every request, the caller's too
	// (its spans still join the caller's trace).
	FollowCallerSampling bool `koanf:"follow_caller_sampling"`
}

// Telemetry values and defaults.
const (
	TracesOTLP                  = "otlp"
	TracesNone                  = "none"
	DefaultTelemetryServiceName = "switchyard-proxy"
)

// Service is service_name with its default.
func (t Telemetry) Service() string {
	if t.ServiceName == "" {
		return DefaultTelemetryServiceName
	}
	return t.ServiceName
}

// Ratio is sample_ratio with its default.
func (t Telemetry) Ratio() float64 {
	if t.SampleRatio == nil {
		return 1
	}
	return *t.SampleRatio
}

func (v *validator) telemetry() {
	t := v.cfg.Telemetry
	if t.Traces != "" {
		v.oneOf("telemetry.traces", t.Traces, TracesOTLP, TracesNone)
	}
	if t.ServiceName != "" && strings.TrimSpace(t.ServiceName) == "" {
		v.add("telemetry.service_name", "must not be blank")
	}
	if r := t.SampleRatio; r != nil && (math.IsNaN(*r) || *r < 0 || *r > 1) {
		v.add("telemetry.sample_ratio", "must be from 0 to 1, got %g", *r)
	}
}
