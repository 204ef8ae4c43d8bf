package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"
)

// The schema of the configuration is the Config struct's koanf tags. The
// helpers here derive from it the documented key paths, the keys the
// environment may override, and the unknown keys of a parsed file.

var durationType = reflect.TypeFor[time.Duration]()

// tagName returns the koanf key of a struct field, or "" when the field is
// not part of the configuration (no tag, or "-").
func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

// isLeaf reports whether values of t are set as one value (scalars and
// lists of scalars), as opposed to sections, lists of sections and maps.
func isLeaf(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return false
	case reflect.Slice:
		return isLeaf(t.Elem()) && t.Elem().Kind() != reflect.Slice
	}
	return true
}

// walkKeys calls visit for every leaf key path under t: struct fields are
// joined with ".", list elements written "[]" and map entries ".<name>".
func walkKeys(t reflect.Type, prefix string, visit func(path string, t reflect.Type)) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isLeaf(t) {
		visit(prefix, t)
		return
	}
	join := func(name string) string {
		if prefix == "" {
			return name
		}
		return prefix + "." + name
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			if name := tagName(t.Field(i)); name != "" {
				walkKeys(t.Field(i).Type, join(name), visit)
			}
		}
	case reflect.Slice:
		walkKeys(t.Elem(), prefix+"[]", visit)
	case reflect.Map:
		walkKeys(t.Elem(), join("<name>"), visit)
	}
}

// KeyPaths returns every key path of the configuration, sorted, in the
// notation configs/README.md uses (e.g. "providers[].keys[].weight",
// "chains.<name>.steps[].target").
func KeyPaths() []string {
	var out []string
	walkKeys(reflect.TypeFor[Config](), "", func(p string, _ reflect.Type) { out = append(out, p) })
	sort.Strings(out)
	return out
}

// envKeys maps each SWITCHYARD_* variable name to the key path it sets:
// every leaf that is reached through sections only (not through a list or
// a map), e.g. SWITCHYARD_NATS_EMBEDDED_STORE_DIR -> nats.embedded.store_dir.
func envKeys() map[string]envKey {
	out := map[string]envKey{}
	walkKeys(reflect.TypeFor[Config](), "", func(p string, t reflect.Type) {
		if strings.ContainsAny(p, "[<") {
			return
		}
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(p, ".", "_"))
		if prev, ok := out[name]; ok {
			// A programming error: two keys would share a variable.
			panic(fmt.Sprintf("config: %s and %s both map to %s", prev.path, p, name))
		}
		out[name] = envKey{path: p, list: t.Kind() == reflect.Slice}
	})
	return out
}

type envKey struct {
	path string
	list bool // comma-separated
}

// unknownKeys appends the path of every key in v (a parsed file) that t
// does not define. Values of the wrong shape are left to the decoder.
func unknownKeys(v any, t reflect.Type, path string, out *[]string) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isLeaf(t) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			if name := tagName(t.Field(i)); name != "" {
				fields[name] = t.Field(i).Type
			}
		}
		for _, k := range sortedKeys(m) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			ft, ok := fields[k]
			if !ok {
				*out = append(*out, p)
				continue
			}
			unknownKeys(m[k], ft, p, out)
		}
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			return
		}
		for i, e := range list {
			unknownKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		for _, k := range sortedKeys(m) {
			unknownKeys(m[k], t.Elem(), path+"."+k, out)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
