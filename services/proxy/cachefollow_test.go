package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// openStream posts a stream question and returns the response once its
// headers came (the body unread), cancelled by cancel.
func openStream(t *testing.T, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestCacheStreamsFollowed: stream requests that find an identical stream
// in flight on the proxy go upstream not at all: each gets the bytes the
// first caller gets, as they come, said to be hits; the usage records
// say one miss and hits that saved what the miss cost; the stream is
// kept once.
func TestCacheStreamsFollowed(t *testing.T) {
	mf := newMeterFixture(t, cached)
	mf.openai.AddRule(fakeprovider.Rule{Path: "/chat/completions", Chunks: 8, ChunkDelay: 40 * time.Millisecond, Times: 1})
	q := `{"model":"demo-chat","stream":true,"messages":[{"role":"user","content":"follow me"}]}`
	lead := openStream(t, context.Background(), mf.url, q)
	if lead.Header.Get(headerCache) != cacheMiss {
		t.Fatalf("the first stream: %q", lead.Header.Get(headerCache))
	}
	var wg sync.WaitGroup
	bodies := make([][]byte, 9)
	results := make([]string, 9)
	for i := range bodies {
		wg.Go(func() {
			resp := openStream(t, context.Background(), mf.url, q)
			results[i] = resp.Header.Get(headerCache)
			bodies[i], _ = io.ReadAll(resp.Body)
		})
	}
	first, _ := io.ReadAll(lead.Body)
	wg.Wait()
	if !bytes.HasSuffix(first, []byte("data: [DONE]\n\n")) || bytes.Count(first, []byte("data: ")) < 9 {
		t.Fatalf("the first stream: %s", first)
	}
	for i, b := range bodies {
		if results[i] != cacheHit || !bytes.Equal(b, first) {
			t.Errorf("follower %d: %q\n%s", i, results[i], b)
		}
	}
	if n := len(callsTo(mf.openai, "/chat/completions")); n != 1 {
		t.Errorf("%d upstream calls for 10 identical streams at once, want 1", n)
	}
	recs := mf.records(t, 10)
	misses := 0
	var cost *float64
	for _, r := range recs {
		if r.Cache == cacheMiss {
			misses++
			cost = r.CostUSD
		}
	}
	if misses != 1 || cost == nil {
		t.Fatalf("%d misses (cost %v), want 1", misses, cost)
	}
	for _, r := range recs {
		if r.Cache == cacheHit && (r.Status != 200 || !r.StreamCompleted || r.Provider != "fake-openai" || r.CostUSD == nil || *r.CostUSD != 0 ||
			r.CacheSavedUSD == nil || *r.CacheSavedUSD != *cost || r.Class != "") {
			t.Errorf("a follower's record: %+v (saved %v, cost %v)", r, r.CacheSavedUSD, *cost)
		}
	}
	m := scrape(t, mf.url)
	for _, want := range []string{`switchyard_cache_requests_total{result="hit"} 9`, `switchyard_cache_stores_total{result="stored"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "cache"))
		}
	}
}

// TestCacheFollowerOfACutStream: when the caller of the stream others
// follow goes away, the followers' streams end with the gateway's
// stream_incomplete error event (not a [DONE] that would make a part look
// whole); nothing is kept; asked again, the question goes upstream.
func TestCacheFollowerOfACutStream(t *testing.T) {
	mf := newMeterFixture(t, cached)
	mf.openai.AddRule(fakeprovider.Rule{Path: "/chat/completions", Chunks: 20, ChunkDelay: 50 * time.Millisecond, Times: 1})
	q := `{"model":"demo-chat","stream":true,"messages":[{"role":"user","content":"leave me"}]}`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lead := openStream(t, ctx, mf.url, q)
	buf := make([]byte, 1)
	if _, err := io.ReadFull(lead.Body, buf); err != nil {
		t.Fatal(err)
	}
	var followers []*http.Response
	for range 3 {
		resp := openStream(t, context.Background(), mf.url, q)
		if resp.Header.Get(headerCache) != cacheHit {
			t.Fatalf("a follower: %q", resp.Header.Get(headerCache))
		}
		followers = append(followers, resp)
	}
	cancel()
	for i, resp := range followers {
		b, _ := io.ReadAll(resp.Body)
		if !bytes.Contains(b, []byte(`"stream_incomplete"`)) || bytes.Contains(b, []byte("[DONE]")) || !bytes.Contains(b, []byte(`"content"`)) {
			t.Errorf("follower %d of a cut stream got\n%s", i, b)
		}
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { return mf.svc.life.inFlight.Load() == 0 })
	if res, b := streamAsk(t, mf.url, q); res != cacheMiss || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
		t.Errorf("asked again: %q %s", res, b)
	}
	if n := len(callsTo(mf.openai, "/chat/completions")); n != 2 {
		t.Errorf("%d upstream calls, want 2 (the cut stream, the question asked again)", n)
	}
}
