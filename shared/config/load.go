package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/structs"
	"github.com/knadh/koanf/v2"
)

const (
	envPrefix = "SWITCHYARD_"
	// EnvConfigPath names the variable holding the config file path; Load
	// ignores it (the launcher reads it to find path).
	EnvConfigPath = "SWITCHYARD_CONFIG"
	// envReservedTrip is reserved for trip_on rules set from the
	// environment (SWITCHYARD_TRIP_<NAME>_MATCH/_CLASS/_TTL): the override
	// pass skips them and compileRules reads them with
	// failure.RulesFromEnv.
	envReservedTrip = "SWITCHYARD_TRIP_"
	// EnvSecretPrefix starts the names of variables that hold secrets
	// (SWITCHYARD_SECRET_OPENAI_EU): the override pass skips them, and
	// routing versions may name them by default (References).
	EnvSecretPrefix = "SWITCHYARD_SECRET_"
)

// Load reads the configuration: Defaults, then the YAML file at path (none
// when path is ""), then SWITCHYARD_* variables from environ (os.Environ()
// in production). It resolves every secret reference (env: from environ,
// file: relative to the file's directory), removes optional providers whose
// secrets are not set (listing them in Skipped), and validates the result.
//
// Errors name the file and key path, or the variable; they never carry a
// secret value.
func Load(path string, environ []string) (*Config, error) {
	return load(path, environ, nil)
}

// load is Load, with the routing configuration from doc when it is set.
func load(path string, environ []string, doc *document) (*Config, error) {
	k := koanf.New(".")
	switch {
	case doc != nil && doc.base != nil:
		// a loaded configuration's settings (its file and environment
		// already applied)
		if err := k.Load(structs.Provider(doc.base, "koanf"), nil); err != nil {
			return nil, fmt.Errorf("load settings: %w", err)
		}
	default:
		if err := k.Load(structs.Provider(Defaults(), "koanf"), nil); err != nil {
			return nil, fmt.Errorf("load defaults: %w", err)
		}
		if path != "" {
			if err := loadFile(k, path); err != nil {
				return nil, err
			}
		}
	}
	var warnings []string
	// The references the file's own routing keys make: a version may use
	// them on this process (refGuard).
	var trusted map[SecretRef]bool
	switch {
	case doc == nil:
	case doc.base != nil:
		trusted = doc.base.fileRefs
	default:
		trusted = routingRefs(k)
	}
	if doc != nil {
		if err := doc.merge(k); err != nil {
			return nil, fmt.Errorf("%s: %w", doc.name, err)
		}
	}
	env := envMap(environ)
	if doc != nil {
		for name := range env {
			if key, ok := envKeys()[name]; ok && Routable(key.path) {
				warnings = append(warnings, fmt.Sprintf("%s ignored: %s comes from the fleet's routing configuration (%s)", name, key.path, doc.name))
				delete(env, name)
			}
		}
	}
	var fromEnv map[string]string
	var err error
	if doc != nil && doc.base != nil {
		fromEnv = doc.base.fromEnv // the variables are in the settings already
	} else if fromEnv, err = loadEnv(k, env); err != nil {
		return nil, err
	}
	if err := applyElementDefaults(k); err != nil {
		return nil, fmt.Errorf("load configuration: %w", err)
	}

	cfg := &Config{fromEnv: fromEnv, Warnings: warnings, fileRefs: trusted}
	if doc != nil {
		cfg.docName = doc.name
	} else {
		cfg.fileRefs = routingRefs(k)
	}
	err = k.UnmarshalWithConf("", cfg, koanf.UnmarshalConf{DecoderConfig: &mapstructure.DecoderConfig{
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			bareNumberDuration,
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
		),
		WeaklyTypedInput: true,
		ErrorUnused:      true, // unknownKeys reports these first, with better paths
		TagName:          "koanf",
	}})
	cfg.File = path
	if err != nil {
		return nil, cfg.decodeErrors(err)
	}
	for i := range cfg.Providers {
		if cfg.Providers[i].BaseURL == "" {
			cfg.Providers[i].BaseURL = DefaultBaseURL(cfg.Providers[i].Type)
		}
	}

	// Validate before resolving, so that a mistake in an optional provider
	// fails the load whether or not its secrets happen to be set.
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.compileRules(environ); err != nil {
		return nil, err
	}
	if err := cfg.resolveSecrets(env); err != nil {
		return nil, err
	}
	cfg.markUnavailable()
	return cfg, nil
}

// source names where a problem comes from in error messages.
func source(path string) string {
	if path == "" {
		return "config"
	}
	return path
}

