package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"switchyard.dev/tools/fakeprovider"
)

// TestRequestContractsThroughTheFleet: the contracts a statement-by-
// statement audit found broken, through a real proxy, prober and admin on
// one NATS: a string that is not UTF-8 and a token limit no number type
// holds are refused naming the field, nothing sent; an invalid
// Idempotency-Key is ignored with a warning (not forwarded), a valid one
// goes with every attempt to the same provider, the other key after a 429
// included; /v1/models lists what the caller's key may use; a pin reason
// that is not UTF-8 is refused.
func TestRequestContractsThroughTheFleet(t *testing.T) {
	f := startSecFleet(t)

	t.Run("invalid text and numbers", func(t *testing.T) {
		before := f.inferenceCalls()
		for _, tt := range []struct{ name, body, field string }{
			{"not UTF-8", "{\"model\":\"demo-chat\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}", "messages[0].content"},
			{"max_tokens 1e400", `{"model":"demo-chat","max_tokens":1e400,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
		} {
			st, _, b := f.call(tt.name, "/v1/chat/completions", tt.body)
			if st != http.StatusBadRequest || !strings.Contains(string(b), `"code":"invalid_request"`) || !strings.Contains(string(b), tt.field) {
				t.Errorf("%s: %d %s", tt.name, st, b)
			}
		}
		if n := f.inferenceCalls() - before; n != 0 {
			t.Errorf("%d upstream calls for refused requests", n)
		}
	})

	t.Run("idempotency keys", func(t *testing.T) {
		bad := strings.Repeat("k", 300)
		st, h, b := f.call("invalid idempotency key", "/v1/chat/completions",
			`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`, "Idempotency-Key", bad)
		if st != http.StatusOK || h.Get("X-Switchyard-Warning") == "" {
			t.Errorf("an invalid Idempotency-Key: %d, warning %q: %s", st, h.Get("X-Switchyard-Warning"), b)
		}
		if n := f.oa.CountCalls(func(c fakeprovider.Call) bool { return c.IdempotencyKey == bad }); n != 0 {
			t.Errorf("the invalid key went upstream %d times", n)
		}
		// k1 (priority 1) is rate limited: the request moves to k2 with its key
		rule := f.oa.AddRule(fakeprovider.Rule{Key: canaryK1, Error: "openai.rate_limit", Times: 1})
		defer f.oa.RemoveRule(rule)
		const idem = "order-7f3a-retry-safe"
		st, h, b = f.call("idempotency key across keys", "/v1/chat/completions",
			`{"model":"fake-openai/demo-model","messages":[{"role":"user","content":"hi"}]}`, "Idempotency-Key", idem)
		if st != http.StatusOK || h.Get("X-Switchyard-Key-Id") != "k2" {
			t.Fatalf("after k1's 429: %d served by %q: %s", st, h.Get("X-Switchyard-Key-Id"), b)
		}
		for _, key := range []string{canaryK1, canaryK2} {
			if n := f.oa.CountCalls(func(c fakeprovider.Call) bool { return c.Key == key && c.IdempotencyKey == idem }); n != 1 {
				t.Errorf("attempts with key %s carrying the Idempotency-Key: %d, want 1", key[:10], n)
			}
		}
	})

	t.Run("models the key may use", func(t *testing.T) {
		st, _, b := f.do("models of the limited key", http.MethodGet, f.proxyURL+"/v1/models", "", "Authorization", "Bearer "+canaryLimited)
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &list); st != http.StatusOK || err != nil {
			t.Fatalf("%d %s", st, b)
		}
		var ids []string
		for _, m := range list.Data {
			ids = append(ids, m.ID)
		}
		if fmt.Sprint(ids) != "[demo-model]" && fmt.Sprint(ids) != "[fake-openai/demo-model]" {
			t.Errorf("the key allowed demo-model only lists %v", ids)
		}
		st, _, _ = f.do("another model's entry", http.MethodGet, f.proxyURL+"/v1/models/demo-claude", "", "Authorization", "Bearer "+canaryLimited)
		if st != http.StatusNotFound {
			t.Errorf("GET /v1/models/demo-claude with the limited key: %d, want 404", st)
		}
	})

	t.Run("pin reason", func(t *testing.T) {
		st, b := f.adm(http.MethodPost, "/admin/holds", "{\"provider\":\"fake-openai\",\"key\":\"k1\",\"reason\":\"drain \xff\",\"duration\":\"1m\"}")
		if st != http.StatusBadRequest || !strings.Contains(string(b), "reason") || !strings.Contains(string(b), "UTF-8") {
			t.Errorf("a pin reason that is not UTF-8: %d %s", st, b)
		}
		if st, b := f.adm(http.MethodGet, "/admin/holds", ""); st != http.StatusOK || strings.Contains(string(b), `"pinned":true`) {
			t.Errorf("the refused pin changed the holds: %d %s", st, b)
		}
	})
	f.leaks.verify(t)
}
