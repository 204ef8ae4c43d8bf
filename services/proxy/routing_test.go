package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/routingdoc"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// TestApplyUnderLoad: a new routing configuration applied while requests
// flow changes where new requests go, and no request fails because of the
// switch: requests in flight (a slow stream among them, on a provider the
// new configuration removes) finish on the routing they started with.
func TestApplyUnderLoad(t *testing.T) {
	f := newFixture(t)
	// a slow stream on fake-anthropic, in flight across both switches
	f.anthropic.AddRule(fakeprovider.Rule{ChunkDelay: 100 * time.Millisecond, Chunks: 8, Times: 1})
	streamDone := make(chan []sseEvent, 1)
	go func() {
		_, events := f.stream(t, "/v1/chat/completions", `{"model":"fake-anthropic/demo-claude","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		streamDone <- events
	}()
	testkit.WaitFor(t, 5*time.Second, func() bool { return f.anthropic.PeakInFlight() == 1 })

	var ok, failed atomic.Int64
	var mu sync.Mutex
	var failures []string
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set("Authorization", "Bearer "+clientSecret)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				} else {
					failed.Add(1)
					mu.Lock()
					failures = append(failures, resp.Status)
					mu.Unlock()
				}
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	testkit.WaitFor(t, 5*time.Second, func() bool { return ok.Load() > 20 })

	// Version 2: the chain's first step off (it keeps its place), a new
	// key and a new alias.
	v2 := *f.cfg
	v2.Chains = map[string]config.Chain{"demo-chat": {Steps: []config.ChainStep{
		{Target: "fake-openai/demo-model", Active: bptr(false)}, {Target: "fake-anthropic/demo-claude"}}}}
	v2.Providers = append([]config.Provider(nil), f.cfg.Providers...)
	v2.Providers[0].Keys = append(append([]config.Key(nil), v2.Providers[0].Keys...),
		config.Key{ID: "a3", Priority: 1, Weight: 1, Value: config.NewSecret("key-a3")})
	v2.Aliases = map[string]string{"demo-embed": "fake-openai/demo-embed-model", "fast": "fake-openai/demo-model"}
	if err := f.svc.Apply(&v2, 2); err != nil {
		t.Fatal(err)
	}
	before := f.openai.CountCalls(func(c fakeprovider.Call) bool { return c.Model == "demo-model" })
	atAnthropic := f.anthropic.CountCalls(nil)
	testkit.WaitFor(t, 5*time.Second, func() bool { return f.anthropic.CountCalls(nil) > atAnthropic+20 })
	// requests that started before the switch may still reach fake-openai
	if n := f.openai.CountCalls(func(c fakeprovider.Call) bool { return c.Model == "demo-model" }) - before; n > 4 {
		t.Errorf("%d chain requests reached the switched-off step after the switch", n)
	}
	for range 6 {
		if status, _, body := f.call(t, "/v1/chat/completions", `{"model":"fast","messages":[{"role":"user","content":"hi"}]}`); status != http.StatusOK {
			t.Fatalf("the new alias: %d %s", status, body)
		}
	}
	if callsWith(f.openai, "key-a3") == 0 {
		t.Error("the new key was never used")
	}

	// Version 3: fake-anthropic removed (the chain is back on fake-openai);
	// the slow stream on it still finishes.
	v3 := *f.cfg
	v3.Providers = f.cfg.Providers[:1]
	v3.Chains = map[string]config.Chain{"demo-chat": {Steps: []config.ChainStep{{Target: "fake-openai/demo-model"}}}}
	if err := f.svc.Apply(&v3, 3); err != nil {
		t.Fatal(err)
	}
	status, _, body := f.call(t, "/v1/chat/completions", `{"model":"fake-anthropic/demo-claude","messages":[{"role":"user","content":"hi"}]}`)
	if status != http.StatusNotFound {
		t.Errorf("a removed provider's model: %d %s", status, body)
	}
	select {
	case events := <-streamDone:
		if len(events) == 0 || events[len(events)-1].data != "[DONE]" {
			t.Errorf("the stream in flight across the switches did not finish: %d events, last %+v", len(events), events[len(events)-1:])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream in flight never finished")
	}
	stop.Store(true)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d requests failed across the switches (%d served): %v", failed.Load(), ok.Load(), failures[:min(len(failures), 5)])
	}
	t.Logf("%d requests served across two switches, %d failed", ok.Load(), failed.Load())

	resp, err := http.Get(f.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ready struct {
		Version int `json:"routing_version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ready); err != nil || ready.Version != 3 {
		t.Errorf("/readyz routing_version %d (%v), want 3", ready.Version, err)
	}
}

// TestFleetFollowsRoutingVersions: a version of the routing configuration
// activated in NATS reaches every proxy of a fleet, which switch to it
// under load without failing a request; a version a proxy cannot load is
// reported and the one in use stays.
func TestFleetFollowsRoutingVersions(t *testing.T) {
	t.Setenv("SWITCHYARD_SECRET_FOLLOW_A1", "key-a1")
	t.Setenv("SWITCHYARD_SECRET_FOLLOW_B1", "key-b1")
	t.Setenv("SWITCHYARD_SECRET_FOLLOW_CLIENT", clientSecret)
	ff := newFleet(t, 3)
	nc, _ := testkit.ConnectNATS(t, ff.ns.ClientURL())
	kv, err := jetstreamKV(t, nc, bus.BucketConfig)
	if err != nil {
		t.Fatal(err)
	}
	store := routingdoc.New(nc, kv, nil)
	doc := func(firstActive bool) []byte {
		return []byte(fmt.Sprintf(`providers:
  - name: fake-openai
    type: openai
    base_url: %s/v1
    keys: [{id: a1, secret: env:SWITCHYARD_SECRET_FOLLOW_A1}]
    models: [{name: demo-model}]
  - name: fake-anthropic
    type: anthropic
    base_url: %s
    keys: [{id: b1, secret: env:SWITCHYARD_SECRET_FOLLOW_B1}]
    models: [{name: demo-claude, upstream: claude-upstream}]
chains:
  demo-chat:
    steps:
      - {target: fake-openai/demo-model, active: %v}
      - {target: fake-anthropic/demo-claude}
clients:
  - {id: team, secret: env:SWITCHYARD_SECRET_FOLLOW_CLIENT, models: ["*"]}
`, ff.openai.URL(), ff.anthropic.URL(), firstActive))
	}

	var ok, failed atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for !stop.Load() {
				if ff.call(t, w%3, chatBody) == http.StatusOK {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	testkit.WaitFor(t, 5*time.Second, func() bool { return ok.Load() > 20 })

	ctx := context.Background()
	v1, err := store.Activate(ctx, doc(true), routingdoc.Meta{By: "test", Comment: "first"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitVersion := func(v uint64) {
		t.Helper()
		for _, p := range ff.proxies {
			testkit.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
				if p.RoutingVersion() == int(v) {
					return nil
				}
				if f := p.versions.tracker.Failure(); f != nil {
					return fmt.Errorf("version %d not applied: %s", f.Version, f.Error)
				}
				return fmt.Errorf("routing version %d, want %d", p.RoutingVersion(), v)
			})
		}
	}
	waitVersion(v1.Version)
	v2, err := store.Activate(ctx, doc(false), routingdoc.Meta{By: "test", Comment: "step 1 off"}, v1.ActiveRevision)
	if err != nil {
		t.Fatal(err)
	}
	waitVersion(v2.Version)
	atOpenAI := ff.openai.CountCalls(nil)
	atAnthropic := ff.anthropic.CountCalls(nil)
	testkit.WaitFor(t, 5*time.Second, func() bool { return ff.anthropic.CountCalls(nil) > atAnthropic+30 })
	if n := ff.openai.CountCalls(nil) - atOpenAI; n > 6 {
		t.Errorf("%d calls to the switched-off step after every proxy applied the version", n)
	}

	// A version that loads nowhere (a secret no host has) is refused by
	// every proxy, which keep routing with version 2 and say so.
	bad := strings.Replace(string(doc(true)), "env:SWITCHYARD_SECRET_FOLLOW_A1", "env:FOLLOW_KEY_NOWHERE", 1)
	v3, err := store.Activate(ctx, []byte(bad), routingdoc.Meta{By: "test"}, v2.ActiveRevision)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ff.proxies {
		testkit.WaitFor(t, 5*time.Second, func() bool {
			f := p.versions.tracker.Failure()
			return f != nil && f.Version == v3.Version && strings.Contains(f.Error, "FOLLOW_KEY_NOWHERE")
		})
		if p.RoutingVersion() != int(v2.Version) {
			t.Errorf("a proxy switched to the version it could not load")
		}
	}
	stop.Store(true)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d requests failed across the activations (%d served)", failed.Load(), ok.Load())
	}
	t.Logf("%d requests served across 3 activations on 3 proxies, %d failed", ok.Load(), failed.Load())
}

func jetstreamKV(t *testing.T, nc *nats.Conn, bucket string) (jetstream.KeyValue, error) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return js.KeyValue(context.Background(), bucket)
}