// loadFile merges the YAML file at path into k, failing on keys the schema
// does not know.
func loadFile(k *koanf.Koanf, path string) error {
	fk := koanf.New(".")
	if err := fk.Load(file.Provider(path), yaml.Parser()); err != nil {
		return fmt.Errorf("load %s: %w", path, err)
	}
	var unknown []string
	unknownKeys(fk.Raw(), reflect.TypeFor[Config](), "", &unknown)
	if len(unknown) > 0 {
		errs := make([]error, len(unknown))
		for i, p := range unknown {
			errs[i] = fmt.Errorf("%s: %s: unknown key", path, p)
		}
		return errors.Join(errs...)
	}
	return k.Merge(fk)
}

// envMap turns "NAME=value" entries into a map; the first entry of a name
// wins, as with os.Getenv.
func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if _, dup := m[name]; !dup {
			m[name] = value
		}
	}
	return m
}

// loadEnv merges SWITCHYARD_<SECTION>_<KEY> variables into k. A variable is
// matched against the known key paths as a whole, so underscores inside
// keys are unambiguous; lists take comma-separated values. It returns the
// key paths it set, each with its variable.
func loadEnv(k *koanf.Koanf, env map[string]string) (map[string]string, error) {
	known := envKeys()
	overrides := map[string]any{}
	set := map[string]string{}
	var errs []error
	for _, name := range sortedKeys(env) {
		if !strings.HasPrefix(name, envPrefix) || name == EnvConfigPath || strings.HasPrefix(name, envReservedTrip) || strings.HasPrefix(name, EnvSecretPrefix) {
			continue
		}
		key, ok := known[name]
		if !ok {
			errs = append(errs, fmt.Errorf("environment: %s: matches no configuration key (see configs/README.md)", name))
			continue
		}
		var value any = env[name]
		if key.list {
			value = splitList(env[name])
		}
		setPath(overrides, strings.Split(key.path, "."), value)
		set[key.path] = name
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return set, k.Load(confmap.Provider(overrides, ""), nil)
}

// decodeErrors turns the decoder's errors into one line per problem in the
// "<file>: <key path>: <problem>" form.
func (c *Config) decodeErrors(err error) error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case *mapstructure.DecodeError:
			path := x.Name()
			if i := strings.IndexByte(path, '['); i >= 0 && c.fromEnv[path[:i]] != "" {
				path = path[:i] // an element of a list set from the environment
			}
			out = append(out, fmt.Errorf("%s: %s", c.At(path), x.Unwrap()))
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			if inner := x.Unwrap(); inner != nil {
				walk(inner)
				return
			}
			out = append(out, fmt.Errorf("%s: %w", source(c.File), e))
		default:
			out = append(out, fmt.Errorf("%s: %w", source(c.File), e))
		}
	}
	walk(err)
	return errors.Join(out...)
}

// At names a key path in messages: "<file>: <path>" ("<routing
// version>: <path>" for a routing key that came from a fleet version), with
// the variable when the value came from the environment.
func (c *Config) At(path string) string {
	if c.docName != "" && Routable(path) {
		return c.docName + ": " + path
	}
	if name, ok := c.fromEnv[path]; ok {
		return fmt.Sprintf("%s: %s (from %s)", source(c.File), path, name)
	}
	return source(c.File) + ": " + path
}

// splitList splits a comma-separated value, dropping blanks.
func splitList(s string) []any {
	out := []any{}
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func setPath(m map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

// applyElementDefaults fills in, for each provider, key and model element,
// the keys it omits. It works on the raw map so that an explicit value
// (weight: 0) stays distinguishable from an absent one.
func applyElementDefaults(k *koanf.Koanf) error {
	providers, ok := k.Get("providers").([]any)
	if !ok {
		return nil
	}
	for _, p := range providers {
		pm, ok := p.(map[string]any)
		if !ok {
			continue
		}
		setDefault(pm, "selection", DefaultSelection)
		for _, key := range listOfMaps(pm["keys"]) {
			setDefault(key, "priority", DefaultKeyPriority)
			setDefault(key, "weight", DefaultKeyWeight)
		}
		for _, model := range listOfMaps(pm["models"]) {
			setDefault(model, "kind", DefaultModelKind)
		}
	}
	return k.Load(confmap.Provider(map[string]any{"providers": providers}, ""), nil)
}

func setDefault(m map[string]any, key string, v any) {
	if _, ok := m[key]; !ok {
		m[key] = v
	}
}

func listOfMaps(v any) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// bareNumberDuration rejects a duration written as a bare number (which
// would mean nanoseconds); 0 is accepted.
func bareNumberDuration(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if !reflect.ValueOf(data).IsZero() && from != durationType {
			return nil, errors.New(`a duration needs a unit, like "30s" or "100ms"`)
		}
	}
	return data, nil
}
