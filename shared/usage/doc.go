// Package usage holds the pure building blocks of per-request metering: who
// called (ClientType), what the tokens cost (Table), and the record the
// proxy publishes once per request (Record, Subject). It does no I/O, keeps
// no globals that change, and imports only the standard library.
//
// # Client type
//
// ClientType(userAgent) names the calling tool or SDK with one of a closed
// set of lower-case identifiers (ClientTypes lists them; ClientUnknown when
// nothing matches). The rules are one ordered table in clienttype.go:
// coding tools first, then the OpenAI and Anthropic SDKs, then curl, so a
// tool that also carries an SDK's product token is named as the tool. It
// reads the User-Agent's product tokens (name/version), skips comments in
// parentheses, ignores case, and does not allocate.
//
// # Prices
//
// Tokens counts a request's tokens in disjoint categories (see its doc for
// how OpenAI's and Anthropic's usage objects map onto it: OpenAIUsage,
// AnthropicUsage). Price gives USD per million tokens per category; the
// optional rates (cache read, cache write, reasoning) fall back to the
// input or output rate when not given, and a Rate given as 0 is free.
// NewTable(Defaults(), overrides) builds an immutable Table, safe for
// concurrent readers; Lookup and Cost search it by provider name, then by
// provider type, then by model alone, and within each by exact model, then
// by the model with a trailing date removed ("gpt-4o-2024-08-06" ->
// "gpt-4o"). A model without a price is unknown (known == false), never
// free. Operators override the bundled list prices in config (prices); to
// change prices at run time, build a new Table and swap the pointer.
//
// # Record
//
// Record is the usage record, schema version SchemaVersion, published on
// Subject(provider, clientID) = switchyard.usage.<provider>.<client>. Its
// cost_usd is null when the price is unknown.
package usage
