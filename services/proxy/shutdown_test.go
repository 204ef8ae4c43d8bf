package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// serveUntil runs svc on a loopback listener until the returned cancel is
// called; wait gives Serve's result once it returns.
func serveUntil(t *testing.T, svc *Service) (url string, cancel context.CancelFunc, wait func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var serr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		serr = svc.Serve(ctx, ln)
	}()
	wait = func() error {
		<-done
		return serr
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
	url = "http://" + ln.Addr().String()
	testkit.WaitFor(t, 5*time.Second, func() bool {
		r, err := http.Get(url + "/healthz")
		if err == nil {
			r.Body.Close()
		}
		return err == nil
	})
	return url, cancel, wait
}

// On SIGTERM with proxy.shutdown_delay, the proxy keeps accepting for that
// long: /readyz answers 503 draining (load balancers see it and stop
// sending) and requests are still served. Before, the listener closed at
// once: the draining answer could never be seen, and new connections were
// refused while load balancers still sent them.
func TestShutdownDelayKeepsServing(t *testing.T) {
	oa, an := startFakes(t)
	cfg := baseConfig(oa, an)
	cfg.Proxy.ShutdownDelay = 2 * time.Second
	svc, err := New(cfg, Deps{Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	url, cancel, wait := serveUntil(t, svc)
	cancel()
	testkit.WaitFor(t, 5*time.Second, svc.life.draining.Load)
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	r, err := cl.Get(url + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz while draining: %v", err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "draining") {
		t.Fatalf("GET /readyz while draining: %d %s", r.StatusCode, body)
	}
	f := &fixture{url: url, svc: svc}
	if st, _, b := f.call(t, "/v1/chat/completions", `{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`); st != http.StatusOK {
		t.Fatalf("a request during the shutdown delay: %d %s", st, b)
	}
	if err := wait(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// A stream still relayed at the end of proxy.shutdown_timeout is cut, and
// recorded (its usage record reaches SWITCHYARD_USAGE) before the engine
// stops; Serve returns no error, so the process exits 0. Before, Serve
// returned "context deadline exceeded" while the stream still ran, and the
// hold engine, metering and bundles stopped under it.
func TestShutdownCutsStreamsAndRecordsThem(t *testing.T) {
	oa, an := startFakes(t)
	cfg := baseConfig(oa, an)
	cfg.Proxy.ShutdownTimeout = 200 * time.Millisecond
	ns := startNATS(t, t.TempDir(), "127.0.0.1:0")
	t.Cleanup(func() { natsembed.Stop(ns) })
	nc, js := testkit.ConnectNATS(t, ns.ClientURL())
	svc, err := New(cfg, Deps{Log: testLogger(t), NATS: nc})
	if err != nil {
		t.Fatal(err)
	}
	url, cancel, wait := serveUntil(t, svc)
	an.AddRule(fakeprovider.Rule{Chunks: 100000, ChunkDelay: time.Millisecond, Times: 1})
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(`{"model":"fake-anthropic/demo-claude","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi there"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	go func() { _, _ = io.Copy(io.Discard, resp.Body) }() // the caller reads on
	cancel()
	if err := wait(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if n := svc.life.inFlight.Load(); n != 0 {
		t.Fatalf("%d requests in flight after Serve returned", n)
	}
	ctx, cancelInfo := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelInfo()
	st, err := js.Stream(ctx, "SWITCHYARD_USAGE")
	if err != nil {
		t.Fatal(err)
	}
	// Published before Serve returned; stored by the server a moment later
	// on a loaded machine.
	var info *jetstream.StreamInfo
	testkit.WaitFor(t, 5*time.Second, func() bool {
		info, err = st.Info(ctx)
		return err == nil && info.State.Msgs >= 1
	})
	if info.State.Msgs != 1 {
		t.Fatalf("usage records of the stream cut at shutdown: %d, want 1", info.State.Msgs)
	}
}
