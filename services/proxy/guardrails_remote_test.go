package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard.dev/services/proxy/internal/gwerror"
	"switchyard.dev/shared/config"
	"switchyard.dev/tools/fakeprovider"
)

// moderatedFixture is the base fixture with a moderation model on the
// OpenAI fake and guardrails on the client key: "moderated" (both
// stages) asks it through the gateway; onError is its on_error.
func moderatedFixture(t *testing.T, onError string) *fixture {
	return newFixture(t, func(c *config.Config) {
		p := &c.Providers[0]
		p.Models = append(p.Models, config.Model{Name: "demo-moderation", Kind: config.KindModeration})
		c.Aliases["mod"] = "fake-openai/demo-moderation"
		c.Guardrails = []config.Guardrail{{Name: "moderated", Stage: config.StageBoth,
			Moderation: config.GuardrailModeration{Model: "mod", OnError: onError, Timeout: 5 * time.Second}}}
		c.Clients[0].Guardrails = []string{"moderated"}
	})
}

func chatOf(content string) string {
	b, _ := json.Marshal(map[string]any{"model": "demo-chat", "messages": []map[string]string{{"role": "user", "content": content}}})
	return string(b)
}

// calls is the fake's calls to paths ending in suffix.
func callsTo(s *fakeprovider.Server, suffix string) []fakeprovider.Call {
	var out []fakeprovider.Call
	for _, c := range s.Calls() {
		if strings.HasSuffix(c.Path, suffix) {
			out = append(out, c)
		}
	}
	return out
}

// TestGuardrailModeration: a moderation check goes through the gateway's
// own pipeline (a key that fails is rotated past, as for any request):
// flagged text is blocked naming the category, on the way in and on the
// way out, and clean text is served; the moderation request is counted
// like any other.
func TestGuardrailModeration(t *testing.T) {
	f := moderatedFixture(t, "")
	// clean, through a failing first key: the pipeline rotates
	f.openai.AddRule(fakeprovider.Rule{Path: "/moderations", Key: "key-a1", Error: "openai.server_error"})
	f.openai.AddRule(fakeprovider.Rule{Path: "/moderations", Key: "key-a2", Error: "openai.server_error", Times: 1})
	if st, _, body := f.call(t, "/v1/chat/completions", chatOf("hello there")); st != 200 {
		t.Fatalf("clean: %d %s", st, body)
	}
	// the request's text (after the failed keys), then the answer's
	mods := callsTo(f.openai, "/moderations")
	if n := len(mods); n != 5 || mods[3].Key != "key-a2" || !strings.Contains(string(mods[3].Body), `"input":["hello there"]`) ||
		mods[3].Model != "demo-moderation" || !strings.Contains(string(mods[4].Body), `"input":["chunk 0 chunk 1`) {
		t.Fatalf("moderation calls %+v", mods)
	}
	if n := len(callsTo(f.openai, "/chat/completions")); n != 1 {
		t.Fatalf("%d chat calls for a clean request", n)
	}

	// flagged on the way in: nothing goes upstream
	st, _, body := f.call(t, "/v1/chat/completions", chatOf("please "+fakeprovider.FlagMarker))
	if st != 400 || errorCode(t, body) != gwerror.GuardrailBlocked || !strings.Contains(string(body), "`moderated` (moderation.violence)") {
		t.Fatalf("flagged input: %d %s", st, body)
	}
	if strings.Contains(string(body), fakeprovider.FlagMarker) {
		t.Errorf("the block quotes the text: %s", body)
	}
	if n := len(callsTo(f.openai, "/chat/completions")); n != 1 {
		t.Errorf("a flagged request went upstream (%d chat calls)", n)
	}

	// flagged on the way out: the answer is not relayed
	f.openai.AddRule(fakeprovider.Rule{Path: "/chat/completions", Text: []string{"sure, ", fakeprovider.FlagMarker}, Times: 1})
	st, _, body = f.call(t, "/v1/chat/completions", chatOf("hi"))
	if st != 400 || !strings.Contains(string(body), "the answer was blocked by guardrail `moderated` (moderation.violence)") {
		t.Fatalf("flagged answer: %d %s", st, body)
	}

	m := scrape(t, f.url)
	for _, want := range []string{
		`switchyard_guardrail_decisions_total{action="block",guardrail="moderated",stage="input"} 1`,
		`switchyard_guardrail_decisions_total{action="block",guardrail="moderated",stage="output"} 1`,
		`switchyard_guardrail_decisions_total{action="pass",guardrail="moderated",stage="input"} 2`,
		`switchyard_requests_total{class="ok",endpoint="moderations"`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "guardrail"))
		}
	}
}

