package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"switchyard.dev/shared/bus"
	"switchyard.dev/shared/config"
	"switchyard.dev/shared/natsembed"
	"switchyard.dev/shared/servicetest"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/shared/usage"
	"switchyard.dev/tools/fakeprovider"
)

// meterFixture is the proxy fixture on a real NATS server, with prices for
// the fake models.
type meterFixture struct {
	*fixture
	ns *server.Server
	js jetstream.JetStream
}

func fptr(v float64) *float64 { return &v }

func newMeterFixture(t *testing.T, tweak ...func(*config.Config)) *meterFixture {
	t.Helper()
	oa, an := startFakes(t)
	f := &fixture{openai: oa, anthropic: an, cfg: baseConfig(oa, an)}
	f.cfg.Prices = []config.Price{
		{Provider: "fake-openai", Model: "demo-model", Input: fptr(1), Output: fptr(4)},
		{ProviderType: "anthropic", Model: "claude-upstream", Input: fptr(3), Output: fptr(15)},
	}
	f.cfg.Clients[0].Plan = "pro"
	f.cfg.Plans = map[string]config.Plan{"pro": {}}
	for _, fn := range tweak {
		fn(f.cfg)
	}
	mf := &meterFixture{fixture: f}
	mf.ns = startNATS(t, t.TempDir(), "127.0.0.1:0")
	t.Cleanup(func() { natsembed.Stop(mf.ns) })
	nc, js := testkit.ConnectNATS(t, mf.ns.ClientURL())
	mf.js = js
	f.svc, f.url = startService(t, f.cfg, Deps{Log: testLogger(t), NATS: nc})
	select {
	case <-f.svc.member.Bound():
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy never bound the fleet's buckets")
	}
	return mf
}

// records waits until the usage stream holds n records and returns them.
func (mf *meterFixture) records(t *testing.T, n int) []usage.Record {
	t.Helper()
	return readUsage(t, mf.js, n)
}

func readUsage(t *testing.T, js jetstream.JetStream, n int) []usage.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, bus.StreamUsage, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// A message holds the records of a batch that share a subject, one
	// JSON record per line.
	var out []usage.Record
	for len(out) < n {
		msg, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("read usage record %d of %d: %v", len(out)+1, n, err)
		}
		for line := range bytes.Lines(msg.Data()) {
			var rec usage.Record
			if err := json.Unmarshal(line, &rec); err != nil {
				t.Fatalf("usage record %s: %v", line, err)
			}
			if want := usage.Subject(rec.Provider, rec.ClientID); msg.Subject() != want {
				t.Errorf("record on %s, want %s", msg.Subject(), want)
			}
			out = append(out, rec)
		}
	}
	if len(out) != n {
		t.Fatalf("%d usage records, want %d", len(out), n)
	}
	// a batch groups its records by subject: back in the order the
	// requests ended
	slices.SortFunc(out, func(a, b usage.Record) int { return a.At.Compare(b.At) })
	return out
}

func costOf(rec usage.Record) string {
	if rec.CostUSD == nil {
		return "null"
	}
	return fmt.Sprintf("%.9f", *rec.CostUSD)
}

