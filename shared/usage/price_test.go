package usage

import (
	"math"
	"strings"
	"testing"
)

// near reports whether a and b agree to a billionth of a dollar.
func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPriceCost(t *testing.T) {
	full := Price{Input: 3, Output: 15, CachedInput: Given(0.30), CacheWrite: Given(3.75), Reasoning: Given(20)}
	bare := Price{Input: 2, Output: 8}
	free := Price{Input: 2, Output: 8, CachedInput: Given(0), CacheWrite: Given(0), Reasoning: Given(0)}
	tokens := Tokens{Input: 1_000_000, CachedInput: 2_000_000, CacheWrite: 100_000, Output: 500_000, Reasoning: 10_000}
	tests := []struct {
		name  string
		price Price
		tok   Tokens
		want  float64
	}{
		{"every rate given", full, tokens, 3 + 2*0.30 + 0.1*3.75 + 0.5*15 + 0.01*20},
		{"fallbacks: cache read and write at input, reasoning at output", bare, tokens, 2 + 2*2 + 0.1*2 + 0.5*8 + 0.01*8},
		{"given as zero is free, not a fallback", free, tokens, 2 + 0.5*8},
		{"nothing used", full, Tokens{}, 0},
		{"negative counts count as zero", bare, Tokens{Input: -5, Output: 1_000_000}, 8},
		{"one token", bare, Tokens{Input: 1}, 2e-6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.price.Cost(tt.tok); !near(got, tt.want) {
				t.Errorf("Cost = %.12f, want %.12f", got, tt.want)
			}
		})
	}
}

// TestUsageConversionsChargeEachTokenOnce checks, for OpenAI's and
// Anthropic's usage objects, that the converted Tokens add back up to what
// the provider reported and that the cost equals the provider's own
// formula.
func TestUsageConversionsChargeEachTokenOnce(t *testing.T) {
	p := Price{Input: 2, Output: 8, CachedInput: Given(0.5)}
	t.Run("openai", func(t *testing.T) {
		// prompt 1000 of which 600 cached; completion 300 of which 200 reasoning.
		tok := OpenAIUsage(1000, 600, 300, 200)
		if want := (Tokens{Input: 400, CachedInput: 600, Output: 100, Reasoning: 200}); tok != want {
			t.Fatalf("OpenAIUsage = %+v, want %+v", tok, want)
		}
		if tok.TotalInput() != 1000 || tok.TotalOutput() != 300 {
			t.Errorf("totals %d/%d, want 1000/300", tok.TotalInput(), tok.TotalOutput())
		}
		// OpenAI bills (prompt - cached) at input, cached at cached input,
		// completion (reasoning included) at output.
		want := (400*2 + 600*0.5 + 300*8) / 1e6
		if got := p.Cost(tok); !near(got, want) {
			t.Errorf("cost %.9f, want %.9f", got, want)
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		// input_tokens excludes cache reads and writes.
		tok := AnthropicUsage(50, 4000, 1000, 700)
		if want := (Tokens{Input: 50, CachedInput: 4000, CacheWrite: 1000, Output: 700}); tok != want {
			t.Fatalf("AnthropicUsage = %+v, want %+v", tok, want)
		}
		if tok.TotalInput() != 5050 || tok.TotalOutput() != 700 {
			t.Errorf("totals %d/%d, want 5050/700", tok.TotalInput(), tok.TotalOutput())
		}
		a := anthropic(3, 15)
		want := (50*3 + 4000*0.3 + 1000*3.75 + 700*15) / 1e6
		if got := a.Cost(tok); !near(got, want) {
			t.Errorf("cost %.9f, want %.9f", got, want)
		}
	})
	t.Run("openai parts larger than their wholes are cut", func(t *testing.T) {
		tok := OpenAIUsage(100, 150, 10, -3)
		if want := (Tokens{Input: 0, CachedInput: 100, Output: 10}); tok != want {
			t.Errorf("OpenAIUsage = %+v, want %+v", tok, want)
		}
	})
	t.Run("anthropic negatives become zero", func(t *testing.T) {
		if tok := AnthropicUsage(-1, -2, -3, -4); tok != (Tokens{}) {
			t.Errorf("AnthropicUsage = %+v, want zero", tok)
		}
	})
}

func TestPriceValidate(t *testing.T) {
	tests := []struct {
		name  string
		price Price
		want  string // "" = valid
	}{
		{"ok", Price{Input: 1, Output: 2, CachedInput: Given(0)}, ""},
		{"negative input", Price{Input: -1}, "input: -1 USD"},
		{"NaN output", Price{Output: math.NaN()}, "output: NaN"},
		{"infinite cache read", Price{CachedInput: Given(math.Inf(1))}, "cached_input: +Inf"},
		{"negative cache write", Price{CacheWrite: Given(-0.5)}, "cache_write: -0.5"},
		{"negative reasoning", Price{Reasoning: Given(-2)}, "reasoning: -2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.price.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want it to say %q", err, tt.want)
			}
		})
	}
}
