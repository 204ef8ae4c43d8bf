package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const cannedCacheList = `{"entries":[{"key":"chain=3Ademo-chat.team.` + sha64 + `","route":"chain:demo-chat","scope":"team",
 "endpoint":"/v1/chat/completions","provider":"openai","model":"gpt-4o","stored_at":"2026-12-03T09:00:00Z",
 "expires":"2026-12-03T10:00:00Z","age_s":65,"bytes":312,"cost_usd":0.000125}],"matched":3,"truncated":true}`

const sha64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestCacheVerbs: swctl cache ls prints the entries (and says when more
// matched), get prints one with its answer, purge needs a filter and
// prints the count; the filters reach the API as its query.
func TestCacheVerbs(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		switch {
		case r.Method == "GET" && r.URL.Path == "/admin/cache":
			_, _ = w.Write([]byte(cannedCacheList))
		case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/admin/cache/entries/"):
			e := strings.TrimSuffix(strings.TrimPrefix(cannedCacheList, `{"entries":[`), `],"matched":3,"truncated":true}`)
			_, _ = w.Write([]byte(strings.TrimSuffix(e, "}") + `,"answer":{"id":"chatcmpl-1"}}`))
		case r.Method == "DELETE" && r.URL.Path == "/admin/cache":
			_, _ = w.Write([]byte(`{"purged":3}`))
		}
	}))
	defer srv.Close()
	t.Setenv(envAdminURL, srv.URL)
	t.Setenv(envAdminToken, "op-secret")

	out, errOut, err := swctl("cache", "ls", "--route", "chain:demo-chat", "--client", "team", "--limit", "1")
	want := "" +
		"ROUTE            SCOPE  ENDPOINT              SERVED BY      AGE  EXPIRES               BYTES  COST USD  KEY\n" +
		"chain:demo-chat  team   /v1/chat/completions  openai/gpt-4o  65s  2026-12-03 10:00:00Z  312    0.000125  chain=3Ademo-chat.team." + sha64 + "\n"
	if err != nil || out != want || !strings.Contains(errOut, "3 keys matched, 1 shown") {
		t.Errorf("ls: %v\n%s\nwant\n%s\nstderr %q", err, out, want, errOut)
	}
	if out, _, err := swctl("cache", "get", "chain=3Ademo-chat.team."+sha64); err != nil || !strings.HasSuffix(out, "\n{\"id\":\"chatcmpl-1\"}\n") {
		t.Errorf("get: %v\n%s", err, out)
	}
	if _, _, err := swctl("cache", "purge"); err == nil || !strings.Contains(err.Error(), "name what to purge") {
		t.Errorf("purge without a filter: %v", err)
	}
	if out, _, err := swctl("cache", "purge", "--prefix", "chain=3Ademo"); err != nil || out != "3 entries purged\n" {
		t.Errorf("purge: %v %q", err, out)
	}
	wantQ := []string{"GET /admin/cache?client=team&limit=1&route=chain%3Ademo-chat", "GET /admin/cache/entries/chain=3Ademo-chat.team." + sha64 + "?",
		"DELETE /admin/cache?prefix=chain%3D3Ademo"}
	if strings.Join(queries, "\n") != strings.Join(wantQ, "\n") {
		t.Errorf("queries:\n%s\nwant\n%s", strings.Join(queries, "\n"), strings.Join(wantQ, "\n"))
	}
}
