package routingdoc

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"switchyard.dev/shared/redact"
)

// Op says what a Change is.
type Op string

// The operations.
const (
	OpAdded   Op = "added"
	OpChanged Op = "changed"
	OpRemoved Op = "removed"
)

// Change is one difference between two routing documents.
type Change struct {
	Op Op `json:"op"`
	// Path names what changed by identity, not by place in the text:
	// "providers.openai-eu.keys.k2.weight", "chains.default.steps[1].active",
	// `providers.openai.models["gpt-4.1"]`. A name that is not made of
	// [A-Za-z0-9_-] is written quoted in brackets; chain steps go by
	// position (0-based, as in config messages).
	Path string `json:"path"`
	// Before and After are the values (JSON-friendly: maps, lists, strings,
	// numbers, booleans); an added or removed entity (a provider, a key, a
	// chain step...) comes whole. Secrets appear only as their references;
	// an inline value is masked.
	Before any `json:"before,omitempty"`
	After  any `json:"after,omitempty"`
}

// Changes is the difference between two routing documents, sorted by path.
type Changes struct {
	Changes []Change `json:"changes"`
	Added   int      `json:"added"`
	Changed int      `json:"changed"`
	Removed int      `json:"removed"`
}

// Empty reports whether the documents route the same.
func (c Changes) Empty() bool { return len(c.Changes) == 0 }

// Summary describes the first changes on one line, for a version's edit
// description: "chains.default.steps[1].active: true -> false".
func (c Changes) Summary() string {
	const shown = 3
	if len(c.Changes) == 0 {
		return "no change"
	}
	var parts []string
	for _, ch := range c.Changes[:min(shown, len(c.Changes))] {
		switch ch.Op {
		case OpAdded:
			parts = append(parts, "added "+ch.Path)
		case OpRemoved:
			parts = append(parts, "removed "+ch.Path)
		default:
			parts = append(parts, ch.Path+": "+brief(ch.Before)+" -> "+brief(ch.After))
		}
	}
	s := strings.Join(parts, "; ")
	if n := len(c.Changes) - shown; n > 0 {
		s += fmt.Sprintf(" (and %d more)", n)
	}
	return s
}

func brief(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 60 {
		return string(b[:57]) + "..."
	}
	return string(b)
}

// How the collections of a routing document are identified. Patterns are
// paths with "*" for the name or position of an element.
var (
	// listIdentity: lists whose elements are entities named by a field.
	listIdentity = map[string]func(map[string]any) string{
		"providers":          field("name"),
		"providers.*.keys":   field("id"),
		"providers.*.models": field("name"),
		"clients":            field("id"),
		"prices":             priceIdentity,
	}
	// entityMaps: maps whose entries are entities named by their key.
	entityMaps = map[string]bool{
		"aliases": true, "chains": true, "plans": true, "trip_on": true, "providers.*.trip_on": true,
	}
	// positional: lists whose elements are entities named by position.
	positional = map[string]bool{"chains.*.steps": true}
)

func field(name string) func(map[string]any) string {
	return func(m map[string]any) string {
		s, _ := m[name].(string)
		return s
	}
}

// priceIdentity names a price by what it applies to: "<provider>/<model>",
// "type:<provider type>/<model>", or "*/<model>" for any provider.
func priceIdentity(m map[string]any) string {
	p, _ := m["provider"].(string)
	t, _ := m["provider_type"].(string)
	model, _ := m["model"].(string)
	switch {
	case p != "" && t != "":
		return p + "+type:" + t + "/" + model
	case p != "":
		return p + "/" + model
	case t != "":
		return "type:" + t + "/" + model
	}
	return "*/" + model
}

