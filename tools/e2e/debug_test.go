package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"switchyard.dev/services/admin"
	"switchyard.dev/services/proxy"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/debug"
	"switchyard.dev/shared/hold"
	"switchyard.dev/shared/natsembed/natstest"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

const debugYAML = `
nats:
  url: NATS_URL
  storage: memory
debug:
  sample_successes: 0
admin:
  tokens:
    - {id: viewer, secret: env:SY_VIEWER, role: read}
clients:
  - {id: team, secret: env:SY_CLIENT, models: ["*"]}
retry:
  same_target_attempts: 2
  backoff_base: 1ms
  backoff_max: 5ms
` + fakePairYAML

// fakePairYAML declares the fake providers startFakePair starts and a
// chain over them, for the gateway YAMLs of these tests.
const fakePairYAML = `
providers:
  - name: fake-openai
    type: openai
    base_url: OA_URL/v1
    keys:
      - {id: k1, secret: env:SY_K1, priority: 1}
      - {id: k2, secret: env:SY_K2}
    models:
      - {name: demo-model}
  - name: fake-anthropic
    type: anthropic
    base_url: AN_URL
    keys:
      - {id: k3, secret: env:SY_K3}
    models:
      - {name: demo-claude, upstream: claude-upstream}
chains:
  demo-chat:
    steps:
      - target: fake-openai/demo-model
      - target: fake-anthropic/demo-claude
`

// startFakePair starts the fake OpenAI and Anthropic providers the
// gateway YAMLs of these tests name (OA_URL, AN_URL).
func startFakePair(t *testing.T) (oa, an *fakeprovider.Server) {
	t.Helper()
	for _, f := range []struct {
		name string
		srv  **fakeprovider.Server
	}{{"fake-openai", &oa}, {"fake-anthropic", &an}} {
		s, err := fakeprovider.Start(fakeprovider.Options{Name: f.name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		*f.srv = s
	}
	return oa, an
}

// loadGateway loads a gateway YAML naming NATS_URL, OA_URL and AN_URL,
// with the keys' and the client's secrets (SY_K1..SY_K3, SY_CLIENT) and
// env in its environment.
func loadGateway(t *testing.T, yaml, natsURL string, oa, an *fakeprovider.Server, env ...string) *config.Config {
	t.Helper()
	y := strings.NewReplacer("NATS_URL", natsURL, "OA_URL", oa.URL(), "AN_URL", an.URL()).Replace(yaml)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, append([]string{"SY_K1=sk-e2e-k1", "SY_K2=sk-e2e-k2", "SY_K3=sk-e2e-k3", "SY_CLIENT=sk-e2e-client"}, env...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestDebugBundleAcrossTheFleet: two proxies and two admin services on one
// NATS server. A request through proxy A rotates keys (k1 refused) and
// fails over the chain (k2 failing twice); admin Y, which has nothing to do
// with proxy A, shows its bundle with every attempt in order, their
// classes and actions, and lists it among the retried ones; an unknown id
// is 404.
func TestDebugBundleAcrossTheFleet(t *testing.T) {
	ns := natstest.Start(t, "127.0.0.1:0", "")
	oa, an := startFakePair(t)
	oa.AddRule(fakeprovider.Rule{Key: "sk-e2e-k1", Error: "openai.invalid_api_key"})
	oa.AddRule(fakeprovider.Rule{Key: "sk-e2e-k2", Error: "openai.server_error"})
	cfg := loadGateway(t, debugYAML, ns.ClientURL(), oa, an, "SY_VIEWER=e2e-viewer-token")
	quiet := slog.New(slog.DiscardHandler)
	var proxies, admins []string
	for range 2 {
		px, err := proxy.New(cfg, proxy.Deps{Log: quiet, NATS: connect(t, ns)})
		if err != nil {
			t.Fatal(err)
		}
		proxies = append(proxies, serve(t, px.Serve))
		ad, err := admin.New(cfg, admin.Deps{Log: quiet, NATS: connect(t, ns)})
		if err != nil {
			t.Fatal(err)
		}
		admins = append(admins, serve(t, ad.Serve))
	}
	get := func(url string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer e2e-viewer-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, a := range admins {
		testkit.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
			if st, b := get(a + "/readyz"); st != 200 {
				return fmt.Errorf("admin readyz %d %s", st, b)
			}
			return nil
		})
	}

	req, _ := http.NewRequest(http.MethodPost, proxies[0]+"/v1/chat/completions",
		strings.NewReader(`{"model":"demo-chat","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer sk-e2e-client")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	id := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("status %d, request id %q", resp.StatusCode, id)
	}

	var b debug.Bundle
	testkit.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		st, body := get(admins[1] + "/admin/requests/" + id)
		if st != 200 {
			return fmt.Errorf("admin Y: %d %s", st, body)
		}
		return json.Unmarshal(body, &b)
	})
	var got []string
	for _, a := range b.Attempts {
		got = append(got, fmt.Sprintf("%s/%s %s %s", a.Provider, a.KeyID, a.Class, a.Action))
	}
	want := []string{
		"fake-openai/k1 credential_rejected rotate",
		"fake-openai/k2 transient retry_same",
		"fake-openai/k2 transient rotate",
		"fake-anthropic/k3  served",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("attempts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if b.RequestID != id || b.Sampled != "retried" || b.Status != 200 || b.Route == nil || b.Route.Name != "chain:demo-chat" {
		t.Errorf("bundle %+v", b)
	}

	st, body := get(admins[0] + "/admin/requests?outcome=ok&limit=10")
	if st != 200 || !strings.Contains(string(body), id) {
		t.Errorf("list on admin X: %d %s", st, body)
	}
	if st, _ := get(admins[1] + "/admin/requests/req_never_sent"); st != 404 {
		t.Errorf("unknown id: %d", st)
	}

	// The README's nats CLI lines find it too.
	cli := testkit.NatsCLI(t)
	ctx := context.Background()
	out, err := testkit.NatsCLICommand(ctx, t, cli, ns.ClientURL(), "stream", "get", debug.Stream, "--last-for",
		"switchyard.debug.*.*."+hold.EncodeToken(id), "--json").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"data"`) {
		t.Fatalf("nats stream get --last-for: %v\n%s", err, out)
	}
	var raw struct{ Data []byte }
	if err := json.Unmarshal(out, &raw); err != nil || !strings.Contains(string(raw.Data), `"request_id":"`+id+`"`) {
		t.Fatalf("nats stream get answered %s (%v)", out, err)
	}
	out, err = testkit.NatsCLICommand(ctx, t, cli, ns.ClientURL(), "stream", "subjects", debug.Stream, "switchyard.debug.ok.>").CombinedOutput()
	if err != nil || !strings.Contains(string(out), hold.EncodeToken(id)) {
		t.Fatalf("nats stream subjects: %v\n%s", err, out)
	}
}
