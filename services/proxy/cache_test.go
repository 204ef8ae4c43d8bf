package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// cached turns the cache on for demo-chat (an hour) and adds a second
// client key.
func cached(c *config.Config) {
	ch := c.Chains["demo-chat"]
	ch.Cache = config.CachePolicy{TTL: time.Hour}
	c.Chains["demo-chat"] = ch
	c.Clients = append(c.Clients, config.ClientKey{ID: "other", Models: []string{"*"}, Value: config.NewSecret(otherSecret)})
}

const otherSecret = "sk-client-other-456"

// ask posts body to url's chat completions with the client key secret
// and headers: the status, the cache header, the age header and the body.
func ask(t *testing.T, url, secret, body string, headers ...string) (int, string, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(headerCache), resp.Header.Get(headerCacheAge), b
}

const cacheQ = `{"model":"demo-chat","messages":[{"role":"user","content":"what is 2+2?"}],"temperature":1}`

// TestCacheHit: the same question, however its JSON is written (key
// order, white space, 1 or 1.0, stream false, the caller's user), is
// answered once upstream and then from the cache, with the answer's age;
// its usage record says hit and what it saved, and costs nothing.
func TestCacheHit(t *testing.T) {
	mf := newMeterFixture(t, cached)
	st, res, _, first := ask(t, mf.url, clientSecret, cacheQ)
	if st != 200 || res != cacheMiss {
		t.Fatalf("first: %d %q %s", st, res, first)
	}
	for _, q := range []string{
		cacheQ,
		`{ "temperature" : 1.0, "messages":[{"content":"what is 2+2?","role":"user"}], "model":"demo-chat", "stream": false, "user": "u-42" }`,
		`{"model":"fake-anthropic/demo-claude","messages":[{"role":"user","content":"what is 2+2?"}],"temperature":1e0}`, // another route, without a policy
	} {
		st, res, age, body := ask(t, mf.url, clientSecret, q)
		want := cacheHit
		if strings.Contains(q, "demo-claude") {
			want = ""
		}
		if st != 200 || res != want {
			t.Errorf("%s: %d %q", q, st, res)
		}
		if want == cacheHit && (!bytes.Equal(body, first) || age == "") {
			t.Errorf("%s: a hit answered %s (age %q), the first answer was %s", q, body, age, first)
		}
	}
	if n := len(callsTo(mf.openai, "/chat/completions")); n != 1 {
		t.Errorf("%d upstream calls for one question asked three times", n)
	}
	recs := mf.records(t, 4)
	if recs[0].Cache != cacheMiss || recs[1].Cache != cacheHit || recs[2].Cache != cacheHit || recs[3].Cache != "" {
		t.Fatalf("usage records' cache: %q %q %q %q", recs[0].Cache, recs[1].Cache, recs[2].Cache, recs[3].Cache)
	}
	hit := recs[1]
	if hit.CacheSavedUSD == nil || recs[0].CostUSD == nil || *hit.CacheSavedUSD != *recs[0].CostUSD || *recs[0].CostUSD == 0 ||
		hit.CostUSD == nil || *hit.CostUSD != 0 || hit.Tokens.Input != 0 || hit.Provider != "fake-openai" || hit.Status != 200 {
		t.Errorf("the hit's record %+v (saved %v), the miss's cost %v", hit, hit.CacheSavedUSD, recs[0].CostUSD)
	}
	m := scrape(t, mf.url)
	for _, want := range []string{`switchyard_cache_requests_total{result="hit"} 2`, `switchyard_cache_requests_total{result="miss"} 1`,
		`switchyard_cache_stores_total{result="stored"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "cache"))
		}
	}
}

// TestCacheScopes: an entry serves the client key that stored it, never
// another (unless the route shares it); the caller's no-store bypasses
// the cache, no-cache asks upstream again (and stores the answer); a
// stream of a cached question is told from the entry, one of a new
// question relayed (and kept).
func TestCacheScopes(t *testing.T) {
	mf := newMeterFixture(t, cached)
	ask(t, mf.url, clientSecret, cacheQ)
	if _, res, _, _ := ask(t, mf.url, otherSecret, cacheQ); res != cacheMiss {
		t.Errorf("another client key: %q, want a miss", res)
	}
	if _, res, _, _ := ask(t, mf.url, clientSecret, cacheQ, "Cache-Control", "no-store"); res != cacheBypass {
		t.Errorf("no-store: %q", res)
	}
	if _, res, _, _ := ask(t, mf.url, clientSecret, cacheQ, "Cache-Control", "no-cache"); res != cacheMiss {
		t.Errorf("no-cache: %q", res)
	}
	resp, _ := mf.stream(t, "/v1/chat/completions", strings.Replace(cacheQ, `"temperature":1`, `"temperature":1,"stream":true`, 1))
	if resp.Header.Get(headerCache) != cacheHit {
		t.Errorf("a stream of a cached question: %q", resp.Header.Get(headerCache))
	}
	resp, _ = mf.stream(t, "/v1/chat/completions", strings.Replace(cacheQ, `"temperature":1`, `"temperature":0,"stream":true`, 1))
	if resp.Header.Get(headerCache) != cacheMiss {
		t.Errorf("a stream of a new question: %q", resp.Header.Get(headerCache))
	}
	if n := len(callsTo(mf.openai, "/chat/completions")); n != 5 {
		t.Errorf("%d upstream calls, want 5 (the first, the other key's, no-store, no-cache, the new stream)", n)
	}

	shared := newMeterFixture(t, cached, func(c *config.Config) {
		ch := c.Chains["demo-chat"]
		ch.Cache.Shared = true
		c.Chains["demo-chat"] = ch
	})
	ask(t, shared.url, clientSecret, cacheQ)
	if _, res, _, _ := ask(t, shared.url, otherSecret, cacheQ); res != cacheHit {
		t.Errorf("a shared route, another key: %q, want a hit", res)
	}
}

// TestCacheTTLAndSize: an entry stored with the caller's shorter TTL
// (X-Switchyard-Cache-Ttl) expires in the memory and in the bucket; an
// answer over cache.max_entry_bytes is served and not stored.
func TestCacheTTLAndSize(t *testing.T) {
	mf := newMeterFixture(t, cached)
	if _, res, _, _ := ask(t, mf.url, clientSecret, cacheQ, headerCacheTTL, "1"); res != cacheMiss {
		t.Fatalf("first: %q", res)
	}
	stored := time.Now()
	if _, res, _, _ := ask(t, mf.url, clientSecret, cacheQ); res != cacheHit {
		t.Fatalf("within its TTL: %q", res)
	}
	// the entry expires (other proxies' memories forget it as the bucket
	// reports the expiry): the next question asks upstream again
	other := strings.Replace(cacheQ, "2+2", "3+3", 1)
	ask(t, mf.url, clientSecret, other, headerCacheTTL, "1")
	testkit.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		kve, err := mf.js.KeyValue(t.Context(), "switchyard_cache")
		if err != nil {
			return err
		}
		keys, _ := kve.ListKeys(t.Context())
		n := 0
		for range keys.Keys() {
			n++
		}
		if n != 0 {
			return fmt.Errorf("%d entries in the bucket", n)
		}
		return nil
	})
	if _, res, _, _ := ask(t, mf.url, clientSecret, cacheQ); res != cacheMiss || time.Since(stored) < time.Second {
		t.Errorf("after its TTL (%s): %q", time.Since(stored), res)
	}

	small := newMeterFixture(t, cached, func(c *config.Config) { c.Cache.MaxEntryBytes = 64 })
	ask(t, small.url, clientSecret, cacheQ)
	if _, res, _, _ := ask(t, small.url, clientSecret, cacheQ); res != cacheMiss {
		t.Errorf("an answer over max_entry_bytes was kept: %q", res)
	}
	if m := scrape(t, small.url); !strings.Contains(m, `switchyard_cache_stores_total{result="too_large"} 2`) {
		t.Errorf("metrics:\n%s", grepLines(m, "cache"))
	}
}

// TestCacheWithoutNATS: with no NATS the cache is bypassed and every
// request served; what the proxy answered it keeps in its own memory
// (a stream too: a kept stream is found there before the bucket is asked).
func TestCacheWithoutNATS(t *testing.T) {
	f := newFixture(t, cached)
	if st, res, _, _ := ask(t, f.url, clientSecret, cacheQ); st != 200 || res != cacheBypass {
		t.Fatalf("%d %q", st, res)
	}
	if st, res, _, _ := ask(t, f.url, clientSecret, cacheQ); st != 200 || res != cacheHit {
		t.Errorf("the proxy's own memory: %d %q", st, res)
	}
	// a stream kept in the proxy's memory is answered from it, without
	// the bucket (which would have said bypass)
	q := `{"model":"demo-chat","stream":true,"messages":[{"role":"user","content":"kept in memory"}]}`
	if res, _ := streamAsk(t, f.url, q); res != cacheBypass {
		t.Fatalf("a new stream: %q", res)
	}
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error { // kept as the relay ends
		if res, body := streamAsk(t, f.url, q); res != cacheHit || !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
			return fmt.Errorf("the kept stream asked again: %q", res)
		}
		return nil
	})
}

// TestCacheFleet: an answer one proxy stored serves the others; 50
// identical new questions at once through 3 proxies go upstream at most
// once per proxy (the others wait for it), and every caller gets the
// answer; 50 identical streams too (the others follow its stream).
func TestCacheFleet(t *testing.T) {
	ff := newFleet(t, 3, cached)
	ask(t, ff.urls[0], clientSecret, cacheQ)
	for i := 1; i < 3; i++ {
		if _, res, _, _ := ask(t, ff.urls[i], clientSecret, cacheQ); res != cacheHit {
			t.Errorf("proxy %d: %q, want the entry proxy 0 stored", i, res)
		}
	}

	// burst sends 50 identical requests at once through the 3 proxies
	// (one: its cache header, and what is wrong with its answer, "" none):
	// 1 to 3 go upstream, 47 or more are hits.
	burst := func(what string, one func(url string) (res, wrong string)) {
		t.Helper()
		before := len(callsTo(ff.openai, "/chat/completions"))
		var wg sync.WaitGroup
		var mu sync.Mutex
		results := map[string]int{}
		for i := range 50 {
			wg.Go(func() {
				res, wrong := one(ff.urls[i%3])
				mu.Lock()
				defer mu.Unlock()
				if wrong != "" {
					t.Error(wrong)
				}
				results[res]++
			})
		}
		wg.Wait()
		if n := len(callsTo(ff.openai, "/chat/completions")) - before; n < 1 || n > 3 {
			t.Errorf("%d upstream calls for 50 identical %s through 3 proxies, want 1 to 3", n, what)
		}
		if results[cacheHit] < 47 {
			t.Errorf("%s: results %v", what, results)
		}
	}
	q := strings.Replace(cacheQ, "2+2", "5+5", 1)
	ff.openai.AddRule(fakeprovider.Rule{Path: "/chat/completions", FirstByteLatency: 300 * time.Millisecond})
	burst("questions", func(url string) (string, string) {
		st, res, _, body := ask(t, url, clientSecret, q)
		if st != 200 || !bytes.Contains(body, []byte(`"choices"`)) {
			return res, fmt.Sprintf("%d %s", st, body)
		}
		return res, ""
	})

	// Streams too: each proxy's first relays, the others follow it.
	sq := strings.Replace(strings.Replace(q, "5+5", "7+7", 1), `"temperature":1`, `"temperature":1,"stream":true`, 1)
	burst("streams", func(url string) (string, string) {
		res, body := streamAsk(t, url, sq)
		if !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
			return res, fmt.Sprintf("a stream: %s", body)
		}
		return res, ""
	})
}

// TestCacheReplayedToSDKs: a cached answer asked again as a stream is
// told as the endpoint's events, and the official SDKs read from them
// what the answer said: chat completions (openai-go, with the usage
// chunk), Anthropic messages (anthropic-sdk-go's accumulator), the
// Responses API (openai-go), legacy completions; nothing goes upstream.
func TestCacheReplayedToSDKs(t *testing.T) {
	f := newFixture(t, func(c *config.Config) { c.Clients[0].Cache = config.CachePolicy{TTL: time.Hour} })
	ctx := t.Context()
	oc, ac := openAIClient(f), anthropicClient(f)

	chat := openai.ChatCompletionNewParams{Model: "demo-chat", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("replay me")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	whole, err := oc.Chat.Completions.New(ctx, chat)
	if err != nil {
		t.Fatal(err)
	}
	calls := len(f.openai.Calls()) + len(f.anthropic.Calls())
	st := oc.Chat.Completions.NewStreaming(ctx, chat)
	var text strings.Builder
	var usage int64
	for st.Next() {
		ch := st.Current()
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
		}
		usage += ch.Usage.TotalTokens
	}
	if err := st.Err(); err != nil || text.String() != whole.Choices[0].Message.Content || usage != whole.Usage.TotalTokens {
		t.Errorf("chat replay: %v, %q (usage %d), want %q (%d)", err, text.String(), usage, whole.Choices[0].Message.Content, whole.Usage.TotalTokens)
	}

	msg := anthropic.MessageNewParams{Model: "demo-claude", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("replay me"))}}
	m, err := ac.Messages.New(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	calls++
	ms := ac.Messages.NewStreaming(ctx, msg)
	var acc anthropic.Message
	for ms.Next() {
		if err := acc.Accumulate(ms.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := ms.Err(); err != nil || len(acc.Content) != 1 || acc.Content[0].Text != m.Content[0].Text ||
		acc.StopReason != m.StopReason || acc.Usage.OutputTokens != m.Usage.OutputTokens || acc.ID != m.ID {
		t.Errorf("messages replay: %v, %+v, want %+v", err, acc, m)
	}

	rp := responses.ResponseNewParams{Model: "demo-chat", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("replay me")}}
	r, err := oc.Responses.New(ctx, rp)
	if err != nil {
		t.Fatal(err)
	}
	calls++
	rs := oc.Responses.NewStreaming(ctx, rp)
	var deltas strings.Builder
	var completed responses.Response
	for rs.Next() {
		ev := rs.Current()
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed":
			completed = ev.Response
		}
	}
	if err := rs.Err(); err != nil || deltas.String() != r.OutputText() || completed.ID != r.ID || completed.OutputText() != r.OutputText() {
		t.Errorf("responses replay: %v, %q / %q, want %q", err, deltas.String(), completed.OutputText(), r.OutputText())
	}

	cp := openai.CompletionNewParams{Model: "fake-openai/demo-model", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("replay me")}}
	cmp, err := oc.Completions.New(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	calls++
	cs := oc.Completions.NewStreaming(ctx, cp)
	text.Reset()
	for cs.Next() {
		for _, c := range cs.Current().Choices {
			text.WriteString(c.Text)
		}
	}
	if err := cs.Err(); err != nil || text.String() != cmp.Choices[0].Text {
		t.Errorf("completions replay: %v, %q, want %q", err, text.String(), cmp.Choices[0].Text)
	}
	if n := len(f.openai.Calls()) + len(f.anthropic.Calls()); n != calls {
		t.Errorf("%d upstream calls, want %d (the replays sent none)", n, calls)
	}
}

// streamAsk posts a streaming chat request and returns the cache header
// and the raw body.
func streamAsk(t *testing.T, url, body string) (string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Header.Get(headerCache), b
}

// TestCacheKeepsWholeStreams: a stream that ended whole is kept as the
// caller got it and replayed byte for byte to the same question asked as
// a stream (with the usage chunk or without: two entries); a stream the
// upstream cut is not kept.
func TestCacheKeepsWholeStreams(t *testing.T) {
	mf := newMeterFixture(t, cached)
	q := `{"model":"demo-chat","stream":true,"messages":[{"role":"user","content":"stream me"}]}`
	res, first := streamAsk(t, mf.url, q)
	if res != cacheMiss || !bytes.HasSuffix(first, []byte("data: [DONE]\n\n")) {
		t.Fatalf("first: %q %s", res, first)
	}
	var again []byte
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error { // stored as the relay ends
		res, again = streamAsk(t, mf.url, q)
		if res != cacheHit {
			return fmt.Errorf("second: %q", res)
		}
		return nil
	})
	if !bytes.Equal(again, first) {
		t.Errorf("the replay differs:\n%s\nfrom\n%s", again, first)
	}
	withUsage := strings.Replace(q, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
	if res, _ := streamAsk(t, mf.url, withUsage); res != cacheMiss {
		t.Errorf("with the usage chunk: %q, want its own entry", res)
	}
	chats := len(callsTo(mf.openai, "/chat/completions"))

	cut := strings.Replace(q, "stream me", "cut me", 1)
	mf.openai.AddRule(fakeprovider.Rule{Path: "/chat/completions", CutAfter: 2, Times: 1})
	streamAsk(t, mf.url, cut)
	if res, body := streamAsk(t, mf.url, cut); res != cacheMiss || bytes.Contains(body, []byte("stream_incomplete")) {
		t.Errorf("after a cut stream: %q %s", res, body)
	}
	if n := len(callsTo(mf.openai, "/chat/completions")) - chats; n != 2 {
		t.Errorf("%d upstream calls for a cut stream asked twice, want 2", n)
	}
}

// TestSemanticCache: with a semantic cache on the route, a paraphrase of
// a cached question (its last user message's embedding, asked through
// the gateway from the fake's bag-of-words model, at least the threshold
// near) is answered from the cached entry, saying how near; a question
// that differs by a word (Spain for France) is below the threshold and
// goes upstream; no other client key's entry is found; a paraphrase asked
// as a stream is told from the entry as events.
func TestSemanticCache(t *testing.T) {
	f := newMeterFixture(t, cached, func(c *config.Config) {
		p := &c.Providers[0]
		p.Models = append(p.Models, config.Model{Name: "demo-semantic", Kind: config.KindEmbedding})
		ch := c.Chains["demo-chat"]
		ch.Cache.Semantic = config.SemanticCache{Model: "fake-openai/demo-semantic", Threshold: 0.9}
		c.Chains["demo-chat"] = ch
	})
	q := func(s string) string { return chatOf(s) }
	st, res, _, first := ask(t, f.url, clientSecret, q("What is the capital of France?"))
	if st != 200 || res != cacheMiss {
		t.Fatalf("first: %d %q", st, res)
	}
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(q("the capital of France: what is it")))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sim := resp.Header.Get(headerCacheSimilarity)
	if resp.Header.Get(headerCache) != cacheHit || !bytes.Equal(body, first) || sim < "0.9" || sim > "1" {
		t.Errorf("a paraphrase: %q similarity %q, %s", resp.Header.Get(headerCache), sim, body)
	}
	stream := strings.Replace(q("the capital of France: what is it"), `"model"`, `"stream":true,"model"`, 1)
	if res, events := streamAsk(t, f.url, stream); res != cacheHit || !bytes.Contains(events, []byte(`"delta"`)) ||
		!bytes.HasSuffix(events, []byte("data: [DONE]\n\n")) {
		t.Errorf("a paraphrase asked as a stream: %q\n%s", res, events)
	}
	if _, res, _, _ := ask(t, f.url, clientSecret, q("What is the capital of Spain?")); res != cacheMiss {
		t.Errorf("a near miss: %q", res)
	}
	if _, res, _, _ := ask(t, f.url, otherSecret, q("the capital of France: what is it")); res != cacheMiss {
		t.Errorf("another client key's paraphrase: %q", res)
	}
	if n := len(callsTo(f.openai, "/chat/completions")); n != 3 {
		t.Errorf("%d chat calls, want 3 (the first, the near miss, the other key's)", n)
	}
	if n := len(callsTo(f.openai, "/embeddings")); n != 5 {
		t.Errorf("%d embedding calls, want one per question", n)
	}
}
