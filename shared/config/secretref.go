package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Secret reference schemes.
const (
	schemeEnv  = "env:"
	schemeFile = "file:"
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// errInlineSecret is the problem reported for a secret written inline.
var errInlineSecret = errors.New("secrets are referenced, not inline: use env:NAME or file:PATH")

// check reports what is wrong with the reference's syntax, never quoting
// it (an inline value is a secret).
func (r SecretRef) check() error {
	s := string(r)
	switch {
	case strings.HasPrefix(s, schemeEnv):
		if !envNameRE.MatchString(strings.TrimPrefix(s, schemeEnv)) {
			return errors.New("env: needs a variable name (env:NAME)")
		}
	case strings.HasPrefix(s, schemeFile):
		if strings.TrimPrefix(s, schemeFile) == "" {
			return errors.New("file: needs a path (file:PATH)")
		}
	default:
		return errInlineSecret
	}
	return nil
}

// errUnresolved marks a reference whose variable is not set or whose file
// does not exist: the case an optional provider tolerates.
var errUnresolved = errors.New("secret not available")

// resolve reads the secret. env: looks the variable up in env; a relative
// file: path is taken relative to dir. Errors name the variable or file,
// never the value.
func (r SecretRef) resolve(env map[string]string, dir string) (Secret, error) {
	s := string(r)
	if name, ok := strings.CutPrefix(s, schemeEnv); ok {
		v := env[name]
		if v == "" {
			return Secret{}, fmt.Errorf("%w: %s is not set", errUnresolved, name)
		}
		return NewSecret(v), nil
	}
	path := strings.TrimPrefix(s, schemeFile)
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Secret{}, fmt.Errorf("%w: file %s does not exist", errUnresolved, path)
	}
	if err != nil {
		// *PathError carries the path and the cause, not the content.
		return Secret{}, fmt.Errorf("read secret: %w", err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return Secret{}, fmt.Errorf("%w: file %s is empty", errUnresolved, path)
	}
	return NewSecret(v), nil
}

// resolveToken is resolve for a secret that goes into, or is compared
// with, an HTTP header (a provider key's secret, a gateway client key, an
// admin token): its value must pass CheckSecret, whatever the provider's
// optional flag (the value is there, and wrong). The error names the
// variable or the file, never the value. A file's trailing line ends are
// trimmed before (resolve), so "sk-...\n" as editors write it passes.
func (r SecretRef) resolveToken(env map[string]string, dir string) (Secret, error) {
	v, err := r.resolve(env, dir)
	if err != nil {
		return Secret{}, err
	}
	if err := v.Check(); err != nil {
		s := string(r)
		if name, ok := strings.CutPrefix(s, schemeEnv); ok {
			return Secret{}, fmt.Errorf("variable %s: %w", name, err)
		}
		path := strings.TrimPrefix(s, schemeFile)
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		return Secret{}, fmt.Errorf("file %s: %w", path, err)
	}
	return v, nil
}

// unresolvedReason strips the errUnresolved prefix for log lines.
func unresolvedReason(err error) string {
	return strings.TrimPrefix(err.Error(), errUnresolved.Error()+": ")
}

// resolveSecrets fills in Key.Value, ClientKey.Value, the guardrails'
// webhook secrets and the NATS secrets.
// Keys' secrets, client keys and admin tokens must pass CheckSecret
// (resolveToken); the NATS password and token go into the NATS CONNECT
// message, not a header, and are taken as given.
// Keys of optional providers whose secret is not available are dropped, and
// an optional provider left without keys is removed and listed in Skipped.
func (c *Config) resolveSecrets(env map[string]string) error {
	dir := "."
	if c.File != "" {
		dir = filepath.Dir(c.File)
	}
	var errs []error
	fail := func(path string, err error) {
		errs = append(errs, fmt.Errorf("%s: %s", c.At(path), unresolvedReason(err)))
	}
	// A routing version's references are bounded by the process's
	// credentials.references (refGuard); the file's are the host's own.
	resolveRouting := func(r SecretRef) (Secret, error) { return r.resolveToken(env, dir) }
	var guard *refGuard
	if c.docName != "" {
		guard = newRefGuard(c, c.fileRefs, env, dir)
		resolveRouting = func(r SecretRef) (Secret, error) { return guard.resolve(r, env) }
	}

	kept := c.Providers[:0]
	for i, p := range c.Providers {
		keys := p.Keys[:0]
		var dropped, reasons []string
		for j, k := range p.Keys {
			v, err := resolveRouting(k.Secret)
			switch {
			case err == nil:
				k.Value = v
				keys = append(keys, k)
			case p.Optional && errors.Is(err, errUnresolved):
				dropped = append(dropped, k.ID)
				reasons = append(reasons, unresolvedReason(err))
			default:
				fail(fmt.Sprintf("providers[%d].keys[%d].secret", i, j), err)
			}
		}
		if len(dropped) > 0 && len(keys) == 0 {
			c.Skipped = append(c.Skipped, p.Name)
			c.Warnings = append(c.Warnings, fmt.Sprintf("provider %s skipped: %s", p.Name, strings.Join(reasons, "; ")))
			continue
		}
		for n, id := range dropped {
			c.Warnings = append(c.Warnings, fmt.Sprintf("provider %s: key %s dropped: %s", p.Name, id, reasons[n]))
		}
		p.Keys = keys
		kept = append(kept, p)
	}
	clear(c.Providers[len(kept):])
	c.Providers = kept

	for i := range c.Clients {
		v, err := resolveRouting(c.Clients[i].Secret)
		if err != nil {
			fail(fmt.Sprintf("clients[%d].secret", i), err)
			continue
		}
		c.Clients[i].Value = v
		for j := range i {
			if c.Clients[j].Value == v {
				fail(fmt.Sprintf("clients[%d].secret", i), fmt.Errorf("same key as clients[%d] (%s): callers must be told apart", j, c.Clients[j].ID))
				break
			}
		}
	}
	for i := range c.Guardrails {
		w := &c.Guardrails[i].Webhook
		if w.Secret == "" {
			continue
		}
		v, err := resolveRouting(w.Secret)
		if err != nil {
			fail(fmt.Sprintf("guardrails[%d].webhook.secret", i), err)
			continue
		}
		w.Value = v
	}
	for _, s := range []struct {
		path string
		ref  SecretRef
		dst  *Secret
	}{
		{"nats.password", c.NATS.Password, &c.NATS.PasswordValue},
		{"nats.token", c.NATS.Token, &c.NATS.TokenValue},
	} {
		if s.ref == "" {
			continue
		}
		v, err := s.ref.resolve(env, dir)
		if err != nil {
			fail(s.path, err)
			continue
		}
		*s.dst = v
	}
	c.resolveAdmin(env, dir, fail)
	return errors.Join(errs...)
}
