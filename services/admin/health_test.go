package admin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"switchyard.dev/shared/health"
)

// TestProviderHealth: the prober's records in switchyard_health show in
// the provider status (provider and key, each with its reason).
func TestProviderHealth(t *testing.T) {
	e := startEnv(t, true)
	st := health.NewStore(e.proxy.Resources().Health)
	ctx := context.Background()
	if _, err := st.Put(ctx, health.Record{Provider: "openai", Status: health.Degraded, Reason: "slow check", CircuitState: health.CircuitClosed}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, health.Record{Provider: "openai", Key: "secondary", Status: health.Unhealthy, Reason: "3 checks failed", CircuitState: health.CircuitClosed}); err != nil {
		t.Fatal(err)
	}
	testkit.CheckFor(t, testTimeout, 10*time.Millisecond, func() error {
		r := e.do("GET", "/admin/providers/status", readToken, nil)
		p := r.body["providers"].([]any)[0].(map[string]any)
		keys := p["keys"].([]any)
		if p["health"] != "degraded" || p["health_reason"] != "slow check" ||
			keys[0].(map[string]any)["health"] != "unknown" || keys[1].(map[string]any)["health"] != "unhealthy" ||
			keys[1].(map[string]any)["health_reason"] != "3 checks failed" {
			return fmt.Errorf("status %s", r.raw)
		}
		return nil
	})
}
