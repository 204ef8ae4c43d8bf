package proxy

import (
	"bufio"
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/testkit"
)

const benchCompletion = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`

var benchStream = func() []byte {
	var b bytes.Buffer
	b.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	for range 5 {
		b.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"}}]}\n\n")
	}
	b.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	return b.Bytes()
}()

// startBenchUpstream serves fixed OpenAI answers with fasthttp on loopback,
// so the benchmark's allocations are the proxy's (and its client's).
func startBenchUpstream(b *testing.B) string { return startBenchUpstreamWith(b, false) }

// startBenchUpstreamWith is startBenchUpstream, stating OpenAI's
// x-ratelimit-* headers on every answer when rateHeaders is set.
func startBenchUpstreamWith(b *testing.B, rateHeaders bool) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(c *fasthttp.RequestCtx) {
		if rateHeaders {
			h := &c.Response.Header
			h.Set("x-ratelimit-limit-requests", "10000")
			h.Set("x-ratelimit-remaining-requests", "9999")
			h.Set("x-ratelimit-reset-requests", "6ms")
			h.Set("x-ratelimit-limit-tokens", "30000000")
			h.Set("x-ratelimit-remaining-tokens", "29999980")
			h.Set("x-ratelimit-reset-tokens", "0s")
		}
		if bytes.Contains(c.PostBody(), []byte(`"stream":true`)) {
			c.SetContentType("text/event-stream")
			c.SetBodyStreamWriter(func(w *bufio.Writer) {
				_, _ = w.Write(benchStream)
				_ = w.Flush()
			})
			return
		}
		c.SetContentType("application/json")
		c.SetBodyString(benchCompletion)
	}}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// BenchmarkProxyChat measures one chat completion through the proxy over
// loopback (caller -> proxy -> in-process upstream), sequentially: the
// proxy's latency and allocations per request, plus the client's and the
// upstream's share, which do not change between proxy versions.
func BenchmarkProxyChat(b *testing.B) {
	benchProxyChat(b, false)
}

// BenchmarkProxyChatMetering is BenchmarkProxyChat on a proxy with NATS,
// metering off (off) and on with the client on a plan with every limit
// set and the model priced (metered): what metering and plan limits add
// to a request (the usage records are published to a real embedded
// server, in the same process).
func BenchmarkProxyChatMetering(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchProxyChat(b, true) })
	b.Run("metered", func(b *testing.B) { benchProxyChat(b, true, true) })
}

// BenchmarkProxyChatDebug is BenchmarkProxyChat on a proxy with NATS and
// debug bundles off, then on for every request (sample_successes 1): what
// noting a request and building and publishing its bundle add (the
// embedded server stores them in the same process).
func BenchmarkProxyChatDebug(b *testing.B) {
	all := 1.0
	b.Run("off", func(b *testing.B) {
		benchProxyChatWith(b, true, func(c *config.Config) { c.Debug.Enabled = bptr(false) })
	})
	b.Run("all", func(b *testing.B) {
		benchProxyChatWith(b, true, func(c *config.Config) { c.Debug.Enabled, c.Debug.SampleSuccesses = bptr(true), &all })
	})
}

// BenchmarkProxyChatHeadroom is BenchmarkProxyChat against an upstream
// that states OpenAI's x-ratelimit-* headers on every answer, with
// headroom routing off, then on (the default): what reading the headers,
// charging and asking the windows add to a request.
func BenchmarkProxyChatHeadroom(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[on]
		b.Run(name, func(b *testing.B) {
			benchProxyChatOn(b, false, true, func(c *config.Config) { c.Routing.Headroom.Enabled = bptr(on) })
		})
	}
}

// BenchmarkProxyChatGuardrails is BenchmarkProxyChat with no guardrail,
// then with one on both stages that redacts five built-ins (nothing in
// the bench's request or answer matches): what checking a request and
// its answer (whole, or each delta through the window) adds.
func BenchmarkProxyChatGuardrails(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[on]
		b.Run(name, func(b *testing.B) {
			benchProxyChatWith(b, false, func(c *config.Config) {
				if on {
					c.Guardrails = []config.Guardrail{{Name: "pii", Stage: config.StageBoth, Action: config.ActionRedact,
						Patterns: []string{"card_number", "email", "phone", "iban", "jwt"}}}
					c.Clients[0].Guardrails = []string{"pii"}
				}
			})
		})
	}
}

// BenchmarkProxyChatCache is BenchmarkProxyChat with the client key's
// answers cached (NATS, the switchyard_cache bucket): after the first
// request every one is a hit from the proxy's memory (the stream one a
// replay of the cached answer as events), no upstream call; against
// BenchmarkProxyChat's, what a hit costs over a served request.
func BenchmarkProxyChatCache(b *testing.B) {
	benchProxyChatWith(b, true, func(c *config.Config) { c.Clients[0].Cache = config.CachePolicy{TTL: time.Hour} })
}

func benchProxyChat(b *testing.B, withNATS bool, metered ...bool) {
	benchProxyChatWith(b, withNATS, func(cfg *config.Config) {
		if len(metered) > 0 && metered[0] {
			cfg.Metering.Enabled = bptr(true)
			cfg.Plans = map[string]config.Plan{"bench": {RequestsPerMinute: 1e9, TokensPerMinute: 1e12, ConcurrentRequests: 1e6,
				Budget: config.Budget{Day: 1e9, Week: 1e9, Month: 1e9}}}
			cfg.Clients[0].Plan = "bench"
			cfg.Prices = []config.Price{{Provider: "up", Model: "bench-model", Input: fptr(2.5), Output: fptr(10)}}
		}
	})
}

func benchProxyChatWith(b *testing.B, withNATS bool, tweak func(*config.Config)) {
	benchProxyChatOn(b, withNATS, false, tweak)
}

func benchProxyChatOn(b *testing.B, withNATS, rateHeaders bool, tweak func(*config.Config)) {
	for _, bc := range []struct {
		name string
		body string
	}{
		{"nonstream", `{"model":"bench","messages":[{"role":"user","content":"hi"}]}`},
		{"stream", `{"model":"bench","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			up := startBenchUpstreamWith(b, rateHeaders)
			cfg := config.Defaults()
			cfg.Log.Level = "warn"
			cfg.Providers = []config.Provider{{
				Name: "up", Type: "openai", BaseURL: up + "/v1", Selection: "round_robin",
				Keys: []config.Key{
					{ID: "k1", Weight: 1, Value: config.NewSecret("sk-1")},
					{ID: "k2", Weight: 1, Value: config.NewSecret("sk-2")},
				},
				Models: []config.Model{{Name: "bench-model", Kind: "chat"}},
			}}
			cfg.Aliases = map[string]string{"bench": "up/bench-model"}
			cfg.Clients = []config.ClientKey{{ID: "bench", Models: []string{"*"}, Value: config.NewSecret(clientSecret)}}
			var deps Deps
			if withNATS {
				ns := startNATS(b, b.TempDir(), "127.0.0.1:0")
				b.Cleanup(func() { natsembed.Stop(ns) })
				deps.NATS, _ = testkit.ConnectNATS(b, ns.ClientURL())
				cfg.Metering.Enabled = bptr(false)
				cfg.Debug.Enabled = bptr(false)
			}
			tweak(cfg)
			do := benchChat(b, cfg, deps, bc.body)
			b.ReportAllocs()
			for b.Loop() {
				do()
			}
		})
	}
}

// benchChat serves cfg with deps on a fresh listener and returns a
// function that posts body to its chat completions and checks the answer
// is a 200 (a stream: read whole).
func benchChat(tb testing.TB, cfg *config.Config, deps Deps, body string) func() {
	tb.Helper()
	_, url := startService(tb, cfg, deps)
	addr := strings.TrimPrefix(url, "http://")
	client := &fasthttp.HostClient{Addr: addr, ReadTimeout: 10 * time.Second,
		Dial: func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }}
	tb.Cleanup(client.CloseIdleConnections)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI(url + "/v1/chat/completions")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	req.SetBodyString(body)
	return func() {
		if err := client.Do(req, resp); err != nil {
			tb.Fatal(err)
		}
		if resp.StatusCode() != 200 {
			tb.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
		}
	}
}