// TestUsageRecords: every request that reaches routing gives one usage
// record on SWITCHYARD_USAGE with who called, what served it, the tokens
// the provider reported and their cost; a caller's request refused before
// routing gives one with its status and no provider, an unknown caller's
// none.
func TestUsageRecords(t *testing.T) {
	mf := newMeterFixture(t)
	ua := "OpenAI/Python 1.54.4"

	// 1. non-stream chat, priced
	status, _, body := mf.call(t, "/v1/chat/completions", directBody, "User-Agent", ua)
	if status != 200 {
		t.Fatalf("chat: %d %s", status, body)
	}
	var resp struct {
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	// 2. refused before routing: a record with the status, no provider;
	// a caller that is not one (401) none
	if status, _, _ := mf.call(t, "/v1/chat/completions", `{"model":"nope","messages":[]}`); status != 404 {
		t.Fatalf("unknown model: %d", status)
	}
	if status, _, _ := mf.call(t, "/v1/chat/completions", `{"model":`); status != 400 {
		t.Fatalf("malformed body: %d", status)
	}
	if status, _, _ := mf.call(t, "/v1/chat/completions", directBody, "Authorization", "Bearer not-a-client-key"); status != 401 {
		t.Fatalf("unknown caller: %d", status)
	}
	// 3. a stream to Anthropic through /v1/messages
	mf.call(t, "/v1/messages", `{"model":"fake-anthropic/demo-claude","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi there"}]}`,
		"User-Agent", "claude-cli/1.0.83 (external, cli)")
	// 4. embeddings, not priced
	if status, _, b := mf.call(t, "/v1/embeddings", `{"model":"demo-embed","input":["a b c","d e"]}`); status != 200 {
		t.Fatalf("embeddings: %d %s", status, b)
	}
	// 5. every key refuses: a failed request
	mf.openai.AddRule(fakeprovider.Rule{Error: "openai.invalid_api_key", Times: 2})
	if status, _, _ := mf.call(t, "/v1/chat/completions", directBody); status < 400 {
		t.Fatalf("failing request: %d", status)
	}

	recs := mf.records(t, 6)
	chat, notFound, malformed, msgs, embed, failed := recs[0], recs[1], recs[2], recs[3], recs[4], recs[5]
	for _, rf := range []struct {
		rec    usage.Record
		status int
		model  string
	}{{notFound, 404, "nope"}, {malformed, 400, ""}} {
		if r := rf.rec; r.Status != rf.status || r.Class != "rejected" || r.Provider != "" || r.Attempts != 0 || r.ClientID != "team" ||
			r.ModelRequested != rf.model || r.Endpoint != "/v1/chat/completions" || costOf(r) != "0.000000000" || r.Tokens != (usage.Tokens{}) {
			t.Errorf("refused request's record %+v (cost %s), want status %d, class rejected, no provider, cost 0", r, costOf(r), rf.status)
		}
	}
	if chat.V != usage.SchemaVersion || chat.RequestID == "" || chat.ClientID != "team" || chat.Plan != "pro" ||
		chat.ClientType != usage.ClientOpenAISDKPython || chat.Endpoint != "/v1/chat/completions" ||
		chat.ModelRequested != "fake-openai/demo-model" || chat.Provider != "fake-openai" || chat.ProviderType != "openai" ||
		chat.Model != "demo-model" || chat.KeyID == "" || chat.Attempts != 1 || chat.Status != 200 || chat.Class != "" ||
		chat.Stream || chat.TokensEstimated || chat.LatencyMS <= 0 {
		t.Errorf("chat record %+v", chat)
	}
	if chat.Tokens.TotalInput() != resp.Usage.PromptTokens || chat.Tokens.TotalOutput() != resp.Usage.CompletionTokens || chat.Tokens.Output == 0 {
		t.Errorf("chat tokens %+v, the provider said %+v", chat.Tokens, resp.Usage)
	}
	wantCost := (float64(chat.Tokens.Input)*1 + float64(chat.Tokens.Output)*4) / 1e6
	if chat.CostUSD == nil || math.Abs(*chat.CostUSD-wantCost) > 1e-12 {
		t.Errorf("chat cost %s, want %.9f", costOf(chat), wantCost)
	}

	if msgs.Endpoint != "/v1/messages" || msgs.Provider != "fake-anthropic" || msgs.ProviderType != "anthropic" ||
		msgs.Model != "claude-upstream" || !msgs.Stream || !msgs.StreamCompleted || msgs.TTFTMS <= 0 ||
		msgs.ClientType != usage.ClientClaudeCode || msgs.TokensEstimated || msgs.Tokens.Input == 0 || msgs.Tokens.Output == 0 {
		t.Errorf("messages stream record %+v", msgs)
	}
	if want := (float64(msgs.Tokens.Input)*3 + float64(msgs.Tokens.Output)*15) / 1e6; msgs.CostUSD == nil || math.Abs(*msgs.CostUSD-want) > 1e-12 {
		t.Errorf("messages cost %s, want %.9f (provider type price)", costOf(msgs), want)
	}

	if failed.Status < 400 || failed.Class != "credential_rejected" || failed.Attempts != 2 || failed.Provider != "fake-openai" ||
		failed.CostUSD != nil || failed.Tokens != (usage.Tokens{}) {
		t.Errorf("failed record %+v", failed)
	}
	// Every attempt failed: both are listed, by their keys.
	if fa := failed.FailedAttempts; len(fa) != 2 || fa[0].KeyID == fa[1].KeyID ||
		fa[0] != (usage.FailedAttempt{Provider: "fake-openai", Model: "demo-model", KeyID: fa[0].KeyID, Class: "credential_rejected"}) ||
		fa[1] != (usage.FailedAttempt{Provider: "fake-openai", Model: "demo-model", KeyID: fa[1].KeyID, Class: "credential_rejected"}) {
		t.Errorf("failed record's failed attempts %+v", fa)
	}
	if chat.FailedAttempts != nil || msgs.FailedAttempts != nil {
		t.Errorf("failed attempts of served requests: %+v, %+v", chat.FailedAttempts, msgs.FailedAttempts)
	}
	if embed.Endpoint != "/v1/embeddings" || embed.Model != "demo-embed-model" || embed.Tokens.Input == 0 || embed.CostUSD != nil {
		t.Errorf("embeddings record %+v (no price: cost null)", embed)
	}

	// Prometheus: tokens and cost by provider, model and client. The
	// published count follows the stream's acknowledgements, which can
	// come after a consumer already read the records.
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		m, err := servicetest.Scrape(mf.url + "/metrics")
		if err != nil {
			return err
		}
		for _, want := range []string{
			fmt.Sprintf(`switchyard_tokens_total{client="team",kind="output",model="demo-model",provider="fake-openai"} %d`, chat.Tokens.Output),
			`switchyard_cost_usd_total{client="team",model="demo-model",provider="fake-openai"}`,
			`switchyard_unpriced_requests_total{model="demo-embed-model",provider="fake-openai"} 1`,
			`switchyard_usage_records_total{outcome="published"} 6`,
		} {
			if !strings.Contains(m, want) {
				return fmt.Errorf("/metrics lacks %s", want)
			}
		}
		return nil
	})
}

