package telemetry

// The exporter's settings: telemetry.traces and the standard OTEL_*
// variables (endpoint, headers, TLS, batching, resource).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"switchyard.dev/shared/config"
)

// tracingEnabled applies the precedence of New.
func tracingEnabled(cfg config.Telemetry, env map[string]string, log *slog.Logger) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(env["OTEL_SDK_DISABLED"]), "true") {
		return false, nil
	}
	switch cfg.Traces {
	case config.TracesOTLP:
		return true, nil
	case config.TracesNone:
		return false, nil
	case "":
	default:
		return false, fmt.Errorf("telemetry.traces: unknown value %q (want one of: %s, %s)", cfg.Traces, config.TracesOTLP, config.TracesNone)
	}
	on := false
	for e := range strings.SplitSeq(env["OTEL_TRACES_EXPORTER"], ",") {
		switch e = strings.TrimSpace(e); e {
		case "", "none":
		case "otlp":
			on = true
		default:
			if log != nil {
				log.Warn("OTEL_TRACES_EXPORTER names an exporter the proxy does not have (only otlp)", "exporter", e)
			}
		}
	}
	return on, nil
}

// envMap is environ as a map (a later entry wins, like os.Getenv).
func envMap(environ []string) map[string]string {
	m := make(map[string]string)
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "OTEL_") {
			m[k] = v
		}
	}
	return m
}

// otlpEnv is the trace-specific variable OTEL_EXPORTER_OTLP_TRACES_<name>
// if set, else OTEL_EXPORTER_OTLP_<name>, with the variable's name.
func otlpEnv(env map[string]string, name string) (value, variable string) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_" + name, "OTEL_EXPORTER_OTLP_" + name} {
		if v := strings.TrimSpace(env[k]); v != "" {
			return v, k
		}
	}
	return "", ""
}

// otlpOptions are the exporter's options from the standard variables.
func otlpOptions(env map[string]string) ([]otlptracehttp.Option, error) {
	var opts []otlptracehttp.Option
	if p, k := otlpEnv(env, "PROTOCOL"); p != "" && p != "http/protobuf" {
		return nil, fmt.Errorf("%s=%s: the proxy exports traces over http/protobuf only", k, p)
	}

	endpoint, k := env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	signal := endpoint != ""
	if !signal {
		endpoint, k = env["OTEL_EXPORTER_OTLP_ENDPOINT"], "OTEL_EXPORTER_OTLP_ENDPOINT"
	}
	if endpoint = strings.TrimSpace(endpoint); endpoint != "" {
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s: want an http:// or https:// URL, got %q", k, endpoint)
		}
		if !signal { // the base URL: the traces path is appended
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	} else if v, k := otlpEnv(env, "INSECURE"); v != "" {
		// Only for the default endpoint: a URL's scheme decides otherwise.
		insecure, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("%s: want true or false, got %q", k, v)
		}
		if insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}

	headers := map[string]string{}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if err := parseHeaders(env[k], headers); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err) // never the value: it holds credentials
		}
	}
	if len(headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(headers))
	}

	if v, k := otlpEnv(env, "TIMEOUT"); v != "" {
		ms, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: want milliseconds, got %q", k, v)
		}
		opts = append(opts, otlptracehttp.WithTimeout(time.Duration(ms)*time.Millisecond))
	}

	switch v, k := otlpEnv(env, "COMPRESSION"); v {
	case "":
	case "gzip":
		opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	case "none":
		opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.NoCompression))
	default:
		return nil, fmt.Errorf("%s: want gzip or none, got %q", k, v)
	}

	tlsCfg, err := otlpTLS(env)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		opts = append(opts, otlptracehttp.WithTLSClientConfig(tlsCfg))
	}
	return opts, nil
}

// parseHeaders adds the headers of v (key=value,... with percent-encoded
// values) to h.
func parseHeaders(v string, h map[string]string) error {
	for i, kv := range strings.Split(v, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return fmt.Errorf("entry %d: want key=value", i+1)
		}
		dk, err1 := url.PathUnescape(k)
		dv, err2 := url.PathUnescape(strings.TrimSpace(val))
		if err1 != nil || err2 != nil {
			return fmt.Errorf("entry %d: bad percent-encoding", i+1)
		}
		h[dk] = dv
	}
	return nil
}

// otlpTLS is the TLS configuration of the CERTIFICATE, CLIENT_CERTIFICATE
// and CLIENT_KEY variables (nil: the defaults).
func otlpTLS(env map[string]string) (*tls.Config, error) {
	ca, caVar := otlpEnv(env, "CERTIFICATE")
	cert, certVar := otlpEnv(env, "CLIENT_CERTIFICATE")
	key, keyVar := otlpEnv(env, "CLIENT_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", caVar, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate in %s", caVar, ca)
		}
	}
	if cert == "" && key != "" {
		return nil, fmt.Errorf("%s is set without OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", keyVar)
	}
	if key == "" && cert != "" {
		return nil, fmt.Errorf("%s is set without OTEL_EXPORTER_OTLP_CLIENT_KEY", certVar)
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", certVar, keyVar, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// batchOptions are the batch span processor's options from the OTEL_BSP_*
// variables of env.
func batchOptions(env map[string]string) ([]sdktrace.BatchSpanProcessorOption, error) {
	var opts []sdktrace.BatchSpanProcessorOption
	for _, o := range []struct {
		name string
		set  func(int) sdktrace.BatchSpanProcessorOption
	}{
		{"OTEL_BSP_SCHEDULE_DELAY", func(n int) sdktrace.BatchSpanProcessorOption {
			return sdktrace.WithBatchTimeout(time.Duration(n) * time.Millisecond)
		}},
		{"OTEL_BSP_EXPORT_TIMEOUT", func(n int) sdktrace.BatchSpanProcessorOption {
			return sdktrace.WithExportTimeout(time.Duration(n) * time.Millisecond)
		}},
		{"OTEL_BSP_MAX_QUEUE_SIZE", sdktrace.WithMaxQueueSize},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", sdktrace.WithMaxExportBatchSize},
	} {
		v := strings.TrimSpace(env[o.name])
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: want a positive integer, got %q", o.name, v)
		}
		opts = append(opts, o.set(n))
	}
	return opts, nil
}

// traceResource is the resource of the traces: service.name (see
// config.Telemetry), service.instance.id, OTEL_RESOURCE_ATTRIBUTES and the
// SDK's own attributes.
func traceResource(cfg config.Telemetry, env map[string]string, instance string) (*resource.Resource, error) {
	extra := map[string]string{}
	if v := env["OTEL_RESOURCE_ATTRIBUTES"]; v != "" {
		if err := parseHeaders(v, extra); err != nil {
			return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
		}
	}
	name := cfg.Service()
	if n := extra[string(semconv.ServiceNameKey)]; n != "" {
		name = n
	}
	if n := strings.TrimSpace(env["OTEL_SERVICE_NAME"]); n != "" {
		name = n
	}
	attrs := make([]attribute.KeyValue, 0, len(extra)+2)
	for k, v := range extra {
		if k != string(semconv.ServiceNameKey) {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	attrs = append(attrs, semconv.ServiceName(name))
	if instance != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(instance))
	}
	return resource.New(context.Background(),
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attrs...),
	)
}

// traceContext reads a bundle's caller trace context back for export.
var traceContext propagation.TraceContext
