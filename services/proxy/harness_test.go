package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/servicetest"
	"switchyard.dev/tools/fakeprovider"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// net/http keeps idle connections' goroutines until the pools close.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		// fasthttp's worker pool cleaner sleeps out its idle period after
		// Shutdown before it notices the stop (fasthttp).
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		// The upstream client's pool cleaners (fasthttp) sleep out
		// their idle period after the pools close, then exit.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		// fasthttp's process-wide Date header clock.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}

// fixture is a proxy in front of two fake providers: fake-openai (OpenAI
// format, keys a1 and a2) and fake-anthropic (Anthropic format, keys b1
// and b2), with chain demo-chat over both.
type fixture struct {
	openai    *fakeprovider.Server
	anthropic *fakeprovider.Server
	cfg       *config.Config
	url       string
	svc       *Service
}

const clientSecret = "sk-client-secret-123"

func bptr(b bool) *bool { return &b }

func startFakes(t testing.TB) (*fakeprovider.Server, *fakeprovider.Server) {
	t.Helper()
	oa, err := fakeprovider.Start(fakeprovider.Options{Name: "fake-openai"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { oa.Close() })
	an, err := fakeprovider.Start(fakeprovider.Options{Name: "fake-anthropic"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { an.Close() })
	return oa, an
}

func baseConfig(oa, an *fakeprovider.Server) *config.Config {
	cfg := config.Defaults()
	cfg.Retry.BackoffBase = time.Millisecond
	cfg.Retry.BackoffMax = 5 * time.Millisecond
	cfg.Providers = []config.Provider{
		{
			Name: "fake-openai", Type: "openai", BaseURL: oa.URL() + "/v1", Selection: "round_robin",
			Keys: []config.Key{
				{ID: "a1", Priority: 1, Weight: 1, Value: config.NewSecret("key-a1")},
				{ID: "a2", Priority: 1, Weight: 1, Value: config.NewSecret("key-a2")},
			},
			Models: []config.Model{{Name: "demo-model", Kind: "chat"}, {Name: "demo-embed-model", Kind: "embedding"}},
		},
		{
			Name: "fake-anthropic", Type: "anthropic", BaseURL: an.URL(), Selection: "round_robin",
			Keys: []config.Key{
				{ID: "b1", Weight: 1, Value: config.NewSecret("key-b1")},
				{ID: "b2", Weight: 1, Value: config.NewSecret("key-b2")},
			},
			Models: []config.Model{{Name: "demo-claude", Upstream: "claude-upstream", Kind: "chat"}},
		},
	}
	cfg.Chains = map[string]config.Chain{
		"demo-chat": {Steps: []config.ChainStep{{Target: "fake-openai/demo-model"}, {Target: "fake-anthropic/demo-claude"}}},
	}
	cfg.Aliases = map[string]string{"demo-embed": "fake-openai/demo-embed-model"}
	cfg.Clients = []config.ClientKey{{ID: "team", Models: []string{"*"}, Value: config.NewSecret(clientSecret)}}
	return cfg
}

func newFixture(t *testing.T, tweak ...func(*config.Config)) *fixture {
	t.Helper()
	oa, an := startFakes(t)
	f := &fixture{openai: oa, anthropic: an, cfg: baseConfig(oa, an)}
	for _, fn := range tweak {
		fn(f.cfg)
	}
	f.svc, f.url = startService(t, f.cfg, Deps{Log: testLogger(t)})
	return f
}

// startService serves a proxy on a real loopback listener until the test
// ends.
func startService(t testing.TB, cfg *config.Config, deps Deps) (*Service, string) {
	t.Helper()
	svc, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return svc, "http://" + servicetest.Serve(t, svc.Serve)
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// call posts a JSON body with the client key and returns status, headers
// and body.
func (f *fixture) call(t *testing.T, path, body string, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// sseEvent is one event as a client received it, with its arrival time.
type sseEvent struct {
	name string
	data string
	at   time.Time
}

// stream posts a streaming request and reads its events as they arrive.
func (f *fixture) stream(t *testing.T, path, body string) (*http.Response, []sseEvent) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []sseEvent
	br := bufio.NewReader(resp.Body)
	var cur sseEvent
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "event:"):
			cur.name = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			cur.data = strings.TrimSpace(line[5:])
			cur.at = time.Now()
		case line == "" && (cur.data != "" || cur.name != ""):
			events = append(events, cur)
			cur = sseEvent{}
		}
		if err != nil {
			break
		}
	}
	return resp, events
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, b)
	}
	return m
}

// errorCode returns error.code of an OpenAI- or Anthropic-style error body.
func errorCode(t *testing.T, b []byte) string {
	t.Helper()
	m := decode(t, b)
	e, _ := m["error"].(map[string]any)
	if e == nil {
		t.Fatalf("no error object in %s", b)
	}
	code, _ := e["code"].(string)
	return code
}

func callsWith(s *fakeprovider.Server, key string) int {
	return s.CountCalls(func(c fakeprovider.Call) bool { return c.Key == key })
}

var _ = bytes.Contains

func jsonDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// oneProviderFixture is a proxy in front of one upstream of type typ at
// base (a test's own server), with one key (secret) and one chat model "m",
// changed by tweak.
func oneProviderFixture(t *testing.T, typ, base, secret string, tweak ...func(*config.Provider)) *fixture {
	t.Helper()
	cfg := config.Defaults()
	cfg.Providers = []config.Provider{{
		Name: "up", Type: typ, BaseURL: base, Selection: "round_robin",
		Keys:   []config.Key{{ID: "k1", Weight: 1, Value: config.NewSecret(secret)}},
		Models: []config.Model{{Name: "m", Kind: "chat"}},
	}}
	for _, fn := range tweak {
		fn(&cfg.Providers[0])
	}
	cfg.Clients = []config.ClientKey{{ID: "team", Models: []string{"*"}, Value: config.NewSecret(clientSecret)}}
	f := &fixture{cfg: cfg}
	f.svc, f.url = startService(t, cfg, Deps{Log: testLogger(t)})
	return f
}
