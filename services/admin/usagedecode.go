package admin

import (
	"encoding/json"
	"strconv"
	"strings"

	"switchyard.dev/shared/usage"
)

// decodeRecord sets *r to what json.Unmarshal(data, r) makes of data, from
// a zero Record. A report reads up to millions of records, and
// encoding/json takes some 20 µs for one on a loaded 2-core machine: the
// form the proxies write (json.Marshal of a Record: exact field names,
// ASCII strings without escapes) is read here directly, about five times
// faster, and anything else (an escape, a non-ASCII byte, a field name in
// another case, a number where an integer is due...) is left to
// json.Unmarshal, so the result is the same. FuzzDecodeRecord holds the
// two to that.
func decodeRecord(data []byte, r *usage.Record) error {
	*r = usage.Record{}
	if decodeRecordFast(data, r) {
		return nil
	}
	*r = usage.Record{}
	return json.Unmarshal(data, r)
}

// recordFields are the JSON names of Record and Tokens: a field name that
// matches one of them only when case is ignored sends the record to
// json.Unmarshal (which matches names that way).
var recordFields = []string{"v", "request_id", "at", "client_id", "plan", "client_type", "endpoint",
	"model_requested", "provider", "provider_type", "model", "key_id", "attempts", "status", "class",
	"tokens", "tokens_estimated", "cost_usd", "latency_ms", "ttft_ms", "stream", "stream_completed",
	"cancelled", "failed_attempts", "guardrail", "guardrail_name", "guardrail_stage", "cache", "cache_saved_usd", "input", "output", "cached_input", "cache_write", "reasoning"}

// lexer reads JSON in the narrow form decodeRecordFast accepts; every
// method reports false for anything else.
type lexer struct {
	b []byte
	i int
}

func (l *lexer) ws() {
	for l.i < len(l.b) {
		switch l.b[l.i] {
		case ' ', '\t', '\n', '\r':
			l.i++
		default:
			return
		}
	}
}

// next skips white space and consumes c if it comes next.
func (l *lexer) next(c byte) bool {
	l.ws()
	if l.i < len(l.b) && l.b[l.i] == c {
		l.i++
		return true
	}
	return false
}

