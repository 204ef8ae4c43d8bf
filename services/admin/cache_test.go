package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"switchyard.dev/services/admin/adminapi"
	"switchyard.dev/shared/answercache"
	"switchyard.dev/shared/testkit"
)

// putEntry stores an entry as a proxy would: route, scope, stored ago.
func (e *env) putEntry(route, scope string, n int, ago time.Duration) string {
	e.t.Helper()
	now := time.Now().UTC()
	cost := 0.001
	ent := answercache.Entry{V: answercache.SchemaVersion, StoredAt: now.Add(-ago), Expires: now.Add(time.Hour), Endpoint: "/v1/chat/completions",
		Route: route, Scope: scope, Provider: "openai", ProviderType: "openai", Model: "gpt-4o", KeyID: "primary", CostUSD: &cost,
		ContentType: "application/json", Answer: json.RawMessage(fmt.Sprintf(`{"id":"chatcmpl-%d","object":"chat.completion"}`, n))}
	b, _ := json.Marshal(ent)
	key := answercache.KeyPrefix(route, scope) + fmt.Sprintf("%064x", n)
	if _, err := e.proxy.Resources().Cache.Create(context.Background(), key, b); err != nil {
		e.t.Fatal(err)
	}
	return key
}

// TestCacheAPI: the admin lists the cache's entries by route, client key
// and key prefix (newest first, bounded by limit), shows one with its
// answer, and purges what matches (an operator's write: a read token is
// refused, and a purge must name what it purges).
func TestCacheAPI(t *testing.T) {
	e := startEnv(t, false)
	k1 := e.putEntry("chain:demo-chat", "team", 1, 3*time.Minute)
	k2 := e.putEntry("chain:demo-chat", "team", 2, time.Minute)
	k3 := e.putEntry("chain:demo-chat", "other", 3, 2*time.Minute)
	k4 := e.putEntry("openai/gpt-4o", answercache.SharedScope, 4, 0)

	list := func(query string) (keys []string, matched int, truncated bool) {
		t.Helper()
		r := e.do("GET", "/admin/cache"+query, readToken, nil)
		r.expect(t, 200, "")
		for _, en := range list(r.body["entries"]) {
			keys = append(keys, obj(en)["key"].(string))
		}
		return keys, int(num(r.body["matched"])), r.body["truncated"] == true
	}
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", []string{k4, k2, k3, k1}},
		{"?route=chain:demo-chat", []string{k2, k3, k1}},
		{"?route=chain:demo-chat&client=team", []string{k2, k1}},
		{"?client=_shared", []string{k4}},
		{"?prefix=" + k3[:len(k3)-60], []string{k3}},
	} {
		if got, _, _ := list(c.query); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v, want %v", c.query, got, c.want)
		}
	}
	if got, matched, truncated := list("?limit=2"); len(got) != 2 || matched != 4 || !truncated {
		t.Errorf("limit 2: %v matched %d truncated %v", got, matched, truncated)
	}
	e.do("GET", "/admin/cache?limit=0", readToken, nil).expect(t, 400, codeBadRequest)

	r := e.do("GET", "/admin/cache/entries/"+k2, readToken, nil)
	r.expect(t, 200, "")
	if r.body["route"] != "chain:demo-chat" || r.body["scope"] != "team" || obj(r.body["answer"])["id"] != "chatcmpl-2" || num(r.body["age_s"]) < 59 {
		t.Errorf("entry %s", r.raw)
	}
	e.do("GET", "/admin/cache/entries/nope", readToken, nil).expect(t, 400, codeBadRequest)
	e.do("GET", "/admin/cache/entries/"+answercache.KeyPrefix("x", "y")+strings.Repeat("0", 64), readToken, nil).expect(t, 404, codeNotFound)

	e.do("DELETE", "/admin/cache?route=chain:demo-chat", readToken, nil).expect(t, 403, "")
	e.do("DELETE", "/admin/cache", opToken, nil).expect(t, 400, codeBadRequest)
	r = e.do("DELETE", "/admin/cache?route=chain:demo-chat&client=team", opToken, nil)
	r.expect(t, 200, "")
	if num(r.body["purged"]) != 2 {
		t.Errorf("purge %s", r.raw)
	}
	testkit.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if got, _, _ := list(""); fmt.Sprint(got) != fmt.Sprint([]string{k4, k3}) {
			return fmt.Errorf("after the purge: %v", got)
		}
		return nil
	})
	if r := e.do("DELETE", "/admin/cache?all=true", opToken, nil); num(r.body["purged"]) != 2 {
		t.Errorf("purge all %s", r.raw)
	}
	cost := 1.0
	for schema, v := range map[string]any{
		"CacheEntry": adminapi.CacheEntry{CostUSD: &cost, Answer: json.RawMessage(`{}`), Events: "data: {}"},
		"CacheList":  adminapi.CacheList{},
		"CachePurge": adminapi.CachePurge{},
	} {
		checkSchema(t, schema, v)
	}
}
