package usage

// defaults are public list prices in USD per million tokens (standard tier,
// no batch or priority discounts), priced by model alone. They are a
// starting point that goes stale: operators override them in config
// (prices), which NewTable puts over these. Sources:
//
//   - OpenAI: https://platform.openai.com/docs/pricing (input, cached
//     input, output). OpenAI does not charge cache writes and reports
//     reasoning tokens inside completion tokens at the output rate, so
//     neither rate is given.
//   - Anthropic: https://docs.anthropic.com/en/docs/about-claude/pricing
//     (base input, 5-minute cache writes, cache hits, output). One-hour
//     cache writes (2x input) and Sonnet 4/4.5's long-context rates
//     (over 200K input tokens) are not modelled.
//   - Google: https://ai.google.dev/gemini-api/docs/pricing (Gemini
//     Developer API, paid tier, text input; context caching as the cached
//     rate). Gemini 2.5 Pro's rates for prompts over 200K tokens and
//     cache storage per hour are not modelled; thinking tokens cost the
//     output rate.
//
// A dated snapshot is priced by its family ("gpt-4o-2024-08-06" as
// "gpt-4o") unless listed: gpt-4o-2024-05-13 kept its launch price.
var defaults = [...]Entry{
	// OpenAI.
	{Model: "gpt-4o", Price: Price{Input: 2.50, Output: 10.00, CachedInput: Given(1.25)}},
	{Model: "gpt-4o-2024-05-13", Price: Price{Input: 5.00, Output: 15.00}},
	{Model: "gpt-4o-mini", Price: Price{Input: 0.15, Output: 0.60, CachedInput: Given(0.075)}},
	{Model: "gpt-4.1", Price: Price{Input: 2.00, Output: 8.00, CachedInput: Given(0.50)}},
	{Model: "gpt-4.1-mini", Price: Price{Input: 0.40, Output: 1.60, CachedInput: Given(0.10)}},
	{Model: "gpt-4.1-nano", Price: Price{Input: 0.10, Output: 0.40, CachedInput: Given(0.025)}},
	{Model: "o1", Price: Price{Input: 15.00, Output: 60.00, CachedInput: Given(7.50)}},
	{Model: "o3", Price: Price{Input: 2.00, Output: 8.00, CachedInput: Given(0.50)}},
	{Model: "o4-mini", Price: Price{Input: 1.10, Output: 4.40, CachedInput: Given(0.275)}},
	{Model: "gpt-5", Price: Price{Input: 1.25, Output: 10.00, CachedInput: Given(0.125)}},
	{Model: "gpt-5-mini", Price: Price{Input: 0.25, Output: 2.00, CachedInput: Given(0.025)}},
	{Model: "text-embedding-3-small", Price: Price{Input: 0.02}},
	{Model: "text-embedding-3-large", Price: Price{Input: 0.13}},

	// Anthropic, with the aliases the API accepts besides dated IDs.
	{Model: "claude-opus-4", Price: anthropic(15.00, 75.00)},
	{Model: "claude-opus-4-0", Price: anthropic(15.00, 75.00)},
	{Model: "claude-opus-4-1", Price: anthropic(15.00, 75.00)},
	{Model: "claude-sonnet-4", Price: anthropic(3.00, 15.00)},
	{Model: "claude-sonnet-4-0", Price: anthropic(3.00, 15.00)},
	{Model: "claude-sonnet-4-5", Price: anthropic(3.00, 15.00)},
	{Model: "claude-3-7-sonnet", Price: anthropic(3.00, 15.00)},
	{Model: "claude-3-7-sonnet-latest", Price: anthropic(3.00, 15.00)},
	{Model: "claude-3-5-haiku", Price: anthropic(0.80, 4.00)},
	{Model: "claude-3-5-haiku-latest", Price: anthropic(0.80, 4.00)},
	{Model: "claude-haiku-4-5", Price: anthropic(1.00, 5.00)},

	// Google.
	{Model: "gemini-2.5-pro", Price: Price{Input: 1.25, Output: 10.00, CachedInput: Given(0.125)}},
	{Model: "gemini-2.5-flash", Price: Price{Input: 0.30, Output: 2.50, CachedInput: Given(0.03)}},
	{Model: "gemini-2.0-flash", Price: Price{Input: 0.10, Output: 0.40, CachedInput: Given(0.025)}},
	{Model: "gemini-2.0-flash-001", Price: Price{Input: 0.10, Output: 0.40, CachedInput: Given(0.025)}},
}

// anthropic returns an Anthropic price: cache hits cost a tenth of the
// input rate and 5-minute cache writes 1.25 times it.
func anthropic(input, output float64) Price {
	return Price{Input: input, Output: output, CachedInput: Given(input / 10), CacheWrite: Given(input * 1.25)}
}

// Defaults returns the bundled list prices (a new slice each call), for
// NewTable(Defaults(), overrides).
func Defaults() []Entry { return append([]Entry(nil), defaults[:]...) }