// lit consumes the literal s (true, false, null).
func (l *lexer) lit(s string) bool {
	l.ws()
	if len(l.b)-l.i >= len(s) && string(l.b[l.i:l.i+len(s)]) == s {
		l.i += len(s)
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes and returns its
// content (in the input: copy what is kept).
func (l *lexer) str() ([]byte, bool) {
	l.ws()
	if l.i >= len(l.b) || l.b[l.i] != '"' {
		return nil, false
	}
	for j := l.i + 1; j < len(l.b); j++ {
		switch c := l.b[j]; {
		case c == '"':
			s := l.b[l.i+1 : j]
			l.i = j + 1
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

// number reads a number as JSON's grammar has it; integer reports that it
// has neither fraction nor exponent.
func (l *lexer) number() (tok []byte, integer, ok bool) {
	l.ws()
	b, i := l.b, l.i
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return nil, false, false
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return nil, false, false
		}
		integer = false
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return nil, false, false
		}
		integer = false
	}
	tok = b[l.i:i]
	l.i = i
	return tok, integer, true
}

// null consumes null: the field keeps its value, as json.Unmarshal does.
func (l *lexer) null() bool { return l.lit("null") }

func (l *lexer) stringField(dst *string) bool {
	if l.null() {
		return true
	}
	s, ok := l.str()
	*dst = string(s)
	return ok
}

func (l *lexer) intField(dst *int64, bits int) bool {
	if l.null() {
		return true
	}
	tok, integer, ok := l.number()
	if !ok || !integer {
		return false
	}
	n, err := strconv.ParseInt(string(tok), 10, bits)
	*dst = n
	return err == nil
}

func (l *lexer) intOf(dst *int) bool {
	n := int64(*dst)
	ok := l.intField(&n, strconv.IntSize)
	*dst = int(n)
	return ok
}

func (l *lexer) floatField(dst *float64) bool {
	if l.null() {
		return true
	}
	tok, _, ok := l.number()
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	*dst = f
	return err == nil
}

func (l *lexer) boolField(dst *bool) bool {
	switch {
	case l.lit("true"):
		*dst = true
	case l.lit("false"):
		*dst = false
	default:
		return l.null()
	}
	return true
}

// skip consumes any value of the narrow form, nested at most 32 deep.
func (l *lexer) skip(depth int) bool {
	l.ws()
	if l.i >= len(l.b) || depth > 32 {
		return false
	}
	switch l.b[l.i] {
	case '"':
		_, ok := l.str()
		return ok
	case 't':
		return l.lit("true")
	case 'f':
		return l.lit("false")
	case 'n':
		return l.null()
	case '{', '[':
		closing := byte('}')
		if l.b[l.i] == '[' {
			closing = ']'
		}
		l.i++
		if l.next(closing) {
			return true
		}
		for {
			if closing == '}' {
				if _, ok := l.str(); !ok || !l.next(':') {
					return false
				}
			}
			if !l.skip(depth + 1) {
				return false
			}
			if l.next(',') {
				continue
			}
			return l.next(closing)
		}
	}
	_, _, ok := l.number()
	return ok
}

// object reads an object's members, calling field for each name.
func (l *lexer) object(field func(name []byte) bool) bool {
	if !l.next('{') {
		return false
	}
	if l.next('}') {
		return true
	}
	for {
		name, ok := l.str()
		if !ok || !l.next(':') || !field(name) {
			return false
		}
		if l.next(',') {
			continue
		}
		return l.next('}')
	}
}

// other skips the value of a field the report does not know, unless its
// name is a known one in another case.
func (l *lexer) other(name []byte) bool {
	for _, f := range recordFields {
		if strings.EqualFold(string(name), f) {
			return false
		}
	}
	return l.skip(0)
}

func (l *lexer) tokens(t *usage.Tokens) bool {
	if l.null() {
		return true
	}
	return l.object(func(name []byte) bool {
		switch string(name) {
		case "input":
			return l.intField(&t.Input, 64)
		case "output":
			return l.intField(&t.Output, 64)
		case "cached_input":
			return l.intField(&t.CachedInput, 64)
		case "cache_write":
			return l.intField(&t.CacheWrite, 64)
		case "reasoning":
			return l.intField(&t.Reasoning, 64)
		}
		return l.other(name)
	})
}

func (l *lexer) at(r *usage.Record) bool {
	if l.null() {
		return true
	}
	l.ws()
	start := l.i
	if _, ok := l.str(); !ok {
		return false
	}
	return r.At.UnmarshalJSON(l.b[start:l.i]) == nil
}

func (l *lexer) cost(r *usage.Record) bool { return l.optFloat(&r.CostUSD) }

// optFloat reads a number or null into *dst (nil for null).
func (l *lexer) optFloat(dst **float64) bool {
	if l.null() {
		*dst = nil
		return true
	}
	var f float64
	if !l.floatField(&f) {
		return false
	}
	*dst = &f
	return true
}

// failedAttempts reads failed_attempts: null, or an array of objects (a
// second failed_attempts member goes to json.Unmarshal).
func (l *lexer) failedAttempts(r *usage.Record) bool {
	if r.FailedAttempts != nil {
		return false
	}
	if l.null() {
		return true
	}
	if !l.next('[') {
		return false
	}
	r.FailedAttempts = []usage.FailedAttempt{}
	if l.next(']') {
		return true
	}
	for {
		var a usage.FailedAttempt
		ok := l.null() || l.object(func(name []byte) bool {
			switch string(name) {
			case "provider":
				return l.stringField(&a.Provider)
			case "model":
				return l.stringField(&a.Model)
			case "key_id":
				return l.stringField(&a.KeyID)
			case "class":
				return l.stringField(&a.Class)
			case "cancelled":
				return l.boolField(&a.Cancelled)
			}
			return l.other(name)
		})
		if !ok {
			return false
		}
		r.FailedAttempts = append(r.FailedAttempts, a)
		if l.next(',') {
			continue
		}
		return l.next(']')
	}
}

// decodeRecordFast decodes data into the zero *r when data has the narrow
// form, and reports whether it had.
func decodeRecordFast(data []byte, r *usage.Record) bool {
	l := &lexer{b: data}
	ok := l.object(func(name []byte) bool {
		switch string(name) {
		case "v":
			return l.intOf(&r.V)
		case "request_id":
			return l.stringField(&r.RequestID)
		case "at":
			return l.at(r)
		case "client_id":
			return l.stringField(&r.ClientID)
		case "plan":
			return l.stringField(&r.Plan)
		case "client_type":
			return l.stringField(&r.ClientType)
		case "endpoint":
			return l.stringField(&r.Endpoint)
		case "model_requested":
			return l.stringField(&r.ModelRequested)
		case "provider":
			return l.stringField(&r.Provider)
		case "provider_type":
			return l.stringField(&r.ProviderType)
		case "model":
			return l.stringField(&r.Model)
		case "key_id":
			return l.stringField(&r.KeyID)
		case "attempts":
			return l.intOf(&r.Attempts)
		case "status":
			return l.intOf(&r.Status)
		case "class":
			return l.stringField(&r.Class)
		case "tokens":
			return l.tokens(&r.Tokens)
		case "tokens_estimated":
			return l.boolField(&r.TokensEstimated)
		case "cost_usd":
			return l.cost(r)
		case "latency_ms":
			return l.floatField(&r.LatencyMS)
		case "ttft_ms":
			return l.floatField(&r.TTFTMS)
		case "stream":
			return l.boolField(&r.Stream)
		case "stream_completed":
			return l.boolField(&r.StreamCompleted)
		case "cancelled":
			return l.boolField(&r.Cancelled)
		case "failed_attempts":
			return l.failedAttempts(r)
		case "guardrail":
			return l.stringField(&r.Guardrail)
		case "guardrail_name":
			return l.stringField(&r.GuardrailName)
		case "guardrail_stage":
			return l.stringField(&r.GuardrailStage)
		case "cache":
			return l.stringField(&r.Cache)
		case "cache_saved_usd":
			return l.optFloat(&r.CacheSavedUSD)
		}
		return l.other(name)
	})
	l.ws()
	return ok && l.i == len(l.b)
}
