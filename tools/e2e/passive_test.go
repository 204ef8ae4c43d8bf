package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"switchyard.dev/services/prober"
	"switchyard.dev/services/proxy"
	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/health"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/tools/fakeprovider"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// net/http keeps idle connections' goroutines until the pools close.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		// fasthttp (under fiber and the proxy's upstream client):
		// its Date header clock runs for the process, and its pool
		// cleaners notice a stop only after their current sleep.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		// The commands buildBinary built for this test binary go, then
		// the process exits (a Cleanup replaces goleak's own os.Exit).
		goleak.Cleanup(func(code int) {
			removeBinaries()
			os.Exit(code)
		}),
	)
}

func connect(t *testing.T, ns *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// serveProxies serves n proxies of cfg, each on its own NATS connection
// to ns and a loopback listener, quiet, until the test ends; it returns
// their base URLs.
func serveProxies(t *testing.T, cfg *config.Config, ns *server.Server, n int) []string {
	t.Helper()
	var urls []string
	for range n {
		px, err := proxy.New(cfg, proxy.Deps{Log: slog.New(slog.DiscardHandler), NATS: connect(t, ns)})
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, serve(t, px.Serve))
	}
	return urls
}

// serve runs a service on a loopback listener until the test ends.
func serve(t *testing.T, run func(context.Context, net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// hasMetric reports an error unless the service at url exposes a sample
// of series (name and labels as Prometheus prints them).
func hasMetric(url, series string) error {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "\n"+series+" ") {
		return fmt.Errorf("%s: no %s yet", url, series)
	}
	return nil
}

// TestPassiveCountsReachHealthRecords: a proxy and two prober replicas
// share one embedded NATS server in front of a fake provider whose key a1
// answers every completion with a 500 while a2 serves. After traffic
// through the proxy, the provider's health record in switchyard_health
// counts the attempts the proxy reported: a2's successes and a1's
// failures, each once although two replicas receive every report.
func TestPassiveCountsReachHealthRecords(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsembed.Stop(ns) })
	fake, err := fakeprovider.Start(fakeprovider.Options{Name: "fake-openai"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	fake.AddRule(fakeprovider.Rule{Key: "key-a1", Path: "/chat/completions", Error: "openai.server_error"})

	cfg := config.Defaults()
	cfg.Proxy.PassiveReportInterval = 50 * time.Millisecond
	cfg.Prober.LeaseTTL = time.Second // the record is refreshed every third of it
	cfg.Prober.CheckTimeout = 900 * time.Millisecond
	cfg.Retry.BackoffBase, cfg.Retry.BackoffMax = time.Millisecond, 5*time.Millisecond
	cfg.Providers = []config.Provider{{
		Name: "fake-openai", Type: "openai", BaseURL: fake.URL() + "/v1", Selection: "round_robin",
		Keys: []config.Key{
			{ID: "a1", Weight: 1, Value: config.NewSecret("key-a1")},
			{ID: "a2", Weight: 1, Value: config.NewSecret("key-a2")},
		},
		Models: []config.Model{{Name: "demo-model", Kind: "chat"}},
	}}

	var proberURLs []string
	for range 2 {
		p, err := prober.New(cfg, prober.Deps{NATS: connect(t, ns)})
		if err != nil {
			t.Fatal(err)
		}
		proberURLs = append(proberURLs, serve(t, p.Serve))
	}
	px, err := proxy.New(cfg, proxy.Deps{NATS: connect(t, ns)})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, px.Serve)

	// Both replicas receive reports: a report about a provider they do
	// not know shows in their metrics, and counts nowhere.
	nc := connect(t, ns)
	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if err := nc.Publish(health.PassiveSubject("unknown"), []byte(`{"v":1,"provider":"unknown","keys":{"k":{"success":1}}}`)); err != nil {
			return err
		}
		for _, u := range proberURLs {
			if err := hasMetric(u, `switchyard_prober_passive_reports_total{outcome="unknown_provider"}`); err != nil {
				return err
			}
		}
		return nil
	})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := bus.Setup(context.Background(), js, bus.SetupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := health.NewStore(res.Health)

	const requests = 10
	for i := range requests {
		resp, err := http.Post(url+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
		}
	}
	a1Failed := uint64(fake.CountCalls(func(c fakeprovider.Call) bool {
		return c.Key == "key-a1" && strings.HasSuffix(c.Path, "/chat/completions")
	}))
	if a1Failed == 0 {
		t.Fatal("key a1 was never tried")
	}
	http.DefaultClient.CloseIdleConnections()

	testkit.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		rec, err := store.Get(context.Background(), health.ID("fake-openai", ""))
		if err != nil {
			return err
		}
		a1, a2 := rec.PassiveByKey["a1"], rec.PassiveByKey["a2"]
		if rec.PassiveSuccess != requests || rec.PassiveFailure != a1Failed ||
			a1 != (health.PassiveCounts{Failure: a1Failed}) || a2.Success != requests || a2.Failure != 0 {
			return fmt.Errorf("passive_success %d passive_failure %d by key %v; want %d successes (a2), %d failures (a1)",
				rec.PassiveSuccess, rec.PassiveFailure, rec.PassiveByKey, requests, a1Failed)
		}
		// the successes' latency: summed by key, averaged in the record
		if a2.LatencyMSSum <= 0 || rec.PassiveLatencyMS <= 0 {
			return fmt.Errorf("latency: a2 sum %v, passive_latency_ms %v; want both > 0", a2.LatencyMSSum, rec.PassiveLatencyMS)
		}
		return nil
	})
}
