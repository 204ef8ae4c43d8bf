package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/services/prober"
	"switchyard.dev/services/proxy"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// TestKeylessProviderHasOneHold: a vLLM-type provider (no keys) refuses
// every call with a 401. The proxy (on a caller's request) and the prober
// (on its active check) both see it fail: the fleet records one hold, the
// provider's, not one per service. Once the provider answers again the
// prober's check of the due hold releases that same hold.
func TestKeylessProviderHasOneHold(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsembed.Stop(ns) })
	fake, err := fakeprovider.Start(fakeprovider.Options{Name: "local"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	refuse := fake.AddRule(fakeprovider.Rule{Error: "openai.invalid_api_key"})

	zero := 0.0
	cfg := config.Defaults()
	cfg.Prober.CheckInterval = 100 * time.Millisecond
	cfg.Prober.RecheckInterval = 100 * time.Millisecond
	cfg.Prober.SettleInterval = 100 * time.Millisecond
	cfg.Resilience.Jitter = &zero
	cfg.Resilience.Ladder.CredentialRejected = config.Ladder{Base: time.Second, Ceiling: time.Second}
	cfg.Providers = []config.Provider{{
		Name: "local", Type: "vllm", BaseURL: fake.URL() + "/v1",
		Models: []config.Model{{Name: "llama", Kind: "chat"}},
	}}

	p, err := prober.New(cfg, prober.Deps{NATS: connect(t, ns)})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, p.Serve)
	px, err := proxy.New(cfg, proxy.Deps{NATS: connect(t, ns)})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, px.Serve)

	js, err := jetstream.New(connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	res, err := bus.Setup(context.Background(), js, bus.SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holds := func() (map[string]hold.Record, error) {
		out := map[string]hold.Record{}
		lister, err := res.Holds.ListKeys(context.Background())
		if err != nil {
			return nil, err
		}
		for k := range lister.Keys() {
			e, err := res.Holds.Get(context.Background(), k)
			if err != nil {
				continue
			}
			var rec hold.Record
			if err := json.Unmarshal(e.Value(), &rec); err != nil {
				return nil, err
			}
			out[k] = rec
		}
		return out, nil
	}
	providerHold := hold.Scope{Kind: hold.ScopeProvider, Provider: "local"}.ID()

	// The caller's request fails on the provider's refusal (and holds it).
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("a refused call was served: %s", body)
	}
	// Both services report the refusal; the prober's checks keep failing.
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if fake.CountCalls(func(c fakeprovider.Call) bool { return strings.HasSuffix(c.Path, "/models") }) == 0 {
			return fmt.Errorf("the prober has not checked the provider yet")
		}
		hs, err := holds()
		if err != nil {
			return err
		}
		if _, ok := hs[providerHold]; !ok || len(hs) != 1 {
			return fmt.Errorf("holds %v, want exactly %s", keys(hs), providerHold)
		}
		return nil
	})

	// The provider comes back: the prober's check of the due hold
	// releases that one hold; no other hold appeared meanwhile.
	fake.RemoveRule(refuse)
	testkit.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		hs, err := holds()
		if err != nil {
			return err
		}
		if len(hs) > 1 {
			return fmt.Errorf("holds %v, want only %s", keys(hs), providerHold)
		}
		if rec, ok := hs[providerHold]; ok && rec.State != hold.StateReleased {
			return fmt.Errorf("%s is %s", providerHold, rec.State)
		}
		return nil
	})
	resp, err = http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
}

func keys(m map[string]hold.Record) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
