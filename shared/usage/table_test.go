package usage

import (
	"strings"
	"sync"
	"testing"
)

func TestLookup(t *testing.T) {
	p := func(in float64) Price { return Price{Input: in, Output: in * 4} }
	defaults := []Entry{
		{Model: "gpt-4o", Price: p(2.5)},
		{Model: "gpt-4o-mini", Price: p(0.15)},
		{Model: "gpt-4o-2024-05-13", Price: p(5)},
		{Model: "claude-sonnet-4", Price: p(3)},
		{Model: "claude-opus-4", Price: p(15)},
		{ProviderType: "azure", Model: "gpt-4o", Price: p(2.75)},
	}
	overrides := []Entry{
		{Model: "claude-opus-4", Price: p(14)},
		{Provider: "openai-eu", Model: "gpt-4o", Price: p(2.6)},
		{Provider: "openai-eu", Model: "gpt-4o-2024-11-20", Price: p(2.7)},
		{ProviderType: "openrouter", Model: "anthropic/claude-sonnet-4", Price: p(3.3)},
		{Provider: "both", ProviderType: "azure", Model: "m", Price: p(9)},
		{Price: p(99)}, // no model: skipped
	}
	table := NewTable(defaults, overrides)
	tests := []struct {
		name                 string
		provider, typ, model string
		want                 float64 // input rate; 0 = unknown
	}{
		{"model alone", "openai", "openai", "gpt-4o", 2.5},
		{"dated snapshot priced as its family", "openai", "openai", "gpt-4o-2024-08-06", 2.5},
		{"compact date too", "anthropic", "anthropic", "claude-sonnet-4-20250514", 3},
		{"a snapshot with its own entry keeps it", "openai", "openai", "gpt-4o-2024-05-13", 5},
		{"no loose prefix: mini is not gpt-4o", "openai", "openai", "gpt-4o-mini", 0.15},
		{"no loose prefix: unknown suffix", "openai", "openai", "gpt-4o-audio-preview", 0},
		{"no loose prefix: dated mini is mini", "openai", "openai", "gpt-4o-mini-2024-07-18", 0.15},
		{"not a date: month 13", "openai", "openai", "gpt-4o-2024-13-01", 0},
		{"not a date: day 00", "openai", "openai", "gpt-4o-20240800", 0},
		{"not a date: letters", "openai", "openai", "gpt-4o-2024-0a-01", 0},
		{"a date alone is no model", "openai", "openai", "-2024-08-06", 0},
		{"override replaces a default", "anthropic", "anthropic", "claude-opus-4", 14},
		{"override's family for a dated id", "anthropic", "anthropic", "claude-opus-4-20250514", 14},
		{"provider entry first", "openai-eu", "openai", "gpt-4o", 2.6},
		{"provider entry for its snapshot", "openai-eu", "openai", "gpt-4o-2024-11-20", 2.7},
		{"provider family before type and model", "openai-eu", "azure", "gpt-4o-2024-08-06", 2.6},
		{"type entry before model alone", "azure-west", "azure", "gpt-4o", 2.75},
		{"type entry for a dated id", "azure-west", "azure", "gpt-4o-2024-08-06", 2.75},
		{"type entry with the provider's model name", "or", "openrouter", "anthropic/claude-sonnet-4", 3.3},
		{"other provider falls through to the model", "openai-us", "openai", "gpt-4o", 2.5},
		{"provider scope wins over type in one entry", "both", "", "m", 9},
		{"provider-and-type entry is not a type entry", "other", "azure", "m", 0},
		{"unknown model", "openai", "openai", "gpt-6", 0},
		{"empty model", "openai", "openai", "", 0},
		{"case matters", "openai", "openai", "GPT-4o", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := table.Lookup(tt.provider, tt.typ, tt.model)
			if tt.want == 0 {
				if ok {
					t.Errorf("Lookup(%q, %q, %q) = %+v, want unknown", tt.provider, tt.typ, tt.model, got)
				}
				return
			}
			if !ok || got.Input != tt.want {
				t.Errorf("Lookup(%q, %q, %q) = %+v, %v; want input %v", tt.provider, tt.typ, tt.model, got, ok, tt.want)
			}
		})
	}
}

func TestCostUnknownIsNotZero(t *testing.T) {
	table := NewTable(Defaults(), nil)
	tok := Tokens{Input: 1000, Output: 1000}
	if usd, known := table.Cost("x", "openai", "no-such-model", tok); known || usd != 0 {
		t.Errorf("unknown model: Cost = %v, %v; want 0, false", usd, known)
	}
	var nilTable *Table
	if _, known := nilTable.Cost("openai", "openai", "gpt-4o", tok); known {
		t.Error("nil table knows a price")
	}
	free := NewTable(nil, []Entry{{Model: "local", Price: Price{}}})
	if usd, known := free.Cost("ollama", "ollama", "local", tok); !known || usd != 0 {
		t.Errorf("free model: Cost = %v, %v; want 0, true", usd, known)
	}
	if usd, known := table.Cost("openai", "openai", "gpt-4o-2024-08-06", tok); !known || !near(usd, (1000*2.5+1000*10)/1e6) {
		t.Errorf("gpt-4o snapshot: Cost = %v, %v", usd, known)
	}
}

