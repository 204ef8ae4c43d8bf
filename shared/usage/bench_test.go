package usage

import "testing"

// benchUserAgents are real User-Agents from TestClientType, from short
// to the longest common kind (an Electron editor's).
var benchUserAgents = map[string]string{
	"claude-code": "claude-cli/2.1.216 (external, cli)",
	"sdk-python":  "AsyncOpenAI/Python 3.3.1",
	"codex":       "codex_cli_rs/0.132.0 (Windows 10.0.26100; x86_64) WindowsTerminal",
	"cursor":      "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Cursor/0.48.6 Chrome/132.0.6834.210 Electron/34.3.4 Safari/537.36",
	"browser":     "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/91.0.4472.124 Safari/537.36",
	"empty":       "",
}

func BenchmarkClientType(b *testing.B) {
	for _, name := range []string{"claude-code", "sdk-python", "codex", "cursor", "browser", "empty"} {
		ua := benchUserAgents[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ClientType(ua)
			}
		})
	}
}

func BenchmarkLookup(b *testing.B) {
	table := NewTable(Defaults(), []Entry{
		{Provider: "openai-eu", Model: "gpt-4o", Price: Price{Input: 2.6, Output: 10}},
		{ProviderType: "azure", Model: "gpt-4o", Price: Price{Input: 2.75, Output: 11}},
	})
	cases := []struct{ name, provider, typ, model string }{
		{"model", "openai", "openai", "gpt-4.1"},
		{"dated", "anthropic", "anthropic", "claude-sonnet-4-20250514"},
		{"provider", "openai-eu", "openai", "gpt-4o"},
		{"type", "azure-west", "azure", "gpt-4o"},
		{"unknown", "openai", "openai", "gpt-6-preview"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				table.Lookup(c.provider, c.typ, c.model)
			}
		})
	}
}

func BenchmarkCost(b *testing.B) {
	table := NewTable(Defaults(), nil)
	tok := AnthropicUsage(12, 3000, 500, 400)
	b.ReportAllocs()
	for b.Loop() {
		table.Cost("anthropic", "anthropic", "claude-sonnet-4-5-20250929", tok)
	}
}

func BenchmarkSubject(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Subject("openai-eu", "team-a")
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	table := NewTable(Defaults(), []Entry{{Provider: "openai-eu", Model: "gpt-4o", Price: Price{Input: 2.6}}})
	for _, model := range []string{"gpt-4o", "gpt-4o-2024-08-06", "claude-opus-4-1-20250805", "unknown-model"} {
		if n := testing.AllocsPerRun(100, func() { table.Cost("openai-eu", "openai", model, Tokens{Input: 1}) }); n != 0 {
			t.Errorf("Cost(%s) allocates %.0f times", model, n)
		}
	}
}