// TestStreamUsage: the proxy asks an OpenAI-format upstream for a stream's
// usage; a caller that did not ask does not get the usage chunk, one that
// asked does; the record has the provider's counts either way. A provider
// that refuses stream_options (Mistral) gets none.
func TestStreamUsage(t *testing.T) {
	mf := newMeterFixture(t, func(c *config.Config) {
		m := c.Providers[0]
		m.Name, m.Type = "fake-mistral", "mistral"
		c.Providers = append(c.Providers, m)
	})
	usageChunks := func(body string) int {
		_, events := mf.stream(t, "/v1/chat/completions", body)
		n := 0
		for _, ev := range events {
			if strings.Contains(ev.data, `"usage":{`) {
				n++
			}
		}
		return n
	}
	if n := usageChunks(`{"model":"fake-openai/demo-model","stream":true,"messages":[{"role":"user","content":"hello"}]}`); n != 0 {
		t.Errorf("a caller that did not ask got %d usage chunks", n)
	}
	if n := usageChunks(`{"model":"fake-openai/demo-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`); n != 1 {
		t.Errorf("a caller that asked got %d usage chunks, want 1", n)
	}
	usageChunks(`{"model":"fake-mistral/demo-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`)

	calls := mf.openai.Calls()
	if len(calls) != 3 {
		t.Fatalf("%d upstream calls", len(calls))
	}
	for i, want := range []string{`"stream_options":{"include_usage":true}`, `"stream_options":{"include_usage":true}`, ""} {
		got := string(calls[i].Body)
		if want != "" && !strings.Contains(got, want) || want == "" && strings.Contains(got, "stream_options") {
			t.Errorf("upstream body %d: %s (want stream_options %q)", i, got, want)
		}
	}
	recs := mf.records(t, 3)
	for i, rec := range recs[:2] {
		if rec.TokensEstimated || rec.Tokens.Input == 0 || rec.Tokens.Output == 0 || !rec.StreamCompleted || rec.CostUSD == nil {
			t.Errorf("stream record %d: %+v", i, rec)
		}
	}
	// the fake (an OpenAI flavour) sends no usage unasked: estimated
	if rec := recs[2]; !rec.TokensEstimated || rec.Tokens.Output == 0 || rec.Provider != "fake-mistral" {
		t.Errorf("mistral record %+v, want estimated tokens", rec)
	}
}