// TestGuardrailModerationOnError: with the moderation model failing on
// every key, on_error allow serves the request (the failure counted and
// logged), on_error block refuses it; neither calls the chat upstream
// when blocked.
func TestGuardrailModerationOnError(t *testing.T) {
	for _, onError := range []string{"allow", "block"} {
		t.Run(onError, func(t *testing.T) {
			f := moderatedFixture(t, onError)
			f.openai.AddRule(fakeprovider.Rule{Path: "/moderations", Error: "openai.server_error"})
			st, _, body := f.call(t, "/v1/chat/completions", chatOf("hello"))
			chats := len(callsTo(f.openai, "/chat/completions"))
			switch onError {
			case "allow":
				if st != 200 || chats != 1 {
					t.Fatalf("%d %s (%d chat calls)", st, body, chats)
				}
			case "block":
				if st != 400 || !strings.Contains(string(body), "`moderated` (moderation.error)") || chats != 0 {
					t.Fatalf("%d %s (%d chat calls)", st, body, chats)
				}
			}
			errs := map[string]int{"allow": 2, "block": 1}[onError] // allowed, the answer is checked too
			if m := scrape(t, f.url); !strings.Contains(m, fmt.Sprintf(`switchyard_guardrail_check_errors_total{check="moderation",guardrail="moderated"} %d`, errs)) {
				t.Errorf("metrics:\n%s", grepLines(m, "guardrail"))
			}
		})
	}
}

// webhookServer is an operator's webhook on a real loopback listener: it
// checks the signature, fails texts with "bad", and hangs on "slow"
// until the call is given up.
type webhookServer struct {
	url    string
	mu     sync.Mutex
	calls  []webhookCall
	badSig int
}

func startWebhook(t *testing.T, secret string) *webhookServer {
	w := &webhookServer{}
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var call webhookCall
		_ = json.Unmarshal(body, &call)
		w.mu.Lock()
		w.calls = append(w.calls, call)
		if r.Header.Get(headerWebhookSignature) != WebhookSignature(secret, r.Header.Get(headerWebhookTimestamp), body) {
			w.badSig++
		}
		w.mu.Unlock()
		all := strings.Join(call.Texts, " ")
		switch {
		case strings.Contains(all, "slow"):
			<-r.Context().Done()
			return
		case strings.Contains(all, "bad"):
			_, _ = io.WriteString(rw, `{"verdict":"fail"}`)
		case strings.Contains(all, "garbled"):
			_, _ = io.WriteString(rw, `<html>`)
		default:
			_, _ = io.WriteString(rw, `{"verdict":"pass"}`)
		}
	})
	srv := httptest.NewServer(h) // a real loopback listener
	t.Cleanup(srv.Close)
	w.url = srv.URL
	return w
}

// TestGuardrailWebhook: a webhook check gets the request's text (after
// the redactions before it), signed; its fail blocks, its pass serves; a
// slow webhook, an answer that is not one and a webhook that is down do
// what on_error says, within the timeout.
func TestGuardrailWebhook(t *testing.T) {
	const secret = "whsec-test-1"
	wh := startWebhook(t, secret)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	f := newFixture(t, func(c *config.Config) {
		c.Guardrails = []config.Guardrail{
			{Name: "no-cards", Action: config.ActionRedact, Patterns: []string{"card_number"}},
			{Name: "custom", Webhook: config.GuardrailWebhook{URL: wh.url, Value: config.NewSecret(secret), Timeout: 300 * time.Millisecond, OnError: "block"}},
			{Name: "custom-open", Webhook: config.GuardrailWebhook{URL: down, Value: config.NewSecret(secret), Timeout: 300 * time.Millisecond}},
		}
		c.Clients[0].Guardrails = []string{"no-cards", "custom", "custom-open"}
	})
	if st, _, body := f.call(t, "/v1/chat/completions", chatOf("fine 4111 1111 1111 1111")); st != 200 {
		t.Fatalf("pass: %d %s", st, body)
	}
	wh.mu.Lock()
	first := wh.calls[0]
	wh.mu.Unlock()
	if first.Guardrail != "custom" || first.Stage != "input" || first.Client != "team" || first.Route != "chain:demo-chat" ||
		len(first.Texts) != 1 || first.Texts[0] != "fine [REDACTED:card_number]" {
		t.Errorf("the webhook got %+v", first)
	}
	for _, c := range []struct{ text, check string }{
		{"a bad one", "webhook"}, {"a slow one", "webhook.error"}, {"garbled", "webhook.error"},
	} {
		start := time.Now()
		st, _, body := f.call(t, "/v1/chat/completions", chatOf(c.text))
		if st != 400 || !strings.Contains(string(body), "`custom` ("+c.check+")") {
			t.Errorf("%s: %d %s", c.text, st, body)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: answered after %s", c.text, took)
		}
	}
	if n := len(callsTo(f.openai, "/chat/completions")); n != 1 {
		t.Errorf("%d chat calls, want 1 (the blocked ones sent nothing)", n)
	}
	wh.mu.Lock()
	bad := wh.badSig
	wh.mu.Unlock()
	if bad != 0 {
		t.Errorf("%d calls with a bad signature", bad)
	}
	m := scrape(t, f.url)
	for _, want := range []string{
		`switchyard_guardrail_check_errors_total{check="webhook",guardrail="custom"} 2`,
		`switchyard_guardrail_check_errors_total{check="webhook",guardrail="custom-open"} 1`, // down, allowed
		`switchyard_guardrail_decisions_total{action="pass",guardrail="custom-open",stage="input"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "guardrail"))
		}
	}
}
