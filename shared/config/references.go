package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/knadh/koanf/v2"
)

// References says which secret references a routing version, a document
// stored in NATS and written by whoever may activate versions, may make on
// this process: a version names the secret (env:NAME or file:PATH) and a
// base_url of its own, so an unbounded reference would let an operator of
// the fleet send any of a host's variables or files upstream. The
// process's own file is not bound by it: the references it makes in its
// routing keys are the host owner's, and stay allowed in versions too.
type References struct {
	// EnvPrefixes are the variable-name prefixes a version's env:
	// references may name (a full name is a prefix of itself).
	EnvPrefixes []string `koanf:"env_prefixes"`
	// FileDirs are the directories a version's file: references may read
	// from (the file itself or anything below), absolute paths.
	FileDirs []string `koanf:"file_dirs"`
}

// DefaultEnvPrefixes are the variables a version may name by default: the
// project's own prefix for secrets and the provider keys' usual names.
var DefaultEnvPrefixes = []string{EnvSecretPrefix, "OPENAI_API_KEY", "AZURE_OPENAI_API_KEY",
	"ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY", "GROQ_API_KEY", "MISTRAL_API_KEY",
	"DEEPSEEK_API_KEY", "TOGETHER_API_KEY", "XAI_API_KEY"}

// DefaultFileDirs are the directories a version's file: references may
// read by default: where Docker and Kubernetes mount secrets.
var DefaultFileDirs = []string{"/run/secrets"}

// Errors of a version's secret reference. They say what the process
// decided, never what it found: not whether a file exists, its size or
// its bytes.
var (
	// ErrRefNotAllowed: the reference is outside this process's
	// credentials.references, or names one of its own secrets.
	ErrRefNotAllowed = errors.New("not allowed on this instance (credentials.references)")
	// errRefNotReadable: an allowed reference that gives no usable secret.
	errRefNotReadable = errors.New("not readable")
)

func (v *validator) references() {
	r := v.cfg.Credentials.References
	for i, p := range r.EnvPrefixes {
		if !envNameRE.MatchString(p) {
			v.add(fmt.Sprintf("credentials.references.env_prefixes[%d]", i), "%q: want the start of a variable name (letters, digits, _)", p)
		}
	}
	for i, d := range r.FileDirs {
		if !filepath.IsAbs(d) {
			v.add(fmt.Sprintf("credentials.references.file_dirs[%d]", i), "%q: want an absolute path", d)
		}
	}
}

// refGuard decides the secret references of a routing version on one
// process: those its file makes itself, and those within its References,
// except the process's own secrets.
type refGuard struct {
	refs References
	dir  string
	// trusted are the references the process's file makes in its routing
	// keys.
	trusted map[SecretRef]bool
	// own are the references of the process's own secrets (admin tokens,
	// the credentials key, NATS credentials, the usage store's password),
	// as written.
	own map[SecretRef]bool
	// ownFiles are the files the process reads its own secrets from
	// (cleaned absolute paths).
	ownFiles map[string]bool
	// ownValues are the process's own secrets: a reference that gives one
	// (another variable, a link) is refused all the same.
	ownValues map[string]bool
}

// routingRefs lists the secret references of the routing keys in k (a
// file's raw configuration): providers[].keys[].secret and
// clients[].secret.
func routingRefs(k *koanf.Koanf) map[SecretRef]bool {
	out := map[SecretRef]bool{}
	add := func(m map[string]any) {
		if s, ok := m["secret"].(string); ok && s != "" {
			out[SecretRef(s)] = true
		}
	}
	for _, p := range listOfMaps(k.Get("providers")) {
		for _, key := range listOfMaps(p["keys"]) {
			add(key)
		}
	}
	for _, c := range listOfMaps(k.Get("clients")) {
		add(c)
	}
	for _, g := range listOfMaps(k.Get("guardrails")) {
		if w, ok := g["webhook"].(map[string]any); ok {
			add(w)
		}
	}
	return out
}

