package proxy

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"switchyard.dev/services/proxy/internal/gwerror"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"switchyard.dev/shared/config"
	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/provider"
)

// readFields are the top-level request fields the proxy reads or rewrites.
// A body that spells one of them twice, or in another case, is refused: the
// proxy must authorise exactly the value the upstream acts on.
var readFields = []string{"model", "stream", "stream_options"}

// streamUsageEdit sets stream_options.include_usage (stream_options become
// {"include_usage":true} when absent or not an object); streamUsageField is
// the most it adds to a body.
var streamUsageEdit = jsonfield.EditMember("stream_options", "include_usage", []byte("true"))

const streamUsageField = `"stream_options":{"include_usage":true},`

// bodyError is a request body the proxy refuses before routing.
type bodyError struct {
	code string
	msg  string
}

// requestBody is the request's body, decoded when the caller compressed it
// (Content-Encoding gzip, deflate, br or zstd), never to more than limit
// bytes: the server's body limit counts the bytes as sent, and a few
// kilobytes of gzip can expand to gigabytes. The error is the
// caller's answer when it cannot be read: 413 past the limit, 415 for an
// encoding the gateway does not decode, 400 for a body that does not
// decode (the code's status, gwerror).
func requestBody(c *fiber.Ctx, limit int) ([]byte, *bodyError) {
	req := c.Request()
	ce := req.Header.ContentEncoding()
	if len(ce) == 0 || strings.EqualFold(string(ce), "identity") {
		return req.Body(), nil
	}
	body, err := req.BodyUncompressedWithLimit(limit)
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return nil, &bodyError{gwerror.RequestTooLarge,
			fmt.Sprintf("the request body is larger than the limit of %d bytes once decoded (Content-Encoding %s)", limit, ce)}
	case errors.Is(err, fasthttp.ErrContentEncodingUnsupported):
		return nil, &bodyError{gwerror.UnsupportedEncoding,
			fmt.Sprintf("Content-Encoding %q is not supported: send the body as is, or gzip, deflate, br or zstd", ce)}
	}
	return nil, &bodyError{gwerror.InvalidRequest,
		fmt.Sprintf("the request body does not decode as its Content-Encoding %s says", ce)}
}

// parsed is what routing needs from a request body.
type parsed struct {
	model string
	// stream: the caller asked for a stream (of an op that streams).
	stream bool
	// callerUsage: a stream whose caller asked for its usage
	// (stream_options.include_usage is true).
	callerUsage bool
}

// readBody reads what routing needs from a request body: the model,
// whether the caller asked for a stream, and its stream_options. The body
// must be a JSON object every parser reads the same way (no duplicate keys
// at any depth). One pass validates it, checks its keys and reads them all.
func readBody(body []byte, op provider.Op) (p parsed, berr *bodyError) {
	need := requiredField(op)
	keys := [...]string{"model", "stream", "stream_options", tokenLimits[0], tokenLimits[1], tokenLimits[2], need}
	n := len(keys)
	if need == "" {
		n-- // not a key named ""
	}
	v, err := jsonfield.Strict(body, readFields, keys[:n]...)
	if berr := bodyErrorOf(err); berr != nil {
		return parsed{}, berr
	}
	model, stream, options, required := v[0], v[1], v[2], v[6] // nil: absent
	var ok bool
	if model != nil {
		p.model, ok = jsonfield.StringValue(model)
	}
	if !ok || p.model == "" {
		return parsed{}, &bodyError{gwerror.MissingModel, "the request body must name a model"}
	}
	if berr := checkModelName(p.model); berr != nil {
		return parsed{}, berr
	}
	if berr := checkRequired(op, required, required != nil); berr != nil {
		return parsed{}, berr
	}
	for i, name := range tokenLimits {
		if berr := checkTokenLimit(name, v[3+i]); berr != nil {
			return parsed{}, berr
		}
	}
	if err := jsonfield.CheckUTF8(body); err != nil {
		return parsed{}, &bodyError{gwerror.InvalidRequest, "the request body's " + err.Error()}
	}
	if stream != nil {
		switch string(stream) {
		case "true":
			p.stream = op == provider.OpChat || op == provider.OpCompletions || op == provider.OpResponses
		case "false", "null":
		default:
			return parsed{}, &bodyError{gwerror.InvalidRequest, "`stream` must be a boolean"}
		}
	}
	if p.stream && options != nil {
		p.callerUsage = jsonfield.Bool(options, "include_usage")
	}
	return p, nil
}

// tokenLimits are the request fields that bound a request's output, in
// tokens.
var tokenLimits = [...]string{"max_tokens", "max_completion_tokens", "max_output_tokens"}

