package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/testkit"
)

// listedModels answers GET /v1/models of proxy i as a list of ids.
func (ff *fleetFixture) listedModels(t *testing.T, i int) []string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, ff.urls[i]+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestModelsHideOfflineProvider: a health record saying a provider is
// unhealthy (as the prober writes it) reaches the proxy through its KV
// watcher; GET /v1/models then leaves out the models only that provider
// serves, and lists everything again when every provider is offline or
// the provider recovers. Requests still reach the offline provider's
// models: health makes them less preferred, it does not hold them.
func TestModelsHideOfflineProvider(t *testing.T) {
	ff := newFleet(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ff.proxies[0].runHealth(ctx) }()
	defer func() { cancel(); <-done }()

	_, js := testkit.ConnectNATS(t, ff.ns.ClientURL())
	res, err := bus.Setup(context.Background(), js, bus.SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := health.NewStore(res.Health)
	put := func(provider string, status health.Status) {
		t.Helper()
		if _, err := st.Put(ctx, health.Record{Provider: provider, Status: status, CircuitState: health.CircuitClosed, CheckedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	all := ff.listedModels(t, 0)
	if !slices.Contains(all, "fake-anthropic/demo-claude") || !slices.Contains(all, "demo-claude") {
		t.Fatalf("inventory %v", all)
	}
	waitList := func(want func([]string) error) {
		t.Helper()
		healthCheckFor(t, 5*time.Second, 10*time.Millisecond, func() error { return want(ff.listedModels(t, 0)) })
	}

	put("fake-anthropic", health.Unhealthy)
	waitList(func(ids []string) error {
		for _, hiddenID := range []string{"fake-anthropic/demo-claude", "demo-claude"} {
			if slices.Contains(ids, hiddenID) {
				return fmt.Errorf("%s still listed: %v", hiddenID, ids)
			}
		}
		if !slices.Contains(ids, "fake-openai/demo-model") || !slices.Contains(ids, "chain:demo-chat") {
			return fmt.Errorf("healthy provider's models missing: %v", ids)
		}
		return nil
	})
	// Less preferred, not held: a request naming the model still gets it.
	if code := ff.call(t, 0, `{"model":"fake-anthropic/demo-claude","messages":[{"role":"user","content":"hi"}]}`); code != http.StatusOK {
		t.Fatalf("request to the offline provider's model: %d", code)
	}

	put("fake-openai", health.Unhealthy)
	waitList(func(ids []string) error {
		if len(ids) != len(all) {
			return fmt.Errorf("every provider offline: want the whole inventory, got %v", ids)
		}
		return nil
	})

	put("fake-openai", health.Healthy)
	put("fake-anthropic", health.Healthy)
	waitList(func(ids []string) error {
		if len(ids) != len(all) {
			return fmt.Errorf("recovered: want the whole inventory, got %v", ids)
		}
		return nil
	})
}

func healthCheckFor(t *testing.T, total, poll time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(poll)
	}
	t.Fatalf("condition not met after %s: %v", total, err)
}
