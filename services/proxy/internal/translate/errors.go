package translate

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every error about a body or event that is not
// valid JSON of the expected shape. For a request it is the caller's fault
// (400); for a response or stream event it is the upstream's (502).
var ErrMalformed = errors.New("malformed body")

// UnsupportedError reports a feature that the body uses and that this
// package cannot yet translate between the two formats. For a request the
// proxy answers the caller with a 400; in a response or stream it means the
// upstream produced something (a tool call, say) the caller's format cannot
// be given yet.
type UnsupportedError struct {
	// Field names the feature: "tools", "tool_choice", "image content", "n > 1", ...
	Field string
}

func (e *UnsupportedError) Error() string {
	return "translation of " + e.Field + " between OpenAI and Anthropic formats is not supported yet"
}

func unsupported(field string) error { return &UnsupportedError{Field: field} }

// malformed wraps a decoding error with what was being decoded.
func malformed(what string, err error) error {
	return fmt.Errorf("decode %s: %w: %w", what, ErrMalformed, err)
}

// malformedAt wraps the error of decoding a request field on its own (at
// names it from the body's root): the caller's message names the field
// from the root.
func malformedAt(at string, err error) error {
	if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) {
		c := *te
		c.Field = at
		if te.Field != "" {
			c.Field += "." + te.Field
		}
		err = &c
	}
	return fmt.Errorf("decode %s: %w: %w", at, ErrMalformed, err)
}

// WrongType reports whether a translation failed on a field of the wrong
// JSON type: a request that is not one of its endpoint's API.
func WrongType(err error) bool {
	if err == nil {
		return false // errors.As below would allocate its target on every request
	}
	var te *json.UnmarshalTypeError
	return errors.Is(err, ErrMalformed) && errors.As(err, &te)
}