// TestUsageSurvivesANATSOutage: records of requests served while NATS is
// down wait in the proxy and reach the stream once it is back, once each.
func TestUsageSurvivesANATSOutage(t *testing.T) {
	dir, addr := t.TempDir(), testkit.FreeAddr(t)
	ns := startNATS(t, dir, addr)
	oa, an := startFakes(t)
	cfg := baseConfig(oa, an)
	nc, _ := testkit.ConnectNATS(t, ns.ClientURL())
	svc, url := startService(t, cfg, Deps{Log: testLogger(t), NATS: nc})
	<-svc.member.Bound()
	f := &fixture{openai: oa, anthropic: an, cfg: cfg, url: url, svc: svc}
	f.call(t, "/v1/chat/completions", directBody)
	natsembed.Stop(ns)
	testkit.WaitFor(t, 5*time.Second, func() bool { return !nc.IsConnected() })
	for range 5 {
		if status, _, b := f.call(t, "/v1/chat/completions", directBody); status != 200 {
			t.Fatalf("while NATS is down: %d %s", status, b)
		}
	}
	ns = startNATS(t, dir, addr)
	t.Cleanup(func() { natsembed.Stop(ns) })
	_, js := testkit.ConnectNATS(t, ns.ClientURL())
	recs := readUsage(t, js, 6)
	seen := map[string]bool{}
	for _, r := range recs {
		if seen[r.RequestID] {
			t.Errorf("record %s stored twice", r.RequestID)
		}
		seen[r.RequestID] = true
	}
}

// TestUsageBufferBound: with NATS unreachable, records beyond
// metering.buffer are dropped and counted; requests are served.
func TestUsageBufferBound(t *testing.T) {
	oa, an := startFakes(t)
	cfg := baseConfig(oa, an)
	cfg.Metering.Buffer = 2
	cfg.Proxy.StartupWait = 0
	nc, err := nats.Connect("nats://"+testkit.FreeAddr(t), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, url := startService(t, cfg, Deps{Log: testLogger(t), NATS: nc})
	f := &fixture{openai: oa, anthropic: an, cfg: cfg, url: url, svc: svc}
	for range 5 {
		if status, _, b := f.call(t, "/v1/chat/completions", directBody); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
	}
	m, err := servicetest.Scrape(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`switchyard_usage_records_total{outcome="dropped"} 3`, `switchyard_usage_records_pending 2`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		for _, l := range strings.Split(m, "\n") {
			if strings.Contains(l, "usage_records") {
				t.Log(l)
			}
		}
	}
}

// TestUsageOfRepeatedRequestIDs: requests that carry the same
// X-Request-Id (a caller reusing its own) are each metered: the stream's
// duplicate detection keys on ids the publisher makes, never on a
// caller's.
func TestUsageOfRepeatedRequestIDs(t *testing.T) {
	mf := newMeterFixture(t)
	published := func() float64 { return mf.svc.meter.pub.Published() }
	for i := range 3 {
		if status, _, b := mf.call(t, "/v1/chat/completions", directBody, "X-Request-Id", "my-fixed-id"); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
		// each record in a message of its own
		testkit.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
			if n := published(); n != float64(i+1) {
				return fmt.Errorf("%v records published", n)
			}
			return nil
		})
	}
	st, err := mf.js.Stream(context.Background(), bus.StreamUsage)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 3 {
		t.Fatalf("3 requests metered, %d messages stored", info.State.Msgs)
	}
	for _, rec := range mf.records(t, 3) {
		if rec.RequestID != "my-fixed-id" {
			t.Errorf("record of request %q", rec.RequestID)
		}
	}
}

