package proxy

import (
	"errors"
	"unicode/utf8"

	"switchyard.dev/shared/jsonfield"
	"switchyard.dev/shared/provider"
)

// readFields are the top-level request fields the proxy reads or rewrites.
// A body that spells one of them twice, or in another case, is refused: the
// proxy must authorise exactly the value the upstream acts on.
var readFields = []string{"model", "stream", "stream_options"}

// bodyError is a request body the proxy refuses before routing.
type bodyError struct {
	code string
	msg  string
}

// parseBody reads what routing needs from a request body: the model and,
// for chat, whether the caller asked for a stream. The body must be a JSON
// object every parser reads the same way (no duplicate keys at any depth).
func parseBody(body []byte, op provider.Op) (model string, stream bool, berr *bodyError) {
	if !jsonfield.Valid(body) {
		return "", false, &bodyError{codeInvalidJSON, "the request body is not valid JSON"}
	}
	if err := jsonfield.CheckKeys(body, readFields...); err != nil {
		var de *jsonfield.DuplicateKeyError
		if errors.As(err, &de) {
			return "", false, &bodyError{codeDuplicateKey, de.Error()}
		}
		return "", false, &bodyError{codeInvalidJSON, err.Error()}
	}
	model, ok := jsonfield.String(body, "model")
	if !ok || model == "" {
		return "", false, &bodyError{codeMissingModel, "the request body must name a model"}
	}
	if !utf8.ValidString(model) {
		return "", false, &bodyError{codeMissingModel, "the model name is not valid UTF-8"}
	}
	switch op {
	case provider.OpChat:
		if v, _, _, found := jsonfield.Find(body, "messages"); !found || len(v) == 0 || v[0] != '[' {
			return "", false, &bodyError{codeInvalidRequest, "`messages` must be an array of messages"}
		}
	case provider.OpEmbeddings, provider.OpModerations:
		if v, _, _, found := jsonfield.Find(body, "input"); !found || string(v) == "null" {
			return "", false, &bodyError{codeInvalidRequest, "`input` must be a string, an array of strings or an array of token ids"}
		}
	case provider.OpCompletions:
		if v, _, _, found := jsonfield.Find(body, "prompt"); !found || string(v) == "null" {
			return "", false, &bodyError{codeInvalidRequest, "`prompt` must be a string, an array of strings or an array of token ids"}
		}
	case provider.OpImages:
		if v, _, _, found := jsonfield.Find(body, "prompt"); !found || len(v) == 0 || v[0] != '"' {
			return "", false, &bodyError{codeInvalidRequest, "`prompt` must be a string"}
		}
	case provider.OpSpeech:
		if v, _, _, found := jsonfield.Find(body, "input"); !found || len(v) == 0 || v[0] != '"' {
			return "", false, &bodyError{codeInvalidRequest, "`input` must be the text to speak"}
		}
	case provider.OpResponses:
		if v, _, _, found := jsonfield.Find(body, "input"); !found || len(v) == 0 || (v[0] != '"' && v[0] != '[') {
			return "", false, &bodyError{codeInvalidRequest, "`input` must be a string or an array of input items"}
		}
	case provider.OpCountTokens:
		if v, _, _, found := jsonfield.Find(body, "messages"); !found || len(v) == 0 || v[0] != '[' {
			return "", false, &bodyError{codeInvalidRequest, "`messages` must be an array of messages"}
		}
	}
	if v, _, _, found := jsonfield.Find(body, "stream"); found {
		switch string(v) {
		case "true":
			stream = op == provider.OpChat || op == provider.OpCompletions || op == provider.OpResponses
		case "false", "null":
		default:
			return "", false, &bodyError{codeInvalidRequest, "`stream` must be a boolean"}
		}
	}
	return model, stream, nil
}
