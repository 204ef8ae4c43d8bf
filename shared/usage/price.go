package usage

import (
	"fmt"
	"math"
)

// Tokens counts one request's tokens in disjoint categories: every token
// the provider billed is in exactly one field, so a cost is the sum of each
// field times its rate and no token is charged twice or missed.
//
// Providers report overlapping counts instead:
//
//   - OpenAI (chat completions; responses likewise): prompt_tokens includes
//     prompt_tokens_details.cached_tokens, and completion_tokens includes
//     completion_tokens_details.reasoning_tokens. So Input = prompt_tokens -
//     cached_tokens, CachedInput = cached_tokens, Output =
//     completion_tokens - reasoning_tokens, Reasoning = reasoning_tokens,
//     CacheWrite = 0 (OpenAI does not report or charge cache writes).
//     OpenAIUsage does this.
//   - Anthropic: input_tokens excludes cache_read_input_tokens and
//     cache_creation_input_tokens, and output_tokens includes thinking
//     (not reported apart). So Input = input_tokens, CachedInput =
//     cache_read_input_tokens, CacheWrite = cache_creation_input_tokens,
//     Output = output_tokens, Reasoning = 0. AnthropicUsage does this.
//   - Gemini (native usageMetadata): promptTokenCount includes
//     cachedContentTokenCount, and candidatesTokenCount excludes
//     thoughtsTokenCount. So Input = promptTokenCount -
//     cachedContentTokenCount, CachedInput = cachedContentTokenCount,
//     Output = candidatesTokenCount, Reasoning = thoughtsTokenCount.
//
// TotalInput and TotalOutput give the provider-style totals back.
type Tokens struct {
	// Input is the prompt tokens neither read from nor written to a cache.
	Input int64 `json:"input"`
	// Output is the generated tokens other than Reasoning.
	Output int64 `json:"output"`
	// CachedInput is the prompt tokens read from a cache.
	CachedInput int64 `json:"cached_input"`
	// CacheWrite is the prompt tokens written to a cache.
	CacheWrite int64 `json:"cache_write"`
	// Reasoning is the generated reasoning (thinking) tokens the provider
	// reported apart from Output.
	Reasoning int64 `json:"reasoning"`
}

// TotalInput returns every prompt token: Input + CachedInput + CacheWrite
// (OpenAI's prompt_tokens).
func (t Tokens) TotalInput() int64 { return t.Input + t.CachedInput + t.CacheWrite }

// TotalOutput returns every generated token: Output + Reasoning (OpenAI's
// completion_tokens).
func (t Tokens) TotalOutput() int64 { return t.Output + t.Reasoning }

// OpenAIUsage converts OpenAI's usage (prompt_tokens,
// prompt_tokens_details.cached_tokens, completion_tokens,
// completion_tokens_details.reasoning_tokens) to Tokens. A part larger than
// its whole (more cached than prompt tokens) is cut to the whole, and a
// negative count to 0.
func OpenAIUsage(promptTokens, cachedTokens, completionTokens, reasoningTokens int64) Tokens {
	prompt, completion := max(promptTokens, 0), max(completionTokens, 0)
	cached := min(max(cachedTokens, 0), prompt)
	reasoning := min(max(reasoningTokens, 0), completion)
	return Tokens{
		Input:       prompt - cached,
		CachedInput: cached,
		Output:      completion - reasoning,
		Reasoning:   reasoning,
	}
}

// AnthropicUsage converts Anthropic's usage (input_tokens,
// cache_read_input_tokens, cache_creation_input_tokens, output_tokens) to
// Tokens. A negative count becomes 0.
func AnthropicUsage(inputTokens, cacheReadInputTokens, cacheCreationInputTokens, outputTokens int64) Tokens {
	return Tokens{
		Input:       max(inputTokens, 0),
		CachedInput: max(cacheReadInputTokens, 0),
		CacheWrite:  max(cacheCreationInputTokens, 0),
		Output:      max(outputTokens, 0),
	}
}

// Rate is an optional price in USD per million tokens. The zero Rate is
// "not given" (the Price falls back to another of its rates); Given(0) is
// free.
type Rate struct {
	USD float64
	Set bool
}

// Given returns a Rate of usdPerMillion USD per million tokens.
func Given(usdPerMillion float64) Rate { return Rate{USD: usdPerMillion, Set: true} }

// or returns the rate if given, else fallback.
func (r Rate) or(fallback float64) float64 {
	if r.Set {
		return r.USD
	}
	return fallback
}

// Price is what a model's tokens cost, in USD per million tokens of each
// Tokens category. The optional rates fall back when not given: CachedInput
// and CacheWrite to Input, Reasoning to Output.
type Price struct {
	Input       float64
	Output      float64
	CachedInput Rate
	CacheWrite  Rate
	Reasoning   Rate
}

// Cost returns the USD cost of t at p. Negative counts count as 0.
func (p Price) Cost(t Tokens) float64 {
	sum := float64(max(t.Input, 0))*p.Input +
		float64(max(t.CachedInput, 0))*p.CachedInput.or(p.Input) +
		float64(max(t.CacheWrite, 0))*p.CacheWrite.or(p.Input) +
		float64(max(t.Output, 0))*p.Output +
		float64(max(t.Reasoning, 0))*p.Reasoning.or(p.Output)
	return sum / 1e6
}

// Validate reports the first rate of p that is negative, NaN or infinite,
// by its config name (input, output, cached_input, cache_write,
// reasoning).
func (p Price) Validate() error {
	rates := [...]struct {
		name string
		usd  float64
	}{
		{"input", p.Input},
		{"output", p.Output},
		{"cached_input", p.CachedInput.USD},
		{"cache_write", p.CacheWrite.USD},
		{"reasoning", p.Reasoning.USD},
	}
	for _, r := range rates {
		if math.IsNaN(r.usd) || math.IsInf(r.usd, 0) || r.usd < 0 {
			return fmt.Errorf("%s: %v USD per million tokens is not a price (want a finite number >= 0)", r.name, r.usd)
		}
	}
	return nil
}