// newRefGuard builds the guard of cfg's process; trusted are the
// references of its file's routing keys, env and dir what references
// resolve against.
func newRefGuard(cfg *Config, trusted map[SecretRef]bool, env map[string]string, dir string) *refGuard {
	g := &refGuard{refs: cfg.Credentials.References, dir: dir, trusted: trusted,
		own: map[SecretRef]bool{}, ownFiles: map[string]bool{}, ownValues: map[string]bool{}}
	ownRef := func(r SecretRef) {
		if r == "" {
			return
		}
		g.own[r] = true
		if p, ok := strings.CutPrefix(string(r), schemeFile); ok {
			g.ownFiles[realPath(g.abs(p))] = true
		}
		if v, err := r.resolve(env, dir); err == nil {
			g.ownValues[v.Reveal()] = true
			g.ownValues[strings.TrimSpace(v.Reveal())] = true
		}
	}
	for _, t := range cfg.Admin.Tokens {
		ownRef(t.Secret)
	}
	ownRef(cfg.Credentials.EncryptionKey)
	ownRef(cfg.NATS.Password)
	ownRef(cfg.NATS.Token)
	ownRef(cfg.Metering.Store.Password)
	for _, f := range []string{cfg.NATS.CredsFile, cfg.NATS.TLS.KeyFile} {
		if f != "" {
			g.ownFiles[realPath(g.abs(f))] = true
		}
	}
	return g
}

func (g *refGuard) abs(p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(g.dir, p)
	}
	return filepath.Clean(p)
}

// allow reports whether a version may use r on this process.
func (g *refGuard) allow(r SecretRef) bool {
	if g.own[r] {
		return false
	}
	s := string(r)
	if name, ok := strings.CutPrefix(s, schemeEnv); ok {
		return g.trusted[r] || slices.ContainsFunc(g.refs.EnvPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
	}
	// The file's real location decides (.. and links resolved): a link
	// inside an allowed directory to a file outside it is outside.
	real := realPath(g.abs(strings.TrimPrefix(s, schemeFile)))
	if g.ownFiles[real] || slices.ContainsFunc(platformCredentialDirs, func(d string) bool { return within(real, realPath(d)) }) {
		return false
	}
	if g.trusted[r] {
		return true
	}
	return slices.ContainsFunc(g.refs.FileDirs, func(d string) bool { return within(real, realPath(d)) })
}

// platformCredentialDirs hold the credentials a platform gives the
// process itself (Kubernetes service account tokens, cloud workload
// identity tokens), below the directories secrets are usually mounted
// in: a version never reads them, whatever file_dirs says.
var platformCredentialDirs = []string{
	"/run/secrets/kubernetes.io", "/var/run/secrets/kubernetes.io",
	"/run/secrets/eks.amazonaws.com", "/var/run/secrets/eks.amazonaws.com",
	"/run/secrets/azure", "/var/run/secrets/azure",
	"/run/secrets/tokens", "/var/run/secrets/tokens",
}

// realPath is p (absolute, clean) with its links resolved as far as it
// exists: the deepest existing ancestor is resolved and the rest kept, so
// that a missing file gets the same answer as one that exists.
func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	parent := filepath.Dir(p)
	if parent == p {
		return p
	}
	return filepath.Join(realPath(parent), filepath.Base(p))
}

// within reports whether path is dir or below it (both clean).
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, string(os.PathSeparator))+string(os.PathSeparator))
}

// resolve resolves a version's reference at path. Its errors say
// ErrRefNotAllowed, or that an allowed reference is not set or not
// readable, never why a file could not be read nor what it held: a
// version's author learns nothing of the host beyond its own allowlist.
// An unset variable or a missing file still wraps errUnresolved, so an
// optional provider drops the key as it does for its file.
func (g *refGuard) resolve(r SecretRef, env map[string]string) (Secret, error) {
	if !g.allow(r) {
		return Secret{}, fmt.Errorf("%s: %w", r, ErrRefNotAllowed)
	}
	v, err := r.resolve(env, g.dir)
	if err != nil {
		// A missing file and one this process may not read are told
		// apart neither by the message nor by what an optional provider
		// does (drops the key).
		what := "is not set"
		if strings.HasPrefix(string(r), schemeFile) {
			what = "is " + errRefNotReadable.Error()
		}
		return Secret{}, fmt.Errorf("%w: %s %s", errUnresolved, r, what)
	}
	if g.ownValues[v.Reveal()] {
		return Secret{}, fmt.Errorf("%s: %w", r, ErrRefNotAllowed)
	}
	if v.Check() != nil {
		return Secret{}, fmt.Errorf("%s: %w: %w", r, errRefNotReadable, ErrSecretBytes)
	}
	return v, nil
}
