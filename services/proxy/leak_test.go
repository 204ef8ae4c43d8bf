package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/redact"
	"switchyard.dev/shared/testkit"
	"switchyard.dev/tools/fakeprovider"
)

// Canary secrets: not credential-shaped, so only masking by value catches
// them.
var canaries = map[string]string{
	"a1": "canary.a1.7f3a9c2e", "a2": "canary.a2.51d0be77",
	"b1": "canary.b1.c4e18a09", "b2": "canary.b2.9e6f3d41",
}

// Providers echo keys in their errors; nothing the proxy relays to a caller
// (error bodies, translated errors, stream error events, its own messages),
// logs at debug level or exports as metrics may carry a secret.
func TestProviderSecretsNeverReachCallers(t *testing.T) {
	oa, an := startFakes(t)
	cfg := baseConfig(oa, an)
	for i := range cfg.Providers {
		for j := range cfg.Providers[i].Keys {
			k := &cfg.Providers[i].Keys[j]
			k.Value = config.NewSecret(canaries[k.ID])
		}
	}
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, url := startService(t, cfg, Deps{Log: log})
	f := &fixture{openai: oa, anthropic: an, cfg: cfg, url: url}

	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name     string
		fake     *fakeprovider.Server
		rule     fakeprovider.Rule
		path     string
		body     string
		echoed   bool // the answer quotes the upstream's (masked) message
		wantCode int
	}{
		{"chat error body", oa, fakeprovider.Rule{Error: "openai.bad_request_echo"},
			"/v1/chat/completions", `{"model":"demo-model",` + msgs + `}`, true, 400},
		{"messages error translated", oa, fakeprovider.Rule{Error: "openai.bad_request_echo"},
			"/v1/messages", `{"model":"demo-model","max_tokens":8,` + msgs + `}`, true, 400},
		{"embeddings error body", oa, fakeprovider.Rule{Error: "openai.bad_request_echo"},
			"/v1/embeddings", `{"model":"demo-embed","input":"hi"}`, true, 400},
		{"stream error before content", oa, fakeprovider.Rule{Error: "openai.bad_request_echo", ErrorInStream: true},
			"/v1/chat/completions", `{"model":"demo-model","stream":true,` + msgs + `}`, true, 400},
		{"stream plain error body", oa, fakeprovider.Rule{Error: "openai.bad_request_echo"},
			"/v1/chat/completions", `{"model":"demo-model","stream":true,` + msgs + `}`, true, 400},
		{"stream error event mid-way", oa, fakeprovider.Rule{Error: "openai.invalid_api_key_unmasked", ErrorInStream: true, ErrorAfterChunks: 2},
			"/v1/chat/completions", `{"model":"demo-model","stream":true,` + msgs + `}`, true, 200},
		{"stream error event translated to messages", oa, fakeprovider.Rule{Error: "openai.invalid_api_key_unmasked", ErrorInStream: true, ErrorAfterChunks: 2},
			"/v1/messages", `{"model":"demo-model","stream":true,"max_tokens":8,` + msgs + `}`, true, 200},
		{"stream error event translated to chat", an, fakeprovider.Rule{Error: "anthropic.invalid_api_key_unmasked", ErrorInStream: true, ErrorAfterChunks: 2},
			"/v1/chat/completions", `{"model":"demo-claude","stream":true,` + msgs + `}`, true, 200},
		{"anthropic stream error event", an, fakeprovider.Rule{Error: "anthropic.invalid_api_key_unmasked", ErrorInStream: true, ErrorAfterChunks: 2},
			"/v1/messages", `{"model":"demo-claude","stream":true,"max_tokens":8,` + msgs + `}`, true, 200},
		// Last: these hold every key of their provider.
		{"every key refused (openai)", oa, fakeprovider.Rule{Error: "openai.invalid_api_key_unmasked"},
			"/v1/chat/completions", `{"model":"demo-model",` + msgs + `}`, false, 502},
		{"every key refused (anthropic)", an, fakeprovider.Rule{Error: "anthropic.invalid_api_key_unmasked"},
			"/v1/messages", `{"model":"demo-claude","max_tokens":8,` + msgs + `}`, false, 502},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			oa.ClearRules()
			an.ClearRules()
			tt.fake.AddRule(tt.rule)
			status, header, body := f.call(t, tt.path, tt.body)
			if status != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", status, tt.wantCode, body)
			}
			assertNoCanary(t, "response body", string(body))
			for name, vs := range header {
				assertNoCanary(t, "header "+name, strings.Join(vs, " "))
			}
			if tt.echoed && !strings.Contains(string(body), redact.Mask) {
				t.Fatalf("the upstream's message was not relayed masked: %s", body)
			}
		})
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assertNoCanary(t, "metrics", string(m))
	assertNoCanary(t, "logs", logs.String())
	if !strings.Contains(logs.String(), "attempt failed") {
		t.Fatal("no attempt was logged: the log check proves nothing")
	}
}

func assertNoCanary(t *testing.T, where, s string) {
	t.Helper()
	for id, c := range canaries {
		if strings.Contains(s, c) {
			t.Errorf("%s carries the secret of key %s: %s", where, id, s)
		}
	}
}
