package usage

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

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
	// FailedAttempts are the request's attempts that failed, in order,
	// each by its target: also those a failover hid behind a success
	// (which Provider, Model and KeyID, naming what served, do not show).
	// Attempts less their number is the attempts that were answered (0 or
	// 1). null when none failed, and in records written before the field.
	FailedAttempts []FailedAttempt `json:"failed_attempts"`
	// Guardrail is the strongest verdict the request's guardrails reached
	// on what it sent or on its answer: block, redact or warn (omitted
	// when none acted: every guardrail passed, or none ran);
	// GuardrailName names the guardrail that reached it and
	// GuardrailStage its stage (input or output). Never the matched text.
	Guardrail      string `json:"guardrail,omitempty"`
	GuardrailName  string `json:"guardrail_name,omitempty"`
	GuardrailStage string `json:"guardrail_stage,omitempty"`
	// Cache is what the response cache did for a request of a route with
	// a cache policy: hit (answered from the cache, no upstream call),
	// miss (answered upstream, stored) or bypass (omitted without a
	// policy). CacheSavedUSD is what a hit saved: the cost of the answer
	// it replayed (omitted when unknown or not a hit).
	Cache         string   `json:"cache,omitempty"`
	CacheSavedUSD *float64 `json:"cache_saved_usd,omitempty"`
}

// FailedAttempt is one failed upstream attempt of a request.
type FailedAttempt struct {
	Provider string `json:"provider"`
	// Model is the model the provider was asked for (its name upstream).
	Model string `json:"model"`
	// KeyID is the id of the provider key (never the key).
	KeyID string `json:"key_id"`
	// Class is the failure class (failure.Class's name).
	Class string `json:"class"`
	// Cancelled is true when the attempt ended because the caller left,
	// its deadline passed or the gateway stopped: not the target's fault.
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

// AppendJSON appends r's JSON form to dst: the same document as
// encoding/json writes for Record (field order and names, null for an
// unknown cost, RFC 3339 time with nanoseconds), without reflection, for
// the publisher that encodes one record per request.
func (r *Record) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(r.V), 10)
	dst = appendStringField(dst, "request_id", r.RequestID)
	dst = append(dst, `,"at":"`...)
	dst = r.At.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, '"')
	dst = appendStringField(dst, "client_id", r.ClientID)
	dst = appendStringField(dst, "plan", r.Plan)
	dst = appendStringField(dst, "client_type", r.ClientType)
	dst = appendStringField(dst, "endpoint", r.Endpoint)
	dst = appendStringField(dst, "model_requested", r.ModelRequested)
	dst = appendStringField(dst, "provider", r.Provider)
	dst = appendStringField(dst, "provider_type", r.ProviderType)
	dst = appendStringField(dst, "model", r.Model)
	dst = appendStringField(dst, "key_id", r.KeyID)
	dst = append(dst, `,"attempts":`...)
	dst = strconv.AppendInt(dst, int64(r.Attempts), 10)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = appendStringField(dst, "class", r.Class)
	dst = append(dst, `,"tokens":{"input":`...)
	dst = strconv.AppendInt(dst, r.Tokens.Input, 10)
	dst = append(dst, `,"output":`...)
	dst = strconv.AppendInt(dst, r.Tokens.Output, 10)
	dst = append(dst, `,"cached_input":`...)
	dst = strconv.AppendInt(dst, r.Tokens.CachedInput, 10)
	dst = append(dst, `,"cache_write":`...)
	dst = strconv.AppendInt(dst, r.Tokens.CacheWrite, 10)
	dst = append(dst, `,"reasoning":`...)
	dst = strconv.AppendInt(dst, r.Tokens.Reasoning, 10)
	dst = append(dst, `},"tokens_estimated":`...)
	dst = strconv.AppendBool(dst, r.TokensEstimated)
	dst = append(dst, `,"cost_usd":`...)
	if r.CostUSD == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendFloat(dst, *r.CostUSD)
	}
	dst = append(dst, `,"latency_ms":`...)
	dst = appendFloat(dst, r.LatencyMS)
	dst = append(dst, `,"ttft_ms":`...)
	dst = appendFloat(dst, r.TTFTMS)
	dst = append(dst, `,"stream":`...)
	dst = strconv.AppendBool(dst, r.Stream)
	dst = append(dst, `,"stream_completed":`...)
	dst = strconv.AppendBool(dst, r.StreamCompleted)
	dst = append(dst, `,"cancelled":`...)
	dst = strconv.AppendBool(dst, r.Cancelled)
	dst = append(dst, `,"failed_attempts":`...)
	if r.FailedAttempts == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range r.FailedAttempts {
			a := &r.FailedAttempts[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"provider":`...)
			dst = appendJSONString(dst, a.Provider)
			dst = appendStringField(dst, "model", a.Model)
			dst = appendStringField(dst, "key_id", a.KeyID)
			dst = appendStringField(dst, "class", a.Class)
			dst = append(dst, `,"cancelled":`...)
			dst = strconv.AppendBool(dst, a.Cancelled)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if r.Guardrail != "" {
		dst = appendStringField(dst, "guardrail", r.Guardrail)
	}
	if r.GuardrailName != "" {
		dst = appendStringField(dst, "guardrail_name", r.GuardrailName)
	}
	if r.GuardrailStage != "" {
		dst = appendStringField(dst, "guardrail_stage", r.GuardrailStage)
	}
	if r.Cache != "" {
		dst = appendStringField(dst, "cache", r.Cache)
	}
	if r.CacheSavedUSD != nil {
		dst = append(dst, `,"cache_saved_usd":`...)
		dst = appendFloat(dst, *r.CacheSavedUSD)
	}
	return append(dst, '}')
}

func appendStringField(dst []byte, name, v string) []byte {
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	return appendJSONString(dst, v)
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced (as encoding/json
// does), everything else as it is.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// appendFloat appends f as encoding/json writes a float64.
func appendFloat(dst []byte, f float64) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(dst, '0') // encoding/json refuses these; a record never holds one
	}
	abs := math.Abs(f)
	fmt := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		fmt = 'e'
	}
	dst = strconv.AppendFloat(dst, f, fmt, -1, 64)
	if fmt == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}