// checkTokenLimit refuses a token limit v (of the field name; nil: absent)
// that is a number no upstream reads as the caller meant: beyond a 64-bit
// integer, or beyond a float's range (1e400: encoding/json refuses it,
// other parsers read infinity). Values of another type are the
// upstream's to judge. A plain integer of up to 18 digits, what callers
// send, is passed without parsing.
func checkTokenLimit(name string, v []byte) *bodyError {
	if len(v) == 0 || v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return nil
	}
	if len(v) <= 18 && !slices.ContainsFunc(v, func(c byte) bool { return c < '0' || c > '9' }) {
		return nil
	}
	if f, err := strconv.ParseFloat(string(v), 64); err == nil && math.Abs(f) < math.MaxInt64 {
		return nil
	}
	return &bodyError{gwerror.InvalidRequest, fmt.Sprintf("`%s` must be an integer, not the number %.40s", name, v)}
}

// maxModelName is the longest model name a request may give, in bytes.
// Real ids are far shorter (OpenRouter's and Hugging Face's
// "<org>/<model>:<variant>" ids run to about 100 bytes); a caller's name
// reaches hold ids (KV keys: each byte but letters, digits and '-' takes
// three), log lines, errors and debug bundles, so it is bounded long
// before any of those could be harmed by it.
const maxModelName = config.MaxModelName

// checkModelName refuses a model name routing must not see: not UTF-8, or
// longer than maxModelName.
func checkModelName(model string) *bodyError {
	if !utf8.ValidString(model) {
		return &bodyError{gwerror.MissingModel, "the model name is not valid UTF-8"}
	}
	if len(model) > maxModelName {
		return &bodyError{gwerror.InvalidRequest, fmt.Sprintf("the model name is %d bytes long; at most %d are allowed", len(model), maxModelName)}
	}
	return nil
}

// bodyErrorOf is the caller's error for what jsonfield.Strict found: a body
// that is not valid JSON, or one that parsers read differently (a key twice
// in an object, two top-level keys, or a key and one the proxy reads, that
// differ only in case).
func bodyErrorOf(err error) *bodyError {
	if err == nil {
		return nil
	}
	if de := (*jsonfield.DuplicateKeyError)(nil); errors.As(err, &de) {
		return &bodyError{gwerror.DuplicateKey, de.Error()}
	}
	if errors.Is(err, jsonfield.ErrKeyNotUTF8) {
		return &bodyError{gwerror.InvalidJSON, "the request body names a key that is not valid UTF-8"}
	}
	return &bodyError{gwerror.InvalidJSON, "the request body is not valid JSON"} // jsonfield.ErrInvalid
}

// requiredField is the top-level field a request for op must carry ("":
// none is checked).
func requiredField(op provider.Op) string {
	switch op {
	case provider.OpChat, provider.OpCountTokens:
		return "messages"
	case provider.OpEmbeddings, provider.OpModerations, provider.OpSpeech, provider.OpResponses:
		return "input"
	case provider.OpCompletions, provider.OpImages:
		return "prompt"
	}
	return ""
}

// checkRequired checks the value v (found: present) of op's required
// field.
func checkRequired(op provider.Op, v []byte, found bool) *bodyError {
	switch op {
	case provider.OpChat, provider.OpCountTokens:
		if !found || len(v) == 0 || v[0] != '[' {
			return &bodyError{gwerror.InvalidRequest, "`messages` must be an array of messages"}
		}
	case provider.OpEmbeddings, provider.OpModerations:
		if !found || string(v) == "null" {
			return &bodyError{gwerror.InvalidRequest, "`input` must be a string, an array of strings or an array of token ids"}
		}
	case provider.OpCompletions:
		if !found || string(v) == "null" {
			return &bodyError{gwerror.InvalidRequest, "`prompt` must be a string, an array of strings or an array of token ids"}
		}
	case provider.OpImages:
		if !found || len(v) == 0 || v[0] != '"' {
			return &bodyError{gwerror.InvalidRequest, "`prompt` must be a string"}
		}
	case provider.OpSpeech:
		if !found || len(v) == 0 || v[0] != '"' {
			return &bodyError{gwerror.InvalidRequest, "`input` must be the text to speak"}
		}
	case provider.OpResponses:
		// input is optional: a prompt template, or a continuation
		// (previous_response_id, conversation), may carry the turn.
		if found && string(v) != "null" && (len(v) == 0 || (v[0] != '"' && v[0] != '[')) {
			return &bodyError{gwerror.InvalidRequest, "`input` must be a string or an array of input items"}
		}
	}
	return nil
}
