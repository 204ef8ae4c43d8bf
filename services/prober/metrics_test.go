package prober

import (
	"testing"

	"switchyard.dev/shared/servicetest"
	"switchyard.dev/tools/fakeprovider"
)

// TestHoldMetrics: the prober exports its hold engine's table with the
// series and labels of the proxy and the admin service (the breaker trips
// are of a provider this prober does not check, so no check releases them).
func TestHoldMetrics(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, oneProvider)
	r := f.startProber(t, cfg)
	servicetest.BreakerMetrics(t, f.nc, r.base+"/metrics", "elsewhere", "org/model-1.5")
}

// TestMetricsAfterConcurrentRequests: label values never come from the
// server's reused request buffers.
func TestMetricsAfterConcurrentRequests(t *testing.T) {
	f := newFixture(t, fakeprovider.Options{Name: "p1"})
	cfg := f.config(t, oneProvider)
	r := f.startProber(t, cfg)
	servicetest.MetricsAfterConcurrentRequests(t, r.base, nil, []string{"/healthz", "/readyz", "/status", "/nope", "/metrics"})
}

// oneProvider is a configuration of provider p1 with key k1 (K1).
const oneProvider = `
providers:
  - name: p1
    type: openai
    base_url: {{URL}}/v1
    keys: [{id: k1, secret: env:K1}]
    models: [{name: gpt-4o-mini}]
`
