package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/servicetest"
	"switchyard.dev/shared/testkit"
)

// TestHoldMetrics: the admin service exports its hold engine's table with
// the collector the proxy and the prober use (one label set: the breaker
// state by provider and model), and after the trips are gone the breaker
// of openai reads closed again.
func TestHoldMetrics(t *testing.T) {
	e := startEnv(t, true)
	servicetest.BreakerMetrics(t, e.pnc, e.base+"/metrics", "openai", "org/model-1.5")
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		text := string(e.do("GET", "/metrics", "", nil).raw)
		for _, want := range []string{
			`switchyard_circuit_breaker_state{model="",provider="openai"} 0`,
			`switchyard_admin_nats_up 1`,
			`switchyard_admin_http_requests_total{method="GET",route="/metrics",status="200"}`,
		} {
			if !strings.Contains(text, want) {
				return fmt.Errorf("no %s", want)
			}
		}
		for _, gone := range []string{`model="org/model-1.5"`, `switchyard_holds{`, `provider="openai/`} {
			if strings.Contains(text, gone) {
				return fmt.Errorf("%s still in the metrics", gone)
			}
		}
		return nil
	})
}

// TestMetricsAfterConcurrentRequests: label values never come from the
// server's reused request buffers (the method label read "POS", "GETETE"
// and the scrape turned to 500 once two series collided).
func TestMetricsAfterConcurrentRequests(t *testing.T) {
	e := startEnv(t, true)
	servicetest.MetricsAfterConcurrentRequests(t, e.base, http.Header{"Authorization": {"Bearer " + opToken}},
		[]string{"/admin/holds", "/admin/holds/openai.primary", "/admin/providers", "/admin/providers/openai",
			"/admin/classify", "/admin/nope", "/healthz", "/readyz", "/admin/openapi.json"})
}

// TestProviderStatusMetric: switchyard_provider_status follows the status
// pill: healthy, then offline once every key of the provider is held.
func TestProviderStatusMetric(t *testing.T) {
	e := startEnv(t, true)
	want := func(status string) {
		t.Helper()
		testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
			text := string(e.do("GET", "/metrics", "", nil).raw)
			for _, st := range providerStatuses {
				v := 0
				if st == status {
					v = 1
				}
				if line := fmt.Sprintf(`switchyard_provider_status{provider="openai",status="%s"} %d`, st, v); !strings.Contains(text, line) {
					return fmt.Errorf("no %s", line)
				}
			}
			return nil
		})
	}
	want(adminapi.StatusHealthy)
	e.fail("openai", "primary", "gpt-4o", credentialRejected, 401)
	e.fail("openai", "secondary", "gpt-4o", credentialRejected, 401)
	want(adminapi.StatusOffline)
}