// Diff compares two routing documents (YAML or JSON; an empty old
// document has nothing) by identity: providers, keys, models, clients and
// prices by name or id (so reordering them is no change, but for the
// providers' order, in which plain model names are tried: a change at path
// "providers" with the names of the providers in both, in order before and
// after), aliases, chains,
// plans and trip rules by name, chain steps by position (so reordering
// steps is), everything else by key path. A list of plain values (a
// client's models, expected statuses) is compared as a set. A chain step
// without an active flag counts as active: true. Values that are
// null count as absent.
func Diff(old, new []byte) (Changes, error) {
	a, err := flatten(old, "old document")
	if err != nil {
		return Changes{}, err
	}
	b, err := flatten(new, "new document")
	if err != nil {
		return Changes{}, err
	}
	var items []item
	inBoth := func(entity string) bool {
		if entity == "" {
			return true
		}
		_, x := a.entities[entity]
		_, y := b.entities[entity]
		return x && y
	}
	for p, e := range b.entities {
		if _, ok := a.entities[p]; !ok && (e.parent == "" || hasEntity(a, e.parent)) {
			items = append(items, item{e.segs, Change{Op: OpAdded, Path: p, After: e.value}})
		}
	}
	for p, e := range a.entities {
		if _, ok := b.entities[p]; !ok && (e.parent == "" || hasEntity(b, e.parent)) {
			items = append(items, item{e.segs, Change{Op: OpRemoved, Path: p, Before: e.value}})
		}
	}
	for p, l := range b.leaves {
		if !inBoth(l.parent) {
			continue
		}
		if o, ok := a.leaves[p]; !ok {
			items = append(items, item{l.segs, Change{Op: OpAdded, Path: p, After: l.value}})
		} else if !equal(o.value, l.value) {
			items = append(items, item{l.segs, Change{Op: OpChanged, Path: p, Before: o.value, After: l.value}})
		}
	}
	for p, l := range a.leaves {
		if _, ok := b.leaves[p]; !ok && inBoth(l.parent) {
			items = append(items, item{l.segs, Change{Op: OpRemoved, Path: p, Before: l.value}})
		}
	}
	if before, after, ok := reordered(a, b); ok {
		items = append(items, item{[]seg{{name: "providers"}}, Change{Op: OpChanged, Path: "providers", Before: before, After: after}})
	}
	slices.SortFunc(items, func(x, y item) int { return compareSegs(x.segs, y.segs) })
	out := Changes{Changes: make([]Change, 0, len(items))}
	for _, it := range items {
		out.Changes = append(out.Changes, it.change)
		switch it.change.Op {
		case OpAdded:
			out.Added++
		case OpChanged:
			out.Changed++
		case OpRemoved:
			out.Removed++
		}
	}
	return out, nil
}

type item struct {
	segs   []seg
	change Change
}

func hasEntity(f *flat, p string) bool { _, ok := f.entities[p]; return ok }

// seg is one step of a path: a name, or a position.
type seg struct {
	name  string
	index int
	isIdx bool
}

var plainRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func render(segs []seg) string {
	var b strings.Builder
	for i, s := range segs {
		switch {
		case s.isIdx:
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case plainRE.MatchString(s.name):
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.name)
		default:
			b.WriteString("[" + strconv.Quote(s.name) + "]")
		}
	}
	return b.String()
}

func compareSegs(x, y []seg) int {
	for i := range min(len(x), len(y)) {
		a, b := x[i], y[i]
		switch {
		case a.isIdx && b.isIdx:
			if c := cmp.Compare(a.index, b.index); c != 0 {
				return c
			}
		case a.isIdx != b.isIdx:
			if a.isIdx {
				return -1
			}
			return 1
		default:
			if c := strings.Compare(a.name, b.name); c != 0 {
				return c
			}
		}
	}
	return cmp.Compare(len(x), len(y))
}

// flat is a document taken apart: its entities (whole) and its leaves,
// each with the path of the entity it belongs to ("" for none).
type flat struct {
	entities map[string]entry
	leaves   map[string]entry
	// providers are the provider names in the document's order: plain
	// model names are tried in it (the priority strategy).
	providers []string
}

type entry struct {
	segs   []seg
	parent string
	value  any
}

