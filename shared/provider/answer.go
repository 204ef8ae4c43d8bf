package provider

import (
	"bytes"
	"fmt"

	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/usage"
)

// Answer is what a plain (not streamed) 200 answer tells the proxy, read by
// CheckAnswer in one walk of its top-level fields.
type Answer struct {
	// ErrorStatus is not 0 when the answer is an error in a 200 (as
	// ErrorIn200 reports it): the status it carries.
	ErrorStatus int
	// Invalid is not nil when the body is not the operation's response: a
	// JSON object carrying the field every such response has (OpenAI chat
	// "choices", Anthropic messages "content", embeddings "data"). An
	// upstream that answers 200 with an HTML page, plain text or cut JSON
	// has failed, whatever its status says (ErrInvalidResponse).
	Invalid error
	// NoChoices: an OpenAI-format chat completion with no choices at all,
	// an error in disguise.
	NoChoices bool
	// Tokens is the usage the answer reports (in usageFormat's shape);
	// TokensOK is false when it reports none.
	Tokens   usage.Tokens
	TokensOK bool
}

// CheckAnswer reads a 200 answer to op from a provider of format f, whose
// usage is in usageFormat, with one pass that validates it and reads its
// top-level fields: an error in a 200 (as ErrorIn200 reads it), then whether it
// is the operation's response, then empty choices (OpenAI-format chat),
// then its usage, decided in that order; each later field is zero once an
// earlier one fails the answer. A transcript
// (OpTranscriptions, JSON or text) is checked for an error in a 200 only.
func CheckAnswer(f Format, op Op, usageFormat Format, body []byte) (ans Answer) {
	b := bytes.TrimLeft(body, " \t\r\n")
	field := responseField(f, op)
	// One pass validates b and reads the five fields (field may be one of
	// the others); Lookup reads what it can of a body that is not valid.
	v, valid := jsonfield.ValidLookup(b, "error", "choices", "id", "usage", field)
	if !valid {
		v = jsonfield.Lookup(b, "error", "choices", "id", "usage", field)
	}
	errV, choicesV, usageV := v[0], v[1], v[3]
	hasErr, hasChoices, hasID, hasUse, hasField := errV != nil, choicesV != nil, v[2] != nil, usageV != nil, v[4] != nil

	// ErrorIn200: an error member, unless a real completion carries it.
	if hasErr && len(errV) > 0 && errV[0] != 'n' && !(hasChoices && hasID) {
		ans.ErrorStatus = 502
		if errV[0] == '{' {
			if c, _, _, ok := jsonfield.Find(errV, "code"); ok {
				if n := atoi(c); n >= 400 && n <= 599 {
					ans.ErrorStatus = n
				}
			}
		}
		return ans
	}
	if op == OpTranscriptions {
		return ans
	}
	// The operation's response.
	switch {
	case len(b) == 0:
		ans.Invalid = fmt.Errorf("%w: empty body", ErrInvalidResponse)
		return ans
	case b[0] != '{' || !valid:
		ans.Invalid = fmt.Errorf("%w: not a JSON object (%q...)", ErrInvalidResponse, clipBytes(b, 32))
		return ans
	case !hasField:
		ans.Invalid = fmt.Errorf("%w: no %q field", ErrInvalidResponse, field)
		return ans
	}
	// Empty choices.
	if op == OpChat && f == FormatOpenAI && hasChoices &&
		len(bytes.TrimSpace(bytes.Trim(bytes.TrimSpace(choicesV), "[]"))) == 0 {
		ans.NoChoices = true
		return ans
	}
	// Usage.
	if hasUse && len(usageV) > 0 && usageV[0] == '{' {
		ans.Tokens, ans.TokensOK = usageObject(usageFormat, usageV, usage.Tokens{})
	}
	return ans
}