// TestUsageOfStreamsCutEarly: a stream cut after 60 of its 100 content
// events bills what it relayed, estimated, whether its format reports
// usage only at the end (OpenAI) or an opening count at the start too
// (Anthropic's message_start says 1 output token).
func TestUsageOfStreamsCutEarly(t *testing.T) {
	mf := newMeterFixture(t)
	mf.anthropic.AddRule(fakeprovider.Rule{Chunks: 100, CutAfter: 60, Times: 1})
	mf.openai.AddRule(fakeprovider.Rule{Chunks: 100, CutAfter: 60, Times: 1})
	mf.stream(t, "/v1/messages", `{"model":"fake-anthropic/demo-claude","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi there"}]}`)
	mf.stream(t, "/v1/chat/completions", `{"model":"fake-openai/demo-model","stream":true,"messages":[{"role":"user","content":"hi there"}]}`)
	for _, rec := range mf.records(t, 2) {
		if rec.StreamCompleted || !rec.TokensEstimated || rec.Tokens.Output < 60 || rec.Tokens.Input == 0 {
			t.Errorf("%s via %s, cut after 60 content events: completed %v, estimated %v, tokens %+v",
				rec.Endpoint, rec.Provider, rec.StreamCompleted, rec.TokensEstimated, rec.Tokens)
		}
	}
}

// TestUsageAfterStreamFailover: a stream attempt that fails in its opening
// events (after Anthropic's message_start reported usage) bills nothing to
// the attempt that then serves: a provider reporting no stream usage is
// estimated, not given the failed attempt's counts.
func TestUsageAfterStreamFailover(t *testing.T) {
	mf := newMeterFixture(t, func(c *config.Config) {
		m := c.Providers[0]
		m.Name, m.Type = "fake-mistral", "mistral"
		c.Providers = append(c.Providers, m)
		c.Chains["anthropic-then-mistral"] = config.Chain{Steps: []config.ChainStep{{Target: "fake-anthropic/demo-claude"}, {Target: "fake-mistral/demo-model"}}}
		c.Prices = append(c.Prices, config.Price{Provider: "fake-mistral", Model: "demo-model", Input: fptr(1), Output: fptr(4)})
	})
	mf.anthropic.AddRule(fakeprovider.Rule{ErrorInStream: true, Error: "anthropic.overloaded", Times: 4})
	mf.openai.AddRule(fakeprovider.Rule{Chunks: 50})
	mf.stream(t, "/v1/chat/completions", `{"model":"chain:anthropic-then-mistral","stream":true,"messages":[{"role":"user","content":"hello hello hello hello hello hello hello hello"}]}`)
	rec := mf.records(t, 1)[0]
	if rec.Provider != "fake-mistral" || rec.Attempts < 2 {
		t.Fatalf("served by %s after %d attempts, want fake-mistral after the failover", rec.Provider, rec.Attempts)
	}
	// The attempts the failover hid are in the record, by their target.
	if len(rec.FailedAttempts) != rec.Attempts-1 {
		t.Errorf("%d failed attempts listed of %d attempts: %+v", len(rec.FailedAttempts), rec.Attempts, rec.FailedAttempts)
	}
	for _, a := range rec.FailedAttempts {
		if a.Provider != "fake-anthropic" || a.Model != "claude-upstream" || a.KeyID == "" || a.Class != "transient" || a.Cancelled {
			t.Errorf("failed attempt %+v, want a transient failure of fake-anthropic's claude-upstream", a)
		}
	}
	if !rec.TokensEstimated || rec.Tokens.Output < 50 {
		t.Errorf("tokens %+v (estimated %v), want mistral's 50 events estimated", rec.Tokens, rec.TokensEstimated)
	}
}

