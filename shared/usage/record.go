package usage

import "time"

// SchemaVersion is the version of Record's JSON form, its "v". A change
// that removes or redefines a field raises it; adding a field does not.
const SchemaVersion = 1

// SubjectPrefix is the first two tokens of every usage subject (Subject);
// the stream that keeps the records captures SubjectPrefix + ".>".
const SubjectPrefix = "switchyard.usage"

// Record is what one request used, published once when the request ends.
// Every field is always present in its JSON form; cost_usd is null when the
// price is unknown.
type Record struct {
	// V is SchemaVersion.
	V int `json:"v"`
	// RequestID is the gateway's id of the request.
	RequestID string `json:"request_id"`
	// At is when the request ended.
	At time.Time `json:"at"`
	// ClientID is the id of the gateway client key that called (its name
	// in config, never the secret); empty for an unauthenticated request.
	ClientID string `json:"client_id"`
	// Plan is the client's plan, empty when it has none.
	Plan string `json:"plan"`
	// ClientType is ClientType of the caller's User-Agent.
	ClientType string `json:"client_type"`
	// Endpoint is the API path the caller used (/v1/chat/completions,
	// /v1/messages, ...).
	Endpoint string `json:"endpoint"`
	// ModelRequested is the model the caller asked for.
	ModelRequested string `json:"model_requested"`
	// Provider and ProviderType name the provider that served the last
	// attempt; empty when no attempt was made.
	Provider     string `json:"provider"`
	ProviderType string `json:"provider_type"`
	// Model is the model the provider served.
	Model string `json:"model"`
	// KeyID is the id of the provider key used (never the key).
	KeyID string `json:"key_id"`
	// Attempts is the number of upstream attempts made.
	Attempts int `json:"attempts"`
	// Status is the HTTP status returned to the caller.
	Status int `json:"status"`
	// Class is the failure class (failure.Class's name) of the request,
	// empty on success.
	Class string `json:"class"`
	// Tokens is what the provider reported, in Tokens' disjoint
	// categories.
	Tokens Tokens `json:"tokens"`
	// TokensEstimated is true when Tokens was estimated by the gateway
	// (the provider reported no usage, as a stream cut short).
	TokensEstimated bool `json:"tokens_estimated"`
	// CostUSD is Table.Cost of Tokens; nil (null) when the price is
	// unknown, never 0 for "unknown":
	//
	//	if usd, ok := prices.Cost(provider, providerType, model, tokens); ok {
	//		rec.CostUSD = &usd
	//	}
	CostUSD *float64 `json:"cost_usd"`
	// LatencyMS is the request's duration in milliseconds, until its last
	// byte.
	LatencyMS float64 `json:"latency_ms"`
	// TTFTMS is the time to the first streamed token in milliseconds; 0
	// when not streamed or nothing came.
	TTFTMS float64 `json:"ttft_ms"`
	// Stream is true for a streamed response.
	Stream bool `json:"stream"`
	// StreamCompleted is true when a stream reached its end event.
	StreamCompleted bool `json:"stream_completed"`
	// Cancelled is true when the caller hung up before the end.
	Cancelled bool `json:"cancelled"`
}

// Subject returns the subject a usage record is published on:
// switchyard.usage.<provider>.<client>. An empty name becomes "_"; letters,
// digits, '_' and '-' stay, and every other byte becomes "=XX" (upper-case
// hex), as hold.EncodeToken writes it, so that hold.DecodeToken reverses a
// token other than "_". A name that is exactly "_" is written "=5F" to stay
// apart from the empty one. Provider names and client ids that config
// accepts ([A-Za-z0-9_-]) are thus written as themselves, as in the event
// subjects (bus.EventSubject).
func Subject(provider, clientID string) string {
	return SubjectPrefix + "." + subjectToken(provider) + "." + subjectToken(clientID)
}

// subjectToken writes one subject token of Subject.
func subjectToken(s string) string {
	switch s {
	case "":
		return "_"
	case "_":
		return "=5F"
	}
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		plain = tokenByte(s[i])
	}
	if plain {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); i++ {
		if c := s[i]; tokenByte(c) {
			b = append(b, c)
		} else {
			b = append(b, '=', hex[c>>4], hex[c&0xf])
		}
	}
	return string(b)
}

// tokenByte reports whether c stands for itself in a subject token.
func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
