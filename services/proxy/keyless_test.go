package proxy

import (
	"testing"

	"switchyard.dev/shared/config"
)

// A keyless provider (vLLM, Ollama) is served without any credential.
func TestKeylessProvider(t *testing.T) {
	f := newFixture(t, func(c *config.Config) {
		c.Providers = append(c.Providers, config.Provider{
			Name: "local", Type: "vllm", BaseURL: c.Providers[0].BaseURL, Selection: "round_robin",
			Models: []config.Model{{Name: "llama", Kind: "chat"}},
		})
	})
	status, h, body := f.call(t, "/v1/chat/completions", `{"model":"local/llama","messages":[{"role":"user","content":"x"}]}`)
	if status != 200 || h.Get("X-Switchyard-Provider") != "local" {
		t.Fatalf("status %d provider %q: %s", status, h.Get("X-Switchyard-Provider"), body)
	}
	calls := f.openai.Calls()
	if len(calls) != 1 || calls[0].Header.Get("Authorization") != "" || calls[0].Key != "" {
		t.Fatalf("keyless call carried a credential: %+v", calls)
	}
}
