package routingdoc

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The small edits: pure functions from a routing document to the next
// one. Each keeps everything else as it was (order, comments; the layout
// is re-indented the way the document was, a JSON document comes back as
// YAML), returns the document unchanged (the same bytes) when there is
// nothing to do, and fails with ErrNotFound naming what it could not find
// or ErrInvalid naming the bad argument. Store.Edit applies them to the
// active version.

// KeyFields are the integer fields of a provider key SetKeyField changes;
// "enabled" (a boolean) is changed too.
var KeyFields = []string{"priority", "weight"}

// keyFieldsAll are the fields a key may have (config.Key), tripFields
// those of a trip rule (config.TripRule), in the order they are written.
var (
	keyFieldsAll = []string{"id", "secret", "priority", "weight", "enabled"}
	tripFields   = []string{"match", "class", "ttl"}
)

// SetStepActive switches step (0-based) of chain on or off; the step keeps
// its place. A step without an active flag is active.
func SetStepActive(doc []byte, chain string, step int, active bool) ([]byte, error) {
	e, err := parseEditable(doc)
	if err != nil {
		return nil, err
	}
	chains := mapGet(e.root, "chains")
	if chains == nil || chains.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: chain %q: the document has no chains", ErrNotFound, chain)
	}
	c := mapGet(chains, chain)
	if c == nil {
		return nil, fmt.Errorf("%w: chain %q (chains: %s)", ErrNotFound, chain, list(mapKeys(chains)))
	}
	steps := mapGet(c, "steps")
	if steps == nil || steps.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%w: chain %q has no steps", ErrNotFound, chain)
	}
	if step < 0 || step >= len(steps.Content) {
		return nil, fmt.Errorf("%w: chain %q has %d steps (0 to %d); no step %d", ErrNotFound, chain,
			len(steps.Content), len(steps.Content)-1, step)
	}
	s := steps.Content[step]
	if s.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: chains.%s.steps[%d] is not a mapping", ErrInvalid, chain, step)
	}
	isActive := true // no flag (or null): active
	if cur := mapGet(s, "active"); cur != nil {
		isActive = weakBool(cur, isActive)
	}
	if isActive == active {
		return doc, nil
	}
	mapSet(s, "active", scalar("!!bool", strconv.FormatBool(active)))
	return e.encode()
}

// weakBool reads a scalar as the configuration loader does (weakly typed):
// true/false and their spellings (strconv.ParseBool: "1", "f", "FALSE"...),
// a number (non-zero is true), an empty string (false); null or anything
// else keeps def.
func weakBool(n *yaml.Node, def bool) bool {
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		return def
	}
	if b, err := strconv.ParseBool(n.Value); err == nil {
		return b
	}
	if f, err := strconv.ParseFloat(n.Value, 64); err == nil {
		return f != 0
	}
	if n.Value == "" {
		return false
	}
	return def
}

// SetKeyField sets a field (KeyFields: priority, weight) of key keyID of
// provider to value, an integer (an int, or a float or string holding
// one).
func SetKeyField(doc []byte, provider, keyID, field string, value any) ([]byte, error) {
	var text, tag string
	switch {
	case field == "enabled":
		b, ok := value.(bool)
		if !ok {
			return nil, fmt.Errorf("%w: providers.%s.keys.%s.enabled: want true or false, got %v", ErrInvalid, provider, keyID, value)
		}
		text, tag = strconv.FormatBool(b), "!!bool"
	case slices.Contains(KeyFields, field):
		n, err := integer(value)
		if err != nil {
			return nil, fmt.Errorf("%w: providers.%s.keys.%s.%s: %w", ErrInvalid, provider, keyID, field, err)
		}
		text, tag = strconv.FormatInt(n, 10), "!!int"
	default:
		return nil, fmt.Errorf("%w: key field %q cannot be edited (settable: %s, enabled)", ErrInvalid, field, strings.Join(KeyFields, ", "))
	}
	e, err := parseEditable(doc)
	if err != nil {
		return nil, err
	}
	p, err := findProvider(e.root, provider)
	if err != nil {
		return nil, err
	}
	keys := mapGet(p, "keys")
	var k *yaml.Node
	var ids []string
	if keys != nil && keys.Kind == yaml.SequenceNode {
		for _, el := range keys.Content {
			id := scalarOf(mapGet(el, "id"))
			ids = append(ids, id)
			if id == keyID {
				k = el
			}
		}
	}
	if k == nil {
		return nil, fmt.Errorf("%w: provider %q has no key %q (keys: %s)", ErrNotFound, provider, keyID, list(ids))
	}
	if cur := mapGet(k, field); cur != nil && cur.Value == text || cur == nil && field == "enabled" && text == "true" {
		return doc, nil
	}
	mapSet(k, field, scalar(tag, text))
	return e.encode()
}

