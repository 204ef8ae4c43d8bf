package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/v2"
	yaml3 "go.yaml.in/yaml/v3"
)

// RoutableKeys are the top-level keys of the routing configuration: what
// the fleet keeps as versioned documents in NATS and changes at runtime.
// The rest (listeners, NATS, logging, limits, timeouts, retries, the
// admin's tokens, credentials, metering) is the process's own and stays
// in the file.
var RoutableKeys = []string{"providers", "aliases", "chains", "clients", "plans", "guardrails", "prices", "trip_on", "resilience", "routing"}

// Routable reports whether a key path belongs to the routing
// configuration.
func Routable(path string) bool {
	top, _, _ := strings.Cut(path, ".")
	if i := strings.IndexByte(top, '['); i >= 0 {
		top = top[:i]
	}
	return slices.Contains(RoutableKeys, top)
}

// LoadDocument is Load with the routing configuration (RoutableKeys) taken
// from doc, a YAML or JSON document, instead of the file: the file gives
// the process-level settings and its routable keys are ignored. Messages
// about the document's keys name docName ("config version 7").
// SWITCHYARD_* variables of routable keys are ignored (each is named in
// Warnings): the routing configuration is the fleet's, the same on every
// instance.
func LoadDocument(path string, environ []string, doc []byte, docName string) (*Config, error) {
	if docName == "" {
		docName = "routing document"
	}
	raw, err := parseDocument(doc, docName)
	if err != nil {
		return nil, err
	}
	return load(path, environ, &document{raw: raw, name: docName})
}

// parseDocument parses a routing document and checks its keys.
func parseDocument(doc []byte, docName string) (map[string]any, error) {
	raw, err := yaml.Parser().Unmarshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: not a YAML or JSON document: %w", docName, err)
	}
	var problems []error
	for _, key := range sortedKeys(raw) {
		if !slices.Contains(RoutableKeys, key) {
			problems = append(problems, fmt.Errorf("%s: %s: not part of the routing configuration (set it in the file; routable keys: %s)",
				docName, key, strings.Join(RoutableKeys, ", ")))
		}
	}
	var unknown []string
	unknownKeys(raw, reflect.TypeFor[Config](), "", &unknown)
	for _, p := range unknown {
		if Routable(p) {
			problems = append(problems, fmt.Errorf("%s: %s: unknown key", docName, p))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return raw, nil
}

// LoadOverlay is LoadDocument over an already loaded configuration: the
// process-level settings are base's (as its file and environment gave
// them), the routing configuration is doc's. It is how a running service
// turns a new version of the fleet's routing configuration into the
// configuration it applies.
func LoadOverlay(base *Config, environ []string, doc []byte, docName string) (*Config, error) {
	if docName == "" {
		docName = "routing document"
	}
	raw, err := parseDocument(doc, docName)
	if err != nil {
		return nil, err
	}
	return load(base.File, environ, &document{raw: raw, name: docName, base: base})
}

// SameRouting reports whether two configurations route the same way:
// their routing keys are equal (secrets compared by fingerprint).
func SameRouting(a, b *Config) bool {
	ja, errA := canonicalRouting(a)
	jb, errB := canonicalRouting(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// canonicalRouting is the routing part of c as JSON, empty lists and maps
// written as absent (a file's "chains: {}" and no chains route alike).
func canonicalRouting(c *Config) ([]byte, error) {
	j, err := json.Marshal(routingOf(c))
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(j, &v); err != nil {
		return nil, err
	}
	return json.Marshal(dropEmpty(v))
}

func dropEmpty(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e = dropEmpty(e); e == nil {
				delete(x, k)
			} else {
				x[k] = e
			}
		}
		if len(x) == 0 {
			return nil
		}
	case []any:
		for i := range x {
			x[i] = dropEmpty(x[i])
		}
		if len(x) == 0 {
			return nil
		}
	}
	return v
}

// routingOf is the routing part of c, for comparisons.
func routingOf(c *Config) any {
	return struct {
		Providers  []Provider
		Aliases    map[string]string
		Chains     map[string]Chain
		Clients    []ClientKey
		Plans      map[string]Plan
		Prices     []Price
		TripOn     map[string]TripRule
		Resilience Resilience
		Routing    Routing
	}{c.Providers, c.Aliases, c.Chains, c.Clients, c.Plans, c.Prices, c.TripOn, c.Resilience, c.Routing}
}

// document is a routing document for load.
type document struct {
	raw  map[string]any
	name string
	// base, when set, gives the process-level settings instead of the
	// defaults and the file (LoadOverlay).
	base *Config
}

// merge replaces the routable keys of k with the document's.
func (d *document) merge(k *koanf.Koanf) error {
	for _, key := range RoutableKeys {
		k.Delete(key)
	}
	return k.Load(confmap.Provider(d.raw, ""), nil)
}

// ExtractDocument returns the routing configuration of the YAML file at
// path (its RoutableKeys, as written: in the file's order, with its
// comments; secrets stay references) as a YAML document: what is imported
// as the first version of the fleet's routing configuration.
func ExtractDocument(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	doc, _, err := ExtractRouting(b, path)
	return doc, err
}

// ExtractRouting is ExtractDocument of a configuration's text b (YAML or
// JSON; name names it in errors); other reports whether b had top-level
// keys besides RoutableKeys (a full configuration file, not a routing
// document).
func ExtractRouting(b []byte, name string) (doc []byte, other bool, err error) {
	var root yaml3.Node
	if err := yaml3.Unmarshal(b, &root); err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	out := &yaml3.Node{Kind: yaml3.MappingNode}
	if len(root.Content) == 1 && root.Content[0].Kind == yaml3.MappingNode {
		m := root.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if slices.Contains(RoutableKeys, m.Content[i].Value) {
				out.Content = append(out.Content, m.Content[i], m.Content[i+1])
			} else {
				other = true
			}
		}
	}
	var buf bytes.Buffer
	enc := yaml3.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, false, err
	}
	return buf.Bytes(), other, nil
}