func flatten(doc []byte, what string) (*flat, error) {
	f := &flat{entities: map[string]entry{}, leaves: map[string]entry{}}
	if len(strings.TrimSpace(string(doc))) == 0 {
		return f, nil
	}
	var raw any
	if err := yaml.Unmarshal(doc, &raw); err != nil {
		return nil, fmt.Errorf("%w: %s: not a YAML or JSON document: %w", ErrInvalid, what, err)
	}
	if raw == nil {
		return f, nil
	}
	m, ok := normalize(raw, "").(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not a mapping", ErrInvalid, what)
	}
	for _, k := range sortedKeys(m) {
		if m[k] != nil {
			f.walk(m[k], []seg{{name: k}}, k, "")
		}
	}
	if ps, ok := m["providers"].([]any); ok {
		for _, p := range ps {
			if pm, ok := p.(map[string]any); ok {
				f.providers = append(f.providers, field("name")(pm))
			}
		}
	}
	return f, nil
}

// reordered reports whether the providers both documents have come in
// another order in b than in a, and the two orders.
func reordered(a, b *flat) (before, after []any, changed bool) {
	common := func(x []string, in []string) []any {
		var out []any
		for _, n := range x {
			if slices.Contains(in, n) {
				out = append(out, n)
			}
		}
		return out
	}
	before, after = common(a.providers, b.providers), common(b.providers, a.providers)
	return before, after, !slices.Equal(before, after)
}

func (f *flat) walk(v any, segs []seg, pat, parent string) {
	path := render(segs)
	child := func(s seg) []seg { return append(slices.Clip(segs), s) }
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 0 {
			f.leaves[path] = entry{segs, parent, map[string]any{}}
			return
		}
		for _, k := range sortedKeys(v) {
			if v[k] == nil {
				continue
			}
			cs := child(seg{name: k})
			if entityMaps[pat] {
				f.entity(v[k], cs, pat+".*", parent)
			} else {
				f.walk(v[k], cs, pat+"."+k, parent)
			}
		}
	case []any:
		if len(v) == 0 {
			f.leaves[path] = entry{segs, parent, []any{}}
			return
		}
		if id, ok := listIdentity[pat]; ok {
			seen := map[string]int{}
			for i, el := range v {
				name := fmt.Sprintf("#%d", i)
				if m, ok := el.(map[string]any); ok && id(m) != "" {
					name = id(m)
				}
				if seen[name]++; seen[name] > 1 {
					name += fmt.Sprintf("#%d", seen[name])
				}
				f.entity(el, child(seg{name: name}), pat+".*", parent)
			}
			return
		}
		if positional[pat] {
			for i, el := range v {
				if m, ok := el.(map[string]any); ok && pat == "chains.*.steps" && m["active"] == nil {
					m["active"] = true // a step without the flag is active
				}
				f.entity(el, child(seg{index: i, isIdx: true}), pat+".*", parent)
			}
			return
		}
		if scalars(v) {
			s := slices.Clone(v)
			slices.SortFunc(s, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
			f.leaves[path] = entry{segs, parent, s}
			return
		}
		for i, el := range v {
			if el != nil {
				f.walk(el, child(seg{index: i, isIdx: true}), pat+".*", parent)
			}
		}
	default:
		f.leaves[path] = entry{segs, parent, v}
	}
}

// entity records v as an entity at segs and walks its contents.
func (f *flat) entity(v any, segs []seg, pat, parent string) {
	if v == nil {
		return
	}
	path := render(segs)
	f.entities[path] = entry{segs, parent, v}
	f.walk(v, segs, pat, path)
}

func scalars(v []any) bool {
	for _, el := range v {
		switch el.(type) {
		case map[string]any, []any:
			return false
		}
	}
	return true
}

// normalize makes a decoded YAML value JSON-friendly (string map keys,
// times as RFC 3339 text) and masks inline secrets: the value of a
// "secret" key that is not an env: or file: reference.
func normalize(v any, key string) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = normalize(x, k)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			ks := fmt.Sprint(k)
			out[ks] = normalize(x, ks)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalize(x, "")
		}
		return out
	case time.Time:
		return v.Format(time.RFC3339Nano)
	case string:
		if key == "secret" && !strings.HasPrefix(v, "env:") && !strings.HasPrefix(v, "file:") {
			return redact.Mask
		}
		return v
	}
	return v
}

// equal compares two leaf values; numbers by value (3 and 3.0 are equal).
func equal(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	if x, ok := a.([]any); ok {
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