// AddKey appends a key to provider's keys. key has an id ([A-Za-z0-9_-],
// not used by another key of the provider) and a secret reference
// (env:NAME or file:PATH; an inline value is refused without being
// quoted), and optionally priority and weight.
func AddKey(doc []byte, provider string, key map[string]any) ([]byte, error) {
	id, _ := key["id"].(string)
	if !plainRE.MatchString(id) {
		return nil, fmt.Errorf("%w: the new key of provider %q needs an id made of [A-Za-z0-9_-]", ErrInvalid, provider)
	}
	at := fmt.Sprintf("providers.%s.keys.%s", provider, id)
	for _, f := range sortedKeys(key) {
		if !slices.Contains(keyFieldsAll, f) {
			return nil, fmt.Errorf("%w: %s: unknown field %q (fields: %s)", ErrInvalid, at, f, strings.Join(keyFieldsAll, ", "))
		}
	}
	secret, _ := key["secret"].(string)
	if !isRef(secret) {
		return nil, fmt.Errorf("%w: %s.secret: give a reference (env:NAME or file:PATH), never the secret itself", ErrInvalid, at)
	}
	node := &yaml.Node{Kind: yaml.MappingNode}
	mapSet(node, "id", scalar("!!str", id))
	mapSet(node, "secret", scalar("!!str", secret))
	for _, f := range KeyFields {
		if v, ok := key[f]; ok {
			n, err := integer(v)
			if err != nil {
				return nil, fmt.Errorf("%w: %s.%s: %w", ErrInvalid, at, f, err)
			}
			mapSet(node, f, scalar("!!int", strconv.FormatInt(n, 10)))
		}
	}
	if v, ok := key["enabled"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return nil, fmt.Errorf("%w: %s.enabled: want true or false, got %v", ErrInvalid, at, v)
		}
		mapSet(node, "enabled", scalar("!!bool", strconv.FormatBool(b)))
	}
	e, err := parseEditable(doc)
	if err != nil {
		return nil, err
	}
	p, err := findProvider(e.root, provider)
	if err != nil {
		return nil, err
	}
	keys := mapGet(p, "keys")
	if keys == nil || keys.ShortTag() == "!!null" {
		keys = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		mapSet(p, "keys", keys)
	}
	if keys.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%w: providers.%s.keys is not a list", ErrInvalid, provider)
	}
	for _, el := range keys.Content {
		if scalarOf(mapGet(el, "id")) == id {
			return nil, fmt.Errorf("%w: provider %q already has a key %q", ErrInvalid, provider, id)
		}
	}
	keys.Content = append(keys.Content, node)
	return e.encode()
}

// SetTripRules replaces provider's trip_on rules with rules (name ->
// {match, class, ttl}; a ttl may be a time.Duration or text such as
// "10m"). An empty, non-nil map sets "trip_on: {}" (no rules for this
// provider, not even the global ones); nil removes the provider's trip_on,
// so that the global rules apply.
func SetTripRules(doc []byte, provider string, rules map[string]any) ([]byte, error) {
	var node *yaml.Node
	if rules != nil {
		node = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, name := range sortedKeys(rules) {
			r, ok := rules[name].(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%w: providers.%s.trip_on.%s: want {match, class, ttl}", ErrInvalid, provider, name)
			}
			for _, f := range sortedKeys(r) {
				if !slices.Contains(tripFields, f) {
					return nil, fmt.Errorf("%w: providers.%s.trip_on.%s: unknown field %q (fields: %s)",
						ErrInvalid, provider, name, f, strings.Join(tripFields, ", "))
				}
			}
			rn := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			for _, f := range tripFields {
				var text string
				switch v := r[f].(type) {
				case nil:
					continue
				case string:
					text = v
				case time.Duration:
					text = v.String()
				default:
					return nil, fmt.Errorf("%w: providers.%s.trip_on.%s.%s: want text", ErrInvalid, provider, name, f)
				}
				mapSet(rn, f, scalar("!!str", text))
			}
			mapSet(node, name, rn)
		}
	}
	e, err := parseEditable(doc)
	if err != nil {
		return nil, err
	}
	p, err := findProvider(e.root, provider)
	if err != nil {
		return nil, err
	}
	if node == nil {
		if mapGet(p, "trip_on") == nil {
			return doc, nil
		}
		mapDelete(p, "trip_on")
	} else {
		if len(node.Content) == 0 {
			node.Style = yaml.FlowStyle
		}
		mapSet(p, "trip_on", node)
	}
	return e.encode()
}