func TestEntryValidate(t *testing.T) {
	tests := []struct {
		name  string
		entry Entry
		want  string // "" = valid
	}{
		{"model alone", Entry{Model: "m", Price: Price{Input: 1}}, ""},
		{"provider", Entry{Provider: "p", Model: "m"}, ""},
		{"no model", Entry{Provider: "p"}, "model is empty"},
		{"both scopes", Entry{Provider: "p", ProviderType: "openai", Model: "m"}, "price entry m: set provider (p) or provider_type (openai), not both"},
		{"bad rate named", Entry{Model: "m", Price: Price{Input: -1}}, "price entry m: input: -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.entry.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want it to say %q", err, tt.want)
			}
		})
	}
}

// TestDefaults checks the bundled table: every model the package promises
// is priced, every entry is valid and unique, and dated API ids reach
// their family.
func TestDefaults(t *testing.T) {
	list := Defaults()
	seen := map[string]bool{}
	for _, e := range list {
		if err := e.Validate(); err != nil {
			t.Error(err)
		}
		if e.Provider != "" || e.ProviderType != "" {
			t.Errorf("default %s is scoped; defaults price models alone", e.Model)
		}
		if seen[e.Model] {
			t.Errorf("default %s listed twice", e.Model)
		}
		seen[e.Model] = true
		if e.Price.Input <= 0 {
			t.Errorf("default %s has no input price", e.Model)
		}
	}
	list[0].Price.Input = 1e9
	if Defaults()[0].Price.Input == 1e9 {
		t.Error("Defaults returns its own array")
	}
	table := NewTable(Defaults(), nil)
	for _, model := range []string{
		"gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano", "o3", "o4-mini", "o1",
		"gpt-5", "gpt-5-mini", "text-embedding-3-small", "text-embedding-3-large",
		"claude-opus-4", "claude-opus-4-1", "claude-sonnet-4", "claude-sonnet-4-5", "claude-3-7-sonnet",
		"claude-3-5-haiku", "claude-haiku-4-5",
		"gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.0-flash",
		// Dated ids as the APIs name them.
		"gpt-4o-2024-08-06", "gpt-4o-mini-2024-07-18", "gpt-4.1-2025-04-14", "o3-2025-04-16",
		"o4-mini-2025-04-16", "gpt-5-2025-08-07", "claude-opus-4-20250514", "claude-opus-4-1-20250805",
		"claude-sonnet-4-20250514", "claude-sonnet-4-5-20250929", "claude-3-7-sonnet-20250219",
		"claude-3-5-haiku-20241022", "claude-haiku-4-5-20251001",
	} {
		if _, ok := table.Lookup("", "", model); !ok {
			t.Errorf("no default price for %s", model)
		}
	}
	// Spot checks of list prices (USD per million tokens).
	checks := []struct {
		model                   string
		in, out, cached, writes float64
	}{
		{"gpt-4o", 2.50, 10, 1.25, 2.50},
		{"gpt-4o-mini", 0.15, 0.60, 0.075, 0.15},
		{"claude-sonnet-4-5", 3, 15, 0.30, 3.75},
		{"claude-3-5-haiku", 0.80, 4, 0.08, 1},
		{"claude-opus-4-1", 15, 75, 1.50, 18.75},
	}
	for _, c := range checks {
		p, _ := table.Lookup("", "", c.model)
		if !near(p.Input, c.in) || !near(p.Output, c.out) || !near(p.CachedInput.or(p.Input), c.cached) || !near(p.CacheWrite.or(p.Input), c.writes) {
			t.Errorf("%s: %+v, want in %v out %v cached %v writes %v", c.model, p, c.in, c.out, c.cached, c.writes)
		}
	}
}

// TestTableConcurrentReads is run with -race: a built Table is read from
// many goroutines with no lock.
func TestTableConcurrentReads(t *testing.T) {
	table := NewTable(Defaults(), []Entry{{Provider: "eu", Model: "gpt-4o", Price: Price{Input: 3}}})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 1000 {
				model := []string{"gpt-4o", "gpt-4o-2024-08-06", "claude-sonnet-4-20250514", "nope"}[(i+j)%4]
				table.Cost("eu", "openai", model, Tokens{Input: int64(j)})
			}
		})
	}
	wg.Wait()
}
