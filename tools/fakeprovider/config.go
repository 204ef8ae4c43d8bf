package fakeprovider

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// ParseOptions reads Options from YAML (the binary's config file): the
// snake_case keys of Options and Rule, durations as strings like "250ms".
// Unknown keys are an error. The result is validated.
func ParseOptions(data []byte) (Options, error) {
	var o Options
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&o); err != nil && !errors.Is(err, io.EOF) {
		return Options{}, fmt.Errorf("parse fake provider options: %w", err)
	}
	if err := o.Validate(); err != nil {
		return Options{}, fmt.Errorf("validate fake provider options: %w", err)
	}
	return o, nil
}

// LoadOptions reads Options from a YAML file (see ParseOptions).
func LoadOptions(path string) (Options, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Options{}, fmt.Errorf("load fake provider options: %w", err)
	}
	o, err := ParseOptions(data)
	if err != nil {
		return Options{}, fmt.Errorf("%s: %w", path, err)
	}
	return o, nil
}