// editable is a parsed document: the node tree and how to write it back.
type editable struct {
	doc    *yaml.Node // the document node
	root   *yaml.Node // its mapping
	indent int
}

func parseEditable(doc []byte) (*editable, error) {
	var d yaml.Node
	if err := yaml.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("%w: not a YAML or JSON document: %w", ErrInvalid, err)
	}
	if d.Kind != yaml.DocumentNode || len(d.Content) != 1 || d.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: the document is not a mapping", ErrInvalid)
	}
	e := &editable{doc: &d, root: d.Content[0], indent: 2}
	if t := bytes.TrimSpace(doc); len(t) > 0 && (t[0] == '{') {
		blockStyle(&d) // JSON in, YAML out
		return e, nil
	}
	e.indent = indentOf(&d, doc)
	return e, nil
}

func (e *editable) encode() ([]byte, error) { return encodeNode(e.doc, e.indent) }

func encodeNode(n *yaml.Node, indent int) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(indent)
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("routingdoc: encode the edited document: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("routingdoc: encode the edited document: %w", err)
	}
	return b.Bytes(), nil
}

// indentOf is the indentation the document was written with: the one
// whose encoding gives the document back, else the smallest indentation
// of a line, else 2.
func indentOf(d *yaml.Node, doc []byte) int {
	for _, n := range []int{2, 4} {
		if out, err := encodeNode(d, n); err == nil && bytes.Equal(out, doc) {
			return n
		}
	}
	best := 0
	for line := range strings.SplitSeq(string(doc), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if n := len(line) - len(trimmed); n > 0 && (best == 0 || n < best) {
			best = n
		}
	}
	if best < 2 || best > 8 {
		return 2
	}
	return best
}

// blockStyle clears flow and quoting styles, so a JSON document is
// written as block YAML.
func blockStyle(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle | yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle
	for _, c := range n.Content {
		blockStyle(c)
	}
}

func findProvider(root *yaml.Node, name string) (*yaml.Node, error) {
	ps := mapGet(root, "providers")
	var names []string
	if ps != nil && ps.Kind == yaml.SequenceNode {
		for _, p := range ps.Content {
			n := scalarOf(mapGet(p, "name"))
			if n == name && p.Kind == yaml.MappingNode {
				return p, nil
			}
			names = append(names, n)
		}
	}
	return nil, fmt.Errorf("%w: provider %q (providers: %s)", ErrNotFound, name, list(names))
}

// mapGet returns the value of key in mapping m, or nil.
func mapGet(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// mapSet sets key in mapping m to v, in place, or appends it.
func mapSet(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			// Keep comments attached to the old value.
			v.LineComment, v.HeadComment, v.FootComment =
				m.Content[i+1].LineComment, m.Content[i+1].HeadComment, m.Content[i+1].FootComment
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar("!!str", key), v)
}

func mapDelete(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = slices.Delete(m.Content, i, i+2)
			return
		}
	}
}

func mapKeys(m *yaml.Node) []string {
	var out []string
	for i := 0; i+1 < len(m.Content); i += 2 {
		out = append(out, m.Content[i].Value)
	}
	return out
}

func scalar(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

func scalarOf(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func isRef(s string) bool {
	name, env := strings.CutPrefix(s, "env:")
	path, file := strings.CutPrefix(s, "file:")
	return (env && name != "") || (file && path != "")
}

// integer reads an integer argument: an int type, a float holding an
// integer (JSON numbers), or text holding one.
func integer(v any) (int64, error) {
	switch n := v.(type) {
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case int64:
		return n, nil
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), nil
		}
	case string:
		if i, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64); err == nil {
			return i, nil
		}
	}
	return 0, fmt.Errorf("want an integer, got %v", v)
}