// TestUsageOfStreamLeftByCaller: a caller that reads 40 content events of
// an Anthropic stream and hangs up is billed what was relayed (estimated),
// not the opening count, and its record says it left.
func TestUsageOfStreamLeftByCaller(t *testing.T) {
	mf := newMeterFixture(t)
	mf.anthropic.AddRule(fakeprovider.Rule{Chunks: 200, ChunkDelay: 5 * time.Millisecond, Times: 1})
	req, _ := http.NewRequest(http.MethodPost, mf.url+"/v1/messages", strings.NewReader(`{"model":"fake-anthropic/demo-claude","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi there"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for n := 0; n < 40; {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(l, "event: content_block_delta") {
			n++
		}
	}
	_ = resp.Body.Close()
	rec := mf.records(t, 1)[0]
	if !rec.Cancelled || rec.Class != classCallerGone || rec.StreamCompleted || !rec.TokensEstimated || rec.Tokens.Output < 40 {
		t.Fatalf("a stream left after 40 content events: cancelled %v, class %q, completed %v, estimated %v, tokens %+v",
			rec.Cancelled, rec.Class, rec.StreamCompleted, rec.TokensEstimated, rec.Tokens)
	}
}

// TestUsageOfFreeCalls: a token count (the providers do not bill it) books
// no tokens and costs nothing, against the plan's limits too.
func TestUsageOfFreeCalls(t *testing.T) {
	mf := newMeterFixture(t, func(c *config.Config) {
		c.Plans = map[string]config.Plan{"pro": {Budget: config.Budget{Day: 100}, TokensPerMinute: 100000}}
	})
	long := strings.Repeat("a", 40000)
	if status, _, b := mf.call(t, "/v1/messages/count_tokens", `{"model":"fake-anthropic/demo-claude","messages":[{"role":"user","content":"`+long+`"}]}`); status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	rec := mf.records(t, 1)[0]
	if rec.Tokens != (usage.Tokens{}) || rec.TokensEstimated || (rec.CostUSD != nil && *rec.CostUSD != 0) {
		t.Fatalf("a token count booked tokens %+v (estimated %v), cost %s", rec.Tokens, rec.TokensEstimated, costOf(rec))
	}
	if u := mf.svc.limits.lim.Snapshot("team"); u.Tokens != 0 || u.Day.SpendUSD != 0 {
		t.Fatalf("the plan counted %v tokens and $%v for a token count", u.Tokens, u.Day.SpendUSD)
	}
}

// TestUsageOfPassthroughBodies: a passthrough body of a binary type (an
// upload) is not counted as input tokens; any other is, by its size (JSON,
// or JSON sent as a form, as curl -d does).
func TestUsageOfPassthroughBodies(t *testing.T) {
	mf := newMeterFixture(t)
	upload := strings.Repeat("x", 40000)
	for _, ct := range []string{"application/octet-stream", "application/x-www-form-urlencoded"} {
		if st, _, body := ptCall(t, mf.fixture, "GET", "/fake-openai/models", upload, "Content-Type", ct); st != 200 {
			t.Fatalf("%s: %d %s", ct, st, body)
		}
	}
	recs := mf.records(t, 2)
	if in := recs[0].Tokens.Input; in != 0 {
		t.Errorf("an octet-stream body of 40,000 bytes counted as %d input tokens", in)
	}
	if in := recs[1].Tokens.Input; in != 10000 {
		t.Errorf("a form body of 40,000 bytes counted as %d input tokens, want 10,000 (its size / 4)", in)
	}
	for _, rec := range recs {
		if rec.Tokens.Output == 0 || !rec.TokensEstimated {
			t.Errorf("the JSON model list answered: output %d (estimated %v), want its size / 4", rec.Tokens.Output, rec.TokensEstimated)
		}
	}
}

func TestBinaryType(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/octet-stream": true, "audio/mpeg": true, "Image/PNG": true, "multipart/form-data; boundary=x": true,
		"application/pdf": true, "application/json": false, "application/json; charset=utf-8": false,
		"text/event-stream; charset=utf-8": false, "application/x-www-form-urlencoded": false, "application/x-ndjson": false, "": false,
	} {
		if got := binaryType([]byte(ct)); got != want {
			t.Errorf("binaryType(%q) = %v", ct, got)
		}
	}
}
